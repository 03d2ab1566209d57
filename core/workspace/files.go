package workspace

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
)

// SessionWorkDir is the subdirectory of a session's workspace that its
// kernel sees as its working directory (sdk/kernel mounts it at
// /forge/work): files put there are where the code finds them.
const SessionWorkDir = "work"

// Reasons a file operation is refused. Callers test them with errors.Is and
// turn them into audited refusals.
var (
	ErrPath       = errors.New("invalid path")
	ErrLink       = errors.New("path goes through a symbolic link")
	ErrNotRegular = errors.New("not a regular file")
	ErrNotFound   = errors.New("no such file")
	ErrTooLarge   = errors.New("file too large")
	ErrNoSpace    = errors.New("workspace quota exceeded")
	// ErrDenied is a path the server may not open: under a server that is
	// not root, one the sandboxed code made private (rootless.go).
	ErrDenied = errors.New("permission denied")
)

// refusal is a refusal with its own message that errors.Is one of the
// reasons above.
type refusal struct {
	reason error
	msg    string
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.reason }

// refusef is a refusal for reason, worded by format.
func refusef(reason error, format string, args ...any) error {
	return &refusal{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// Path limits: what Linux allows for one name, and a bound on the whole.
const (
	maxPathLen = 1024
	maxNameLen = 255
)

// CleanPath checks a path relative to a workspace and returns it in clean
// form. It refuses what could name something outside the workspace or is
// ambiguous: empty, absolute, "..", NUL and control characters,
// backslashes, invalid UTF-8, over-long names. "." components and repeated
// slashes are dropped.
func CleanPath(rel string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w %s: %s", ErrPath, quote(rel), why)
	}
	switch {
	case rel == "":
		return bad("empty; give a path relative to the session's working directory, e.g. data/input.csv")
	case len(rel) > maxPathLen:
		return bad(fmt.Sprintf("longer than %d bytes", maxPathLen))
	case !utf8.ValidString(rel):
		return bad("not valid UTF-8")
	case strings.HasPrefix(rel, "/"):
		return bad("absolute; give a path relative to the session's working directory")
	case strings.ContainsRune(rel, '\\'):
		return bad("contains a backslash; separate directories with '/'")
	}
	for _, r := range rel {
		if r < 0x20 || r == 0x7f {
			return bad("contains a control character")
		}
	}
	var parts []string
	for _, p := range strings.Split(rel, "/") {
		switch {
		case p == "" || p == ".":
			continue
		case p == "..":
			return bad("'..' would leave the workspace")
		case len(p) > maxNameLen:
			return bad(fmt.Sprintf("a name is longer than %d bytes", maxNameLen))
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return ".", nil
	}
	return strings.Join(parts, "/"), nil
}

func quote(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%q… (%d bytes)", s[:80], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// Files is a directory tree read and written only beneath its root, never
// through a symbolic link: every open goes through openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so a link the sandboxed code planted
// (to /etc/shadow, to another session) is refused by the kernel, even if it
// is swapped in between a check and the open.
type Files struct {
	root   string
	denied deniedCount // helper runs so far (unshare.go)
	// host: a directory of the host's own (a host root), not a workspace
	// a sandbox mounts: never shared by mode nor read through the helper,
	// whatever user the server is (rootless.go, unshare.go).
	host bool
}

// SessionFiles is a session's working directory. It exists once the
// session's kernel has started.
func (m *Manager) SessionFiles(sessionID string) (*Files, error) {
	if err := CheckSessionID(sessionID); err != nil {
		return nil, err
	}
	if m.remote {
		return nil, ErrRemote
	}
	root := m.SessionPath(sessionID) + "/" + SessionWorkDir
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("%w: session %s has no working directory yet (it appears when its kernel starts)", ErrNotFound, sessionID)
	}
	return &Files{root: root}, nil
}

// SessionHasDir reports, with one lstat and no walk, whether rel (a clean
// relative path) is a directory beneath the session's working directory.
// It is a pre-check for callers that would walk rel on every call (the
// output snapshot of each execute): false (missing, a link, a file) means
// that a walk would find nothing; true means only that one may find
// something, and the walk itself resolves rel without following links.
func (m *Manager) SessionHasDir(sessionID, rel string) bool {
	if m.remote {
		return false
	}
	var st unix.Stat_t
	err := unix.Lstat(m.SessionPath(sessionID)+"/"+SessionWorkDir+"/"+rel, &st)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// NewFiles is a tree rooted at dir (for tests and other workspaces).
func NewFiles(dir string) *Files { return &Files{root: dir} }

// NewHostFiles is a tree of the host's own rooted at dir (a host root):
// what the server writes there gets the owner of dir and 0644/0755, never
// the modes a workspace is shared by, and nothing in it is read through
// the user namespace.
func NewHostFiles(dir string) *Files { return &Files{root: dir, host: true} }

// shared is whether f is shared with its sandbox by mode (rootless.go).
func (f *Files) shared() bool { return shared && !f.host }

func (f *Files) dirMode() uint32 {
	if f.shared() {
		return sharedDirMode
	}
	return 0o755
}

func (f *Files) fileMode() uint32 {
	if f.shared() {
		return sharedFileMode
	}
	return 0o644
}

// Root is the tree's directory on the host.
func (f *Files) Root() string { return f.root }

const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openRoot opens the root directory itself, not following a link there.
func (f *Files) openRoot() (int, error) {
	fd, err := unix.Open(f.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open workspace: %w", err)
	}
	return fd, nil
}

// openOwnedRoot is openRoot and the root's owner (the sandbox user), whom
// what the core writes beneath it is given to.
func (f *Files) openOwnedRoot() (fd, uid, gid int, err error) {
	if fd, err = f.openRoot(); err != nil {
		return -1, 0, 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, 0, 0, err
	}
	return fd, int(st.Uid), int(st.Gid), nil
}

// openBeneath opens rel (clean) beneath dirfd.
func openBeneath(dirfd int, rel string, flags int, mode uint32) (int, error) {
	// No O_NOFOLLOW: RESOLVE_NO_SYMLINKS already refuses a trailing link
	// (ELOOP), whereas O_NOFOLLOW would open one with O_PATH and turn it
	// into ENOTDIR with O_DIRECTORY.
	for {
		fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue // openat2 may ask for a retry under concurrent renames
		}
		return fd, err
	}
}

// pathErr maps what openat2 says to the reasons above.
func pathErr(rel string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: %s (links are never followed out of or within the workspace)", ErrLink, quote(rel))
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%w: %s", ErrNotFound, quote(rel))
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%w: a component of %s is not a directory", ErrNotFound, quote(rel))
	case errors.Is(err, unix.EISDIR):
		return fmt.Errorf("%w: %s is a directory", ErrNotRegular, quote(rel))
	case errors.Is(err, unix.ENXIO), errors.Is(err, unix.ENODEV):
		return fmt.Errorf("%w: %s is a device, socket or pipe", ErrNotRegular, quote(rel))
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return fmt.Errorf("%w: %s", ErrNoSpace, quote(rel))
	case errors.Is(err, unix.EACCES):
		detail := "" // why the helper could not read it either (unshare.go)
		if s := err.Error(); s != unix.EACCES.Error() {
			detail = " [" + s + "]"
		}
		return fmt.Errorf("%w: %s%s%s", ErrDenied, quote(rel), deniedHint(), detail)
	case errors.Is(err, unix.ENAMETOOLONG):
		return fmt.Errorf("%w %s: name too long", ErrPath, quote(rel))
	}
	return fmt.Errorf("%s: %w", quote(rel), err)
}

// kind names a file's type as every runtime's listing does.
func kind(mode uint32) string { return agent.Kind(mode) }

// Open opens a regular file for reading, with its size, refusing links
// anywhere on its path, directories, devices, sockets and pipes: for a
// copy that streams (the caller closes it).
func (f *Files) Open(rel string) (*os.File, int64, error) {
	clean, err := CleanPath(rel)
	if err != nil {
		return nil, 0, err
	}
	root, err := f.openRoot()
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(root)
	// O_NONBLOCK: opening a pipe must not wait for a writer.
	fd, err := openBeneath(root, clean, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.EACCES) {
		fd, err = openDenied(f, clean, err) // unshare.go
	}
	if err != nil {
		return nil, 0, pathErr(rel, err)
	}
	file := os.NewFile(uintptr(fd), clean)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		file.Close()
		return nil, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		file.Close()
		return nil, 0, fmt.Errorf("%w: %s is a %s", ErrNotRegular, quote(rel), kind(st.Mode))
	}
	return file, st.Size, nil
}

