package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// Dir is the checkpoint store of one host: a directory (the forge's
// <base>/state/checkpoints), with one 0700 directory per client, named by a
// hash of the client, and in it one directory per session id (named by
// workspace.DirName: the id itself up to 48 characters) holding meta.json,
// which names the id, and work/ (the files). Checkpoints live there across server
// restarts. What the store holds together is bounded (quota: what it
// measures on disk, plus the room reserved by checkpoints being built).
type Dir struct {
	root  string
	quota int64
	// clientQuota is a client's share of the store (0: none but the
	// store's), its checkpoints and suspended sessions together.
	clientQuota func(client string) int64

	mu       sync.Mutex
	building map[string]int64 // directory being built → bytes reserved for it
}

// NewDir returns the store in root, which it creates (and its parent) on
// the first Put, bounded to quota bytes in all.
func NewDir(root string, quota int64) *Dir {
	return &Dir{root: root, quota: quota, clientQuota: func(string) int64 { return 0 }, building: map[string]int64{}}
}

// WithClientQuota bounds each client's checkpoints together to share's
// bytes for it (0: only the store's bound), so that one client (a
// tenant's suspended sessions, say) cannot take the whole store.
func (d *Dir) WithClientQuota(share func(client string) int64) *Dir {
	d.clientQuota = share
	return d
}

var _ Store = (*Dir)(nil)

// clientKey names a client's directory of checkpoints: a hash, so that an
// client's name (a tenant, a connection) never becomes a path, and stable
// across restarts so the same client finds its checkpoints again.
func clientKey(client string) string {
	h := sha256.Sum256([]byte("forge-checkpoint-client\x00" + client))
	return hex.EncodeToString(h[:16])
}

// Path is where client's checkpoint of id lies. id must be valid
// (workspace.CheckSessionID): it is a path component.
func (d *Dir) Path(client, id string) string {
	return filepath.Join(d.root, clientKey(client), workspace.DirName(id))
}

