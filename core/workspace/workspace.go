// Package workspace owns the host directories that sandboxes see as their
// working directories: naming, creation, the quota, reading files back
// without following links, and removal. Host services (for plugins) and the
// engine (for sessions) both go through it, so a session's files have one
// owner.
package workspace

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// MaxSessionID is the longest session id. No file name is the id itself
// past nameMax characters (DirName), so this cap is the API's, not a path
// limit's.
const MaxSessionID = 128

// SessionIDPattern is what a session id may look like.
var SessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// ErrBadSessionID is a session id that does not match SessionIDPattern.
var ErrBadSessionID = errors.New("invalid session id: use 1-128 letters, digits, '-' or '_', starting with a letter or digit")

// nameMax is the longest id that is its own file name: 48, the cap on ids
// before they could be longer, so that every directory an earlier version
// named (workspaces, checkpoints) keeps its name after an upgrade, and the
// kernels' socket paths below a workspace never grow.
const nameMax = 48

// nameHash is how many hex digits of the id's SHA-256 a derived name
// carries: 64 bits, beyond reach of a collision among one owner's ids.
const nameHash = 16

// DirName is the file name derived from a valid session id, for anything
// named after one (a workspace, a checkpoint). An id of up to nameMax
// characters is its own name; a longer one is its first characters for
// the reader, '~' and a hash of the whole id, nameMax characters in all.
// No id contains '~', so a derived name never equals a short id's.
func DirName(id string) string {
	if len(id) <= nameMax {
		return id
	}
	h := sha256.Sum256([]byte(id))
	return id[:nameMax-nameHash-1] + "~" + hex.EncodeToString(h[:])[:nameHash]
}

// CheckSessionID refuses an id that could not name a workspace.
func CheckSessionID(id string) error {
	if !SessionIDPattern.MatchString(id) {
		return fmt.Errorf("session id %q: %w", id, ErrBadSessionID)
	}
	return nil
}

// Manager creates and removes the workspaces of one server process under
// <base>/sessions. Two servers sharing a base path have different tags, so
// they never share or delete each other's files.
type Manager struct {
	base  string
	tag   string
	quota int64
	fs    Provisioner

	mu          sync.Mutex
	provisioned map[string]bool   // workspace paths with a live filesystem
	claimed     map[string]string // session workspace name → the plugin that made it
	bound       map[string]string // session id → the pool workspace id it was given (Bind)
	boundBy     map[string]string // pool workspace id → the session it belongs to
	full        map[string]bool   // workspace paths found full (CheckFull): a fill is reported once
	// remote: the sandboxes' workspaces live where they run (a pod); the
	// directories here are only what each starts with.
	remote bool
	// syncs are copies from a remote sandbox into a workspace's sync
	// directory under way (BeginSync); Close waits for them, so that a
	// server's stop does not leave one half written.
	syncs  sync.WaitGroup
	closed bool
}

// ErrRemote refuses a session's files on a runtime whose workspaces live
// in the sandboxes (Kubernetes): the core's copy is not what the session holds.
var ErrRemote = errors.New("the runtime keeps this session's files in its sandbox and cannot copy them for a checkpoint")

// SetRemote says that the runtime keeps workspaces where its sandboxes run.
func (m *Manager) SetRemote() { m.remote = true }

// Provisioner gives each workspace its own size-limited filesystem, so the
// kernel enforces the quota (fsquota.Quota). Release undoes Provision.
type Provisioner interface {
	Provision(path string, size int64, uid, gid int) error
	Release(path string) error
	Enforced() bool
}

// New returns a manager; quota is the byte cap of one workspace (0: none).
// With a nil provisioner workspaces are plain directories.
func New(base, serverTag string, quota int64, fs Provisioner) *Manager {
	return &Manager{base: base, tag: serverTag, quota: quota, fs: fs, provisioned: map[string]bool{}, claimed: map[string]string{}, bound: map[string]string{}, boundBy: map[string]string{}, full: map[string]bool{}}
}