// ReadFile reads a regular file, refusing one over max bytes (0: no cap),
// links anywhere on its path, directories, devices, sockets and pipes.
func (f *Files) ReadFile(rel string, max int64) ([]byte, error) {
	file, size, err := f.Open(rel)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	if max > 0 && size > max {
		return nil, fmt.Errorf("%w: %s is %d bytes, over the %d-byte limit", ErrTooLarge, quote(rel), size, max)
	}
	// The file may grow while read: never read more than the cap.
	limit := size + 1
	if max > 0 {
		limit = max + 1
	}
	data, err := io.ReadAll(io.LimitReader(file, limit))
	if err != nil {
		return nil, err
	}
	if max > 0 && int64(len(data)) > max {
		return nil, fmt.Errorf("%w: %s grew past the %d-byte limit while read", ErrTooLarge, quote(rel), max)
	}
	return data, nil
}

// WriteFile writes data to rel, every byte of it (an upload of zeros takes
// its size of the quota); see writeFrom.
func (f *Files) WriteFile(rel string, data []byte) error {
	return f.writeFrom(rel, bytes.NewReader(data), false, nil)
}

// WriteFrom writes what r holds to rel, streamed; see writeFrom.
func (f *Files) WriteFrom(rel string, r io.Reader) error {
	return f.writeFrom(rel, r, false, nil)
}

