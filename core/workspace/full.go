package workspace

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
)

// RuleQuota is the rule of the security.violation recorded when a workspace
// fills its quota (volumes.session_quota), whichever way it is enforced.
const RuleQuota = "workspace-quota"

// fullSlack is how little free space counts as full for a filesystem of
// size bytes: an eighth of it, at most 4 MiB and at least 64 KiB. ext4 does
// not get to zero when the writer writes in large chunks: a write of a
// megabyte is refused whole once its blocks cannot all be reserved, and
// measured here 1 MiB writes hit ENOSPC with 0.7-0.9 MiB left, 8 MiB ones
// with 1.7-1.9 MiB (4 KiB writes get to zero). A workspace with this little
// left has filled its quota for any practical purpose.
func fullSlack(size int64) int64 {
	return max(64<<10, min(4<<20, size/8))
}

// Fill describes a workspace found full.
type Fill struct {
	Path   string
	Name   string // its directory name under Root
	Size   int64  // bytes the filesystem holds for files
	Free   int64  // bytes still free
	Inodes bool   // full because no inode is left (many small files)
}

// CheckFull tells whether the workspace at path has just filled up: it
// reports true the first time a check finds it full after it was not (or
// was never checked), so one fill is reported once however many calls see
// it full; freeing space ends the fill. Only a kernel-enforced workspace (a
// filesystem of its own, Enforced) is checked, with one statfs: where the
// quota is a walk of visible files, the walk itself reports (hostsvc).
func (m *Manager) CheckFull(path string) (Fill, bool) {
	if !m.checksFull(path) {
		return Fill{}, false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Fill{}, false
	}
	if st.Type != unix.EXT4_SUPER_MAGIC {
		return Fill{}, false // not (or no longer) the workspace's own filesystem
	}
	return m.noteFill(path, int64(st.Blocks)*st.Bsize, int64(st.Bavail)*st.Bsize, st.Files > 0 && st.Ffree == 0)
}

// CheckFullOf is CheckFull of a workspace whose filesystem is where its
// sandbox runs (a pod's tmpfs of the quota's size), measured there: size
// and free bytes, and whether no inode is left. A filesystem larger than
// the quota is not the workspace's own (a disk-backed emptyDir: the node's
// disk) and is not checked.
func (m *Manager) CheckFullOf(path string, size, free int64, noInodes bool) (Fill, bool) {
	if !m.checksFull(path) {
		return Fill{}, false
	}
	return m.noteFill(path, size, free, noInodes)
}

// checksFull: only a provisioned workspace of a kernel-enforced quota is
// checked.
func (m *Manager) checksFull(path string) bool {
	if !m.Enforced() || m.quota <= 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.provisioned[path]
}

// noteFill records whether the workspace at path, of size bytes with free
// left, is full, and reports a fill the first time it is seen.
func (m *Manager) noteFill(path string, size, free int64, noInodes bool) (Fill, bool) {
	if size <= 0 || size > m.quota {
		return Fill{}, false // not (or no longer) the workspace's own filesystem
	}
	f := Fill{Path: path, Name: filepath.Base(path), Size: size, Free: free, Inodes: noInodes}
	full := f.Free < fullSlack(size) || f.Inodes
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.provisioned[path] {
		return Fill{}, false // removed meanwhile
	}
	was := m.full[path]
	if full {
		m.full[path] = true
	} else {
		delete(m.full, path)
	}
	return f, full && !was
}

// Entry is the audit line of a fill: a security.violation with rule
// workspace-quota, for sessionID (the internal id, or a stateless run's
// workspace id), with details added by the caller (container, owner, tool).
func (f Fill) Entry(quota int64, sessionID string, details map[string]any) audit.Entry {
	d := map[string]any{"rule": RuleQuota, "workspace": f.Name, "quota_bytes": quota, "bytes_free": f.Free, "enforced": "kernel"}
	if f.Inodes {
		d["inodes_left"] = 0
	}
	for k, v := range details {
		d[k] = v
	}
	what := "bytes"
	if f.Inodes {
		what = "inodes (too many files)"
	}
	why := fmt.Sprintf("the workspace filled its quota of %s (volumes.session_quota): it ran out of %s and further writes fail with ENOSPC; remove files or write less", config.FormatSize(quota), what)
	return audit.Entry{Event: audit.SecurityViolation, Severity: audit.Warning, SessionID: sessionID, Success: false, Error: why, Details: d}
}