// Enforced reports whether the kernel enforces the quota (a filesystem per
// workspace); if not, only a periodic walk of visible files bounds it.
func (m *Manager) Enforced() bool { return m.fs != nil && m.fs.Enforced() }

// Root is the directory holding every workspace.
func (m *Manager) Root() string { return filepath.Join(m.base, "sessions") }

// Quota is the byte cap of one workspace (0: none).
func (m *Manager) Quota() int64 { return m.quota }

// Workspace is one sandbox's directory on the host.
type Workspace struct {
	Name      string // directory name under Root: what the policy matches mounts against
	Path      string
	SessionID string // the session, or a fresh run id for an ephemeral workspace
	Ephemeral bool   // lives for one run; removed with its container
}

// name is a session's directory name: its DirName plus the server's tag.
func (m *Manager) name(sessionID string) string { return DirName(sessionID) + "." + m.tag }

// SessionName is the directory name a session id would have on its own,
// whatever workspace it is bound to (for names derived from the session,
// such as its checkpoint's).
func (m *Manager) SessionName(sessionID string) string { return m.name(sessionID) }

// resolve is the workspace id a session's files live under: the pool
// workspace it was bound to, else its own.
func (m *Manager) resolve(sessionID string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w, ok := m.bound[sessionID]; ok {
		return w
	}
	return sessionID
}

// SessionPath is where a session's files live (whether or not they exist):
// the workspace it was bound to (Bind), else its own.
func (m *Manager) SessionPath(sessionID string) string {
	return filepath.Join(m.Root(), m.name(m.resolve(sessionID)))
}

// ErrBind is a refused Bind.
var ErrBind = errors.New("cannot bind workspace")