// writeFrom writes what r holds to rel, creating its parent directories,
// owned by the owner of the root (the sandbox user) so the code can change
// and remove them. The content is streamed; with sparse, chunks of zeros
// are left as holes (a restored sparse file stays sparse). The file is
// written beside its target and renamed over it, so a failure (the quota)
// leaves the old file intact and a link or pipe at the target is replaced,
// never written through. times, if set, are the file's access and
// modification times (a copy as it was).
func (f *Files) writeFrom(rel string, r io.Reader, sparse bool, times []unix.Timespec) error {
	clean, err := CleanPath(rel)
	if err != nil {
		return err
	}
	if clean == "." {
		return fmt.Errorf("%w %s: names the working directory itself; give a file name", ErrPath, quote(rel))
	}
	root, uid, gid, err := f.openOwnedRoot()
	if err != nil {
		return err
	}
	defer unix.Close(root)
	dir, name := path.Split(clean)
	parent := root
	if dir = strings.TrimSuffix(dir, "/"); dir != "" {
		if parent, err = f.mkdirs(root, dir, uid, gid); err != nil {
			return err
		}
		defer unix.Close(parent)
	}
	rnd := make([]byte, 6)
	rand.Read(rnd)
	tmp := ".forge-upload-" + hex.EncodeToString(rnd)
	fd, err := openBeneath(parent, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, f.fileMode())
	if err != nil {
		return pathErr(rel, err)
	}
	file := os.NewFile(uintptr(fd), tmp)
	_, werr := copyData(file, r, sparse)
	if werr == nil && f.shared() {
		werr = unix.Fchmod(fd, sharedFileMode) // rootless.go: shared by mode, not owner
	} else if werr == nil {
		werr = unix.Fchown(fd, uid, gid)
	}
	if werr == nil && times != nil {
		werr = setTimes(fd, times)
	}
	if cerr := file.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = unix.Renameat(parent, tmp, parent, name)
	}
	if werr != nil {
		unix.Unlinkat(parent, tmp, 0)
		return pathErr(rel, werr)
	}
	return nil
}

// mkdirs creates dir (clean, relative) beneath root one component at a
// time and returns it open.
func (f *Files) mkdirs(root int, dir string, uid, gid int) (int, error) {
	cur, err := unix.Dup(root)
	if err != nil {
		return -1, err
	}
	for _, p := range strings.Split(dir, "/") {
		err := unix.Mkdirat(cur, p, f.dirMode())
		made := err == nil
		if made && !f.shared() {
			unix.Fchownat(cur, p, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		} else if !made && !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, pathErr(dir, err)
		}
		next, err := openBeneath(cur, p, unix.O_PATH|unix.O_DIRECTORY, 0)
		unix.Close(cur)
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) {
				return -1, fmt.Errorf("%w: %s in %s is not a directory", ErrNotRegular, quote(p), quote(dir))
			}
			return -1, pathErr(dir, err)
		}
		if made && f.shared() {
			// The sandbox user must be able to write in it too (rootless.go);
			// the umask took bits off the mode.
			if err := shareFD(next, sharedDirMode); err != nil {
				unix.Close(next)
				return -1, pathErr(dir, err)
			}
		}
		cur = next
	}
	return cur, nil
}

// setTimes sets the access and modification times of what fd refers to,
// an O_PATH descriptor too (through its /proc link, which pins the file).
func setTimes(fd int, times []unix.Timespec) error {
	return unix.UtimesNano("/proc/self/fd/"+strconv.Itoa(fd), times)
}