// mkClientDir creates the store and client's directory, each 0700:
// checkpoints hold users' data, readable by the server alone.
func (d *Dir) mkClientDir(client string) (string, error) {
	dir := filepath.Join(d.root, clientKey(client))
	// The store's parent is made private only when the store makes it: it
	// may be the root of a volume the core does not own (a shared
	// sessions.checkpoint_dir), which is why the store is a directory
	// beneath it.
	if err := os.Mkdir(filepath.Dir(d.root), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	// Whoever else may write that volume must not point the store
	// elsewhere.
	if fi, err := os.Lstat(d.root); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return "", fmt.Errorf("the checkpoint store %s is a symbolic link: refused (make it a directory, or name another sessions.checkpoint_dir)", d.root)
	}
	for _, p := range []string{d.root, dir} {
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		if err := os.Chmod(p, 0o700); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// readMeta reads the meta.json in client's directory for id, whoever it names.
func (d *Dir) readMeta(client, id string) (Meta, bool) {
	var m Meta
	if workspace.CheckSessionID(id) != nil {
		return m, false
	}
	return readMeta(d.Path(client, id))
}

func readMeta(dir string) (Meta, bool) {
	var m Meta
	raw, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil || json.Unmarshal(raw, &m) != nil {
		return m, false
	}
	return m, true
}

// Get implements Store.
func (d *Dir) Get(client, id string) (Meta, error) {
	m, ok := d.readMeta(client, id)
	switch {
	case !ok:
		return m, ErrNotFound
	case m.Client != client || m.SessionID != id:
		return m, ErrForeign
	}
	return m, nil
}

// List implements Store.
func (d *Dir) List(client string) []Meta {
	out := []Meta{}
	dir := filepath.Join(d.root, clientKey(client))
	dirs, _ := os.ReadDir(dir)
	for _, e := range dirs {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".new") {
			continue
		}
		// A directory's name is derived from the id (a long one is cut and
		// hashed): the id is the one its meta.json names, if that id is
		// named so.
		m, ok := readMeta(filepath.Join(dir, e.Name()))
		if !ok || workspace.CheckSessionID(m.SessionID) != nil || workspace.DirName(m.SessionID) != e.Name() {
			continue
		}
		if m, err := d.Get(client, m.SessionID); err == nil {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out
}

// Read implements Store.
func (d *Dir) Read(client, id string, read func(dir string) error) error {
	if err := workspace.CheckSessionID(id); err != nil {
		return err
	}
	return read(filepath.Join(d.Path(client, id), "work"))
}

// Put implements Store: the checkpoint is built beside the previous one
// (<id>.new) and swapped in.
func (d *Dir) Put(m Meta, quota int64, write func(dir string, budget int64) ([]string, error)) (Meta, error) {
	if err := workspace.CheckSessionID(m.SessionID); err != nil {
		return m, err
	}
	client, err := d.mkClientDir(m.Client)
	if err != nil {
		return m, err
	}
	dir := filepath.Join(client, workspace.DirName(m.SessionID))
	tmp := dir + ".new"
	os.RemoveAll(tmp)
	share := d.clientQuota(m.Client)
	budget, byShare, release, err := d.reserve(client, tmp, quota, share)
	if err != nil {
		return m, err
	}
	defer release()
	var left []string
	if left, err = write(filepath.Join(tmp, "work"), budget); err == nil {
		m.FilesLeft = left
		err = writeMeta(tmp, m)
	}
	if err == nil {
		// Bytes is the whole checkpoint as it lies on the host
		// (meta.json and directories included), within the budget.
		if m.Bytes = workspace.DiskUsage(tmp, nil); m.Bytes > budget {
			err = fmt.Errorf("%w: the checkpoint takes %d bytes with its description, over its limit of %d", workspace.ErrOverLimit, m.Bytes, budget)
		}
	}
	if err == nil {
		// meta.json again, now with the size.
		if err = writeMeta(tmp, m); err == nil {
			os.RemoveAll(dir)
			err = os.Rename(tmp, dir)
		}
	}
	if errors.Is(err, workspace.ErrOverLimit) && (quota <= 0 || budget < quota) {
		// The copy stopped at the store's room (or the client's), not at
		// the checkpoint's quota.
		if byShare {
			err = &FullError{Used: share - budget, Client: true, Quota: share}
		} else {
			err = &FullError{Used: d.quota - budget}
		}
	}
	if err != nil {
		os.RemoveAll(tmp)
	}
	return m, err
}

func writeMeta(dir string, m Meta) error {
	meta, _ := json.MarshalIndent(m, "", "  ")
	return os.WriteFile(filepath.Join(dir, "meta.json"), meta, 0o600)
}

// reserve reserves the bytes a checkpoint built in tmp, in clientDir, may
// take: quota, or less if the store has less room left (or the client's
// share, byShare), so that two built at once (the
// shutdown checkpoints) cannot together pass the store's bound. What the
// store holds is measured on disk (workspace.DiskUsage), the session's
// previous checkpoint included: it is on disk until the new one replaces
// it. release gives the reservation back.
func (d *Dir) reserve(clientDir, tmp string, quota, share int64) (budget int64, byShare bool, release func(), err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var reserved int64
	for _, n := range d.building {
		reserved += n
	}
	used := workspace.DiskUsage(d.root, func(p string) bool { _, ok := d.building[p]; return ok }) + reserved
	room := d.quota - used
	budget = quota
	if budget <= 0 || room < budget {
		budget = room
	}
	if budget <= 0 {
		return 0, false, nil, &FullError{Used: used}
	}
	if share > 0 {
		mine := d.clientUsed(clientDir)
		if left := share - mine; left < budget {
			budget, byShare = left, true
		}
		if budget <= 0 {
			return 0, true, nil, &FullError{Used: mine, Client: true, Quota: share}
		}
	}
	d.building[tmp] = budget
	return budget, byShare, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.building, tmp)
	}, nil
}

// clientUsed is what the client's directory holds on disk, with the room
// reserved for its checkpoints being built (d.mu held).
func (d *Dir) clientUsed(clientDir string) int64 {
	var reserved int64
	for p, n := range d.building {
		if filepath.Dir(p) == clientDir {
			reserved += n
		}
	}
	return workspace.DiskUsage(clientDir, func(p string) bool { _, ok := d.building[p]; return ok }) + reserved
}

// Remove implements Store.
func (d *Dir) Remove(client, id string) bool {
	if workspace.CheckSessionID(id) != nil {
		return false
	}
	dir := d.Path(client, id)
	_, err := os.Stat(dir)
	os.RemoveAll(dir)
	os.RemoveAll(dir + ".new")
	return err == nil
}

// InterruptedAge is how long a partial checkpoint (<id>.new) must have been
// left unwritten, and not be building here, to count as interrupted: a
// server sharing the base path may still be writing one, and every file it
// writes is newer than this.
const InterruptedAge = 10 * time.Minute

// interrupted says whether path is a partial checkpoint no live Put writes.
func (d *Dir) interrupted(path string, now time.Time) bool {
	if !strings.HasSuffix(path, ".new") {
		return false
	}
	d.mu.Lock()
	_, building := d.building[path]
	d.mu.Unlock()
	if building {
		return false
	}
	newest := time.Time{}
	filepath.WalkDir(path, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
		return nil
	})
	return !newest.IsZero() && now.Sub(newest) > InterruptedAge
}

// Expire implements Store.
func (d *Dir) Expire(now time.Time, ttl time.Duration, removed func(Meta, error)) {
	clients, _ := os.ReadDir(d.root)
	for _, o := range clients {
		dir := filepath.Join(d.root, o.Name())
		entries, _ := os.ReadDir(dir)
		for _, c := range entries {
			path := filepath.Join(dir, c.Name())
			var m Meta
			raw, err := os.ReadFile(filepath.Join(path, "meta.json"))
			if err == nil {
				err = json.Unmarshal(raw, &m)
			}
			if err != nil {
				// No meta: an interrupted checkpoint (.new) or debris. A .new
				// that no Put of this store is building and nothing has
				// written for a while is a dead server's partial copy: it
				// counted against the store's bound, so it goes now, not a
				// TTL later. Other debris is kept for one TTL.
				if d.interrupted(path, now) {
					os.RemoveAll(path)
				} else if fi, serr := os.Stat(path); serr == nil && now.Sub(fi.ModTime()) > ttl {
					os.RemoveAll(path)
				}
				continue
			}
			if now.Sub(m.Created) <= ttl {
				continue
			}
			removed(m, os.RemoveAll(path))
		}
	}
}