// Bind gives session sessionID the workspace poolID, which plugin
// created for a kernel it started before the session existed: from then on
// the session's files, checkpoints and quota are that workspace's, and a
// container created for sessionID mounts it. A pool workspace belongs to one
// session only, and a session that already has files of its own (or another
// binding) cannot switch.
func (m *Manager) Bind(sessionID, poolID, plugin string) error {
	if err := CheckSessionID(sessionID); err != nil {
		return err
	}
	if err := CheckSessionID(poolID); err != nil {
		return err
	}
	if sessionID == poolID {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bound[sessionID] == poolID && m.boundBy[poolID] == sessionID {
		return nil // bound already (a takeover tried again)
	}
	pool := filepath.Join(m.Root(), m.name(poolID))
	switch {
	case m.claimed[m.name(poolID)] != plugin || !m.provisioned[pool]:
		return fmt.Errorf("%w %s to session %s: %s did not create it", ErrBind, poolID, sessionID, plugin)
	case m.boundBy[poolID] != "":
		return fmt.Errorf("%w %s to session %s: it belongs to session %s", ErrBind, poolID, sessionID, m.boundBy[poolID])
	case m.bound[sessionID] != "":
		return fmt.Errorf("%w %s to session %s: the session has workspace %s", ErrBind, poolID, sessionID, m.bound[sessionID])
	case m.provisioned[filepath.Join(m.Root(), m.name(sessionID))]:
		return fmt.Errorf("%w %s to session %s: the session has a workspace of its own", ErrBind, poolID, sessionID)
	}
	if _, ok := m.bound[poolID]; ok {
		return fmt.Errorf("%w %s to session %s: %s is itself a bound session", ErrBind, poolID, sessionID, poolID)
	}
	m.bound[sessionID], m.boundBy[poolID] = poolID, sessionID
	// The session's files are the core's now: the plugin may no longer
	// remove them as its own.
	delete(m.claimed, m.name(poolID))
	return nil
}

// Bound is the pool workspace a session was bound to ("" if none).
func (m *Manager) Bound(sessionID string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bound[sessionID]
}

// Create makes the workspace of a session, or with sessionID "" a fresh
// ephemeral one for a single run.
func (m *Manager) Create(sessionID string) (*Workspace, error) {
	w := &Workspace{SessionID: sessionID}
	if sessionID == "" {
		w.SessionID, w.Ephemeral = newRunID(), true
		w.Name = w.SessionID
	} else {
		if err := CheckSessionID(sessionID); err != nil {
			return nil, err
		}
		// A bound session's later containers (a restarted kernel) mount
		// the workspace it was bound to.
		w.Name = m.name(m.resolve(sessionID))
	}
	w.Path = filepath.Join(m.Root(), w.Name)
	if err := m.provision(w.Path); err != nil {
		return nil, err
	}
	return w, nil
}

// provision creates the workspace directory once; a session's later
// containers (a restarted kernel) reuse it.
func (m *Manager) provision(path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.provisioned[path] {
		if _, err := os.Lstat(path); err == nil {
			return nil
		}
		delete(m.provisioned, path) // removed behind our back: make it again
	}
	if m.fs == nil || m.quota <= 0 {
		if err := os.MkdirAll(path, 0o711); err != nil {
			return fmt.Errorf("create workspace: %w", err)
		}
	} else if err := m.fs.Provision(path, m.quota, -1, -1); err != nil {
		// -1: Podman's U bind option gives the mounted directories to the
		// sandbox user, whatever user namespace it runs in.
		return fmt.Errorf("create workspace: %w%s", err, quotaHint(m.fs)) // rootless.go
	}
	m.provisioned[path] = true
	return nil
}

// Remove deletes a workspace and everything in it.
func (m *Manager) Remove(w *Workspace) error { return m.remove(w.Path) }

// RemoveSession deletes a session's workspace.
func (m *Manager) RemoveSession(sessionID string) error {
	if CheckSessionID(sessionID) != nil {
		return nil // no such workspace can exist
	}
	m.mu.Lock()
	id := sessionID
	if w, ok := m.bound[sessionID]; ok {
		id = w
		delete(m.bound, sessionID)
		delete(m.boundBy, w)
	}
	delete(m.claimed, m.name(id))
	m.mu.Unlock()
	return m.remove(filepath.Join(m.Root(), m.name(id)))
}

func (m *Manager) remove(path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.provisioned[path] && m.fs != nil && m.quota > 0 {
		if err := m.fs.Release(path); err != nil {
			return fmt.Errorf("remove workspace: %w", err)
		}
	}
	delete(m.provisioned, path)
	delete(m.full, path)
	return removeAll(path) // rootless.go
}

// Replace puts the tree at tmp in place of workspace path, unless the
// workspace was removed meanwhile (then tmp is discarded and ErrNotFound
// returned): under the manager's lock, so that a removal or Close and a
// replacement never interleave (a replacement after the removal would
// bring the directory back).
func (m *Manager) Replace(path, tmp string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.provisioned[path] {
		os.RemoveAll(tmp)
		return fmt.Errorf("%w: workspace %s was removed", ErrNotFound, path)
	}
	trash := path + ".old"
	_ = os.RemoveAll(trash)
	if err := os.Rename(path, trash); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Rename(trash, path)
		os.RemoveAll(tmp)
		return err
	}
	return os.RemoveAll(trash)
}

// SyncWait bounds how long Close waits for syncs under way.
const SyncWait = 30 * time.Second

// BeginSync starts a copy into path's sync directory (returned), which
// Replace swaps in; done ends it. A workspace removed, or a manager
// closed, refuses with ErrNotFound.
func (m *Manager) BeginSync(path string) (tmp string, done func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || !m.provisioned[path] {
		return "", nil, fmt.Errorf("%w: workspace %s was removed", ErrNotFound, path)
	}
	m.syncs.Add(1)
	return path + ".sync", m.syncs.Done, nil
}

// Close removes every workspace this manager still holds (server shutdown),
// after the syncs under way (at most SyncWait), and their sync directories.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	waited := make(chan struct{})
	go func() { m.syncs.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(SyncWait):
	}
	m.mu.Lock()
	paths := make([]string, 0, len(m.provisioned))
	for p := range m.provisioned {
		paths = append(paths, p)
	}
	m.mu.Unlock()
	var errs []error
	for _, p := range paths {
		errs = append(errs, m.remove(p))
		_ = os.RemoveAll(p + ".sync")
	}
	return errors.Join(errs...)
}