// Entry is one name in a listing.
type Entry struct {
	Path     string    `json:"path" jsonschema:"relative to the session's working directory"`
	Type     string    `json:"type" jsonschema:"file, directory, symlink (never followed), fifo, socket, device or other"`
	Size     int64     `json:"size" jsonschema:"bytes (files)"`
	Modified time.Time `json:"modified"`
	ino      uint64    // with Size and Modified: the file's version, for Snapshot
}

// NewEntry is an entry found elsewhere than in a directory of the core's
// (a sandbox's pod), with the inode Snapshot tells versions apart by.
func NewEntry(path, typ string, size int64, modified time.Time, ino uint64) Entry {
	return Entry{Path: path, Type: typ, Size: size, Modified: modified, ino: ino}
}

// SnapshotOf stamps the regular files among entries (Snapshot's stamps).
func SnapshotOf(entries []Entry) map[string]Stamp {
	out := map[string]Stamp{}
	for _, e := range entries {
		if e.Type == "file" {
			out[e.Path] = Stamp{Size: e.Size, MTime: e.Modified.UnixNano(), Ino: e.ino}
		}
	}
	return out
}

// List walks rel (a directory) without following links and returns up to
// max entries sorted by path; truncated says that more were left out.
func (f *Files) List(rel string, max int) (entries []Entry, truncated bool, err error) {
	clean, err := CleanPath(rel)
	if err != nil {
		return nil, false, err
	}
	root, err := f.openRoot()
	if err != nil {
		return nil, false, err
	}
	defer unix.Close(root)
	start := root
	if clean != "." {
		if start, err = openBeneath(root, clean, unix.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
			if errors.Is(err, unix.ENOTDIR) {
				return nil, false, fmt.Errorf("%w: %s is not a directory", ErrNotRegular, quote(rel))
			}
			return nil, false, pathErr(rel, err)
		}
		defer unix.Close(start)
	}
	prefix := ""
	if clean != "." {
		prefix = clean + "/"
	}
	truncated = walk(start, prefix, max, &entries, 0)
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	return entries, truncated, nil
}

const maxDepth = 64

// walk lists dirfd's entries into out (prefix before each name), descending
// into directories through openat2; it reports whether it stopped at max.
func walk(dirfd int, prefix string, max int, out *[]Entry, depth int) bool {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	d := os.NewFile(uintptr(fd), prefix)
	names, _ := d.Readdirnames(-1)
	defer d.Close()
	sort.Strings(names)
	for _, name := range names {
		if len(*out) >= max {
			return true
		}
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // removed meanwhile
		}
		e := Entry{Path: prefix + name, Type: kind(st.Mode), Modified: time.Unix(st.Mtim.Unix()), ino: st.Ino}
		if e.Type == "file" {
			e.Size = st.Size
		}
		*out = append(*out, e)
		if e.Type == "directory" && depth < maxDepth {
			sub, err := openBeneath(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				continue // replaced by a link meanwhile: not followed
			}
			stop := walk(sub, prefix+name+"/", max, out, depth+1)
			unix.Close(sub)
			if stop {
				return true
			}
		}
	}
	return false
}

// Stamp identifies a file's content version for change detection.
type Stamp struct {
	Size  int64
	MTime int64 // ns
	Ino   uint64
}

// Snapshot stamps the regular files under rel (missing: empty), up to max.
// The stamps come from the walk's own fstatat: no file is opened.
func (f *Files) Snapshot(rel string, max int) map[string]Stamp {
	entries, _, err := f.List(rel, max)
	return SnapshotResult(entries, err)
}

// SnapshotResult is a snapshot from a listing's result: a directory that
// is missing, or a link or file in its place, holds no files; any other
// failure gives nil (not known), which an execute does not keep as the
// directory's state.
func SnapshotResult(entries []Entry, err error) map[string]Stamp {
	switch {
	case err == nil:
		return SnapshotOf(entries)
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrLink), errors.Is(err, ErrNotRegular), errors.Is(err, ErrPath):
		return map[string]Stamp{}
	}
	return nil
}

// Remove deletes one regular file or link beneath the root (never a
// directory, never through a link).
func (f *Files) Remove(rel string) error {
	clean, err := CleanPath(rel)
	if err != nil {
		return err
	}
	root, err := f.openRoot()
	if err != nil {
		return err
	}
	defer unix.Close(root)
	dir, name := path.Split(clean)
	parent := root
	if dir = strings.TrimSuffix(dir, "/"); dir != "" {
		if parent, err = openBeneath(root, dir, unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
			return pathErr(rel, err)
		}
		defer unix.Close(parent)
	}
	if err := unix.Unlinkat(parent, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return pathErr(rel, err)
	}
	return nil
}
