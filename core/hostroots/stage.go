package hostroots

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/mountinfo"
	"golang.org/x/sys/unix"
)

// StageDir is where, under volumes.base_path, each root is bound for the
// sandboxes to mount (Stage).
func StageDir(base string) string { return filepath.Join(base, "state", "roots") }

// Stage binds each root, read-only and without what is mounted beneath it,
// onto StageDir(base)/<name>, from a descriptor of the root opened once
// without following any link: the sandboxes then mount the directory the
// server checked, whatever its path becomes later (a link swapped in by
// whoever owns its parent). A root on the same filesystem tree as
// base_path, through a bind mount or any other path, is refused: it would
// show every session's files. A server that cannot mount (rootless) keeps
// the paths, and says so; the race stays then, narrowed by the checks at
// the grant and in the policy.
func (rs *Roots) Stage(base string) (staged bool, err error) {
	dir := StageDir(base)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("host roots: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return false, fmt.Errorf("host roots: %w", err)
	}
	baseID, err := treeOf(base)
	if err != nil {
		return false, fmt.Errorf("host roots: volumes.base_path: %w", err)
	}
	staged = true
	for name, r := range rs.byName {
		fd, err := unix.Open(r.Path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, fmt.Errorf("volumes.host_roots.%s.path: %s: %w (a link is never followed)", name, r.Path, err)
		}
		err = rs.stageOne(r, fd, dir, baseID, &staged)
		unix.Close(fd)
		if err != nil {
			rs.Unstage()
			return false, err
		}
	}
	return staged, nil
}

func (rs *Roots) stageOne(r *Root, fd int, dir string, baseID tree, staged *bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("volumes.host_roots.%s.path: %w", r.Name, err)
	}
	if r.id != (fileKey{}) && (fileKey{uint64(st.Dev), st.Ino}) != r.id {
		return fmt.Errorf("volumes.host_roots.%s.path: %s changed while the server started: start it again", r.Name, r.Path)
	}
	proc := fmt.Sprintf("/proc/self/fd/%d", fd)
	t, err := treeOf(proc)
	if err != nil {
		return fmt.Errorf("volumes.host_roots.%s.path: %w", r.Name, err)
	}
	if t.overlaps(baseID) {
		return fmt.Errorf("volumes.host_roots.%s.path: %s is on the same filesystem tree as volumes.base_path (%s and %s of device %s), which holds every session's files: name a directory outside it", r.Name, r.Path, t.path, baseID.path, t.dev)
	}
	if !*staged {
		return nil
	}
	target := filepath.Join(dir, r.Name)
	_ = unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW) // a previous server's
	if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("host roots: %w", err)
	}
	if err := unix.Mount(proc, target, "", unix.MS_BIND, ""); err != nil {
		if errors.Is(err, unix.EPERM) {
			*staged = false // rootless: the paths, with their checks
			return nil
		}
		return fmt.Errorf("volumes.host_roots.%s: bind %s: %w", r.Name, r.Path, err)
	}
	r.Staged = target
	for _, flags := range []uintptr{unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, unix.MS_PRIVATE} {
		if err := unix.Mount("", target, "", flags, ""); err != nil {
			return fmt.Errorf("volumes.host_roots.%s: make %s read-only and private: %w", r.Name, target, err)
		}
	}
	return nil
}

// Unstage removes the binds of Stage (the server stops).
func (rs *Roots) Unstage() {
	for _, r := range rs.byName {
		if r.Staged != "" {
			_ = unix.Unmount(r.Staged, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			r.Staged = ""
		}
	}
}

// MountSources are what sandboxes mount of each root (MountSource), with
// the claim pods mount it from: the container policy's list.
func (rs *Roots) MountSources() map[string]string {
	out := map[string]string{}
	for _, r := range rs.byName {
		out[filepath.Clean(r.MountSource())] = r.Claim
	}
	return out
}

// MountSource is what a sandbox mounts of r: its staged bind, else its
// path.
func (r *Root) MountSource() string {
	if r.Staged != "" {
		return r.Staged
	}
	return r.Path
}

// tree is where a directory is in its filesystem: the device and the path
// from the filesystem's own root, whatever mount shows it.
type tree struct{ dev, path string }

func (t tree) overlaps(o tree) bool {
	if t.dev != o.dev {
		return false
	}
	within := func(dir, p string) bool { return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") }
	return within(t.path, o.path) || within(o.path, t.path)
}

// treeOf finds p's filesystem and its path there from /proc/self/mountinfo:
// the mount with the longest mount point holding p's real path.
func treeOf(p string) (tree, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return tree{}, err
	}
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return tree{}, err
	}
	var best tree
	bestLen := -1
	for _, m := range mounts {
		mp := m.MountPoint
		if real != mp && !strings.HasPrefix(real, strings.TrimSuffix(mp, "/")+"/") {
			continue
		}
		if len(mp) >= bestLen { // the last of equal mount points is the one on top
			rel := strings.TrimPrefix(strings.TrimPrefix(real, mp), "/")
			best, bestLen = tree{dev: fmt.Sprintf("%d:%d", m.Major, m.Minor), path: filepath.Join(m.Root, rel)}, len(mp)
		}
	}
	if bestLen < 0 {
		return tree{}, fmt.Errorf("%s: no mount holds it (/proc/self/mountinfo)", p)
	}
	return best, nil
}