// Claim records that plugin made (or reused) a session workspace, so that it
// may remove it later with RemoveClaimed.
func (m *Manager) Claim(w *Workspace, plugin string) {
	if w.Ephemeral {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.claimed[w.Name] = plugin
}

// RemoveClaimed deletes a session workspace if plugin made its current
// incarnation: a plugin can remove what it created, never a workspace the
// same session id got later from another plugin. It reports whether it did.
func (m *Manager) RemoveClaimed(sessionID, plugin string) (bool, error) {
	if CheckSessionID(sessionID) != nil {
		return false, nil
	}
	name := m.name(sessionID)
	m.mu.Lock()
	// A bound workspace (or a bound session's) is the core's.
	_, isSession := m.bound[sessionID]
	mine := m.claimed[name] == plugin && m.boundBy[sessionID] == "" && !isSession
	if mine {
		delete(m.claimed, name)
	}
	m.mu.Unlock()
	if !mine {
		return false, nil
	}
	return true, m.remove(m.SessionPath(sessionID))
}

func newRunID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "r" + hex.EncodeToString(b)
}

// Within joins rel under the workspace, refusing absolute paths and "..".
func (w *Workspace) Within(rel string) (string, error) { return within(w.Path, rel) }

func within(dir, rel string) (string, error) {
	if rel == "" {
		return dir, nil
	}
	if filepath.IsAbs(rel) || strings.Contains(rel, "\x00") {
		return "", refusef(ErrPath, "path %q must be relative to the workspace", rel)
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", refusef(ErrPath, "path %q leaves the workspace", rel)
	}
	return filepath.Join(dir, clean), nil
}

// Dir creates (if needed) and returns a subdirectory for a mount. A
// regular file already there (written from the intent's files) is returned
// as it is: a file mount (a stateless run's read-only input files).
func (w *Workspace) Dir(rel string) (string, error) {
	p, err := w.Within(rel)
	if err != nil {
		return "", err
	}
	if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
		return p, nil
	}
	// Never through a link a sandbox planted in the workspace. Podman's U
	// gives the directory to the sandbox user with the mode it has now:
	// for a server that is not root, one it can still write (rootless.go).
	if err := mkdirBeneath(w.Path, p); err != nil {
		return p, err
	}
	return p, shareTree(w.Path, p)
}

// WriteFile writes a file the sandbox will read.
func (w *Workspace) WriteFile(rel string, data []byte) error {
	p, err := w.Within(rel)
	if err != nil {
		return err
	}
	if err := mkdirBeneath(w.Path, filepath.Dir(p)); err != nil {
		return err
	}
	if err := shareTree(w.Path, filepath.Dir(p)); err != nil {
		return err
	}
	// Never through a link; writable by the sandbox user, whom Podman's U
	// may already have given an earlier copy of the file.
	rp, _ := filepath.Rel(w.Path, p)
	f, err := createBeneath(w.Path, rp) // rootless.go
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// PlainDir is the directory subdir of the workspace, refusing one that
// the sandboxed code replaced by a symbolic link (ErrLink); "" when it does
// not exist.
func (w *Workspace) PlainDir(subdir string) (string, error) {
	dir, err := w.Within(subdir)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(dir); err != nil || real != dir {
		if os.IsNotExist(err) {
			return "", nil
		}
		return "", refusef(ErrLink, "workspace directory %s is not a plain directory", subdir)
	}
	return dir, nil
}

// MaxFiles bounds how many files a workspace may hold, so that the usage
// walk itself stays cheap.
const MaxFiles = 100_000

// Usage adds up regular file sizes under the workspace without following
// links, stopping early once past maxBytes or MaxFiles.
func (w *Workspace) Usage(maxBytes int64) (size int64, files int) {
	return dirUsage(w.Path, maxBytes, MaxFiles)
}

func dirUsage(dir string, maxBytes int64, maxFiles int) (int64, int) {
	var size int64
	files := 0
	stop := errors.New("stop")
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		files++
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				size += info.Size()
			}
		}
		if size > maxBytes || files > maxFiles {
			return stop
		}
		return nil
	})
	return size, files
}
