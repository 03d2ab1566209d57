package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A server run by an ordinary user with rootless Podman cannot always
// delete its workspaces itself: Podman's U bind option gives them to the
// sandbox user, a sub-id of the user's, and sandboxed code may create
// directories the user cannot write. Inside the user's own user namespace
// (`podman unshare`) the user is root over its sub-ids, so the removal is
// repeated there. Root never needs this.

// shared is whether the server and the sandboxes share workspaces by mode
// rather than by owner: a server that is not root can neither give what
// it writes to the sandbox user (chown needs CAP_CHOWN) nor write into
// what Podman's U gave that user (a sub-id; measured: upload_file,
// import_file and restore_session all failed with "permission denied").
// So a non-root server makes the directories and files it creates in a
// workspace open to every id (0777, 0666), as RootlessUmask makes what the
// sandbox creates: the base path is 0700 and the user's own (the forge
// refuses to start otherwise), so no other host user can reach them, and
// each sandbox mounts only its own workspace. Root keeps 0755 and 0644 and
// chowns to the sandbox user. A variable so that tests cover both.
var shared = os.Geteuid() != 0

// Modes of what the core creates in a workspace.
const (
	sharedDirMode  = 0o777
	sharedFileMode = 0o666
)

// shareTree gives sharedDirMode to dir and to each directory between it
// and top (exclusive) that the server owns, resolving each beneath top
// without following a link (one the sandbox planted fails the call, never
// opens a directory elsewhere to everyone); the sandbox's own directories
// (Podman's U chowned them at an earlier start) keep the mode it left
// them. Without shared it does nothing.
func shareTree(top, dir string) error {
	if !shared {
		return nil
	}
	rel, err := filepath.Rel(top, dir)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil // not beneath top: nothing of the workspace's to share
	}
	root, err := NewFiles(top).openRoot()
	if err != nil {
		return fmt.Errorf("share workspace %s with the sandbox: %w", top, err)
	}
	defer unix.Close(root)
	parts := strings.Split(rel, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		fd, err := openBeneath(root, sub, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return fmt.Errorf("share workspace directory with the sandbox: %w", pathErr(sub, err))
		}
		err = shareFD(fd, sharedDirMode)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("share workspace directory %s with the sandbox: %w", sub, err)
		}
	}
	return nil
}

// mkdirBeneath creates dir and its parents beneath top one at a time
// without following a link (Files.mkdirs), each made the workspace's
// directory mode.
func mkdirBeneath(top, dir string) error {
	rel, err := filepath.Rel(top, dir)
	if err != nil || rel == "." {
		return err
	}
	f := NewFiles(top)
	root, err := f.openRoot()
	if err != nil {
		return err
	}
	defer unix.Close(root)
	fd, err := f.mkdirs(root, rel, -1, -1)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// createBeneath creates or truncates the regular file rel beneath top for
// writing, never through a link nor into a pipe or device, with the
// workspace's file mode if the server creates it.
func createBeneath(top, rel string) (*os.File, error) {
	f := NewFiles(top)
	root, err := f.openRoot()
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	mode := f.fileMode()
	// O_NONBLOCK: a FIFO planted at rel must not hold the open.
	fd, err := openBeneath(root, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_NONBLOCK|unix.O_NOCTTY, mode)
	if err != nil {
		return nil, pathErr(rel, err)
	}
	file := os.NewFile(uintptr(fd), rel)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		file.Close()
		return nil, fmt.Errorf("%w: %s", ErrNotRegular, quote(rel))
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		file.Close()
		return nil, pathErr(rel, err)
	}
	if shared {
		if err := shareFD(fd, sharedFileMode); err != nil {
			file.Close()
			return nil, err
		}
	}
	return file, nil
}

// shareFD sets mode on what fd (O_PATH allowed) refers to if the server
// owns it: the umask may have taken bits off at its creation.
func shareFD(fd int, mode uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o7777 == mode {
		return nil
	}
	// Through the descriptor's /proc link: the very inode opened, which a
	// rename by the sandbox cannot swap for a link meanwhile.
	return os.Chmod("/proc/self/fd/"+strconv.Itoa(fd), os.FileMode(mode))
}

// deniedHint says why a path is closed to the server and how to open it.
func deniedHint() string {
	if !shared {
		return ""
	}
	return " (the sandboxed code made it, or a directory on its way, private, and a server that is not root writes only where the code leaves it open to others; " +
		"open it in the session, e.g. os.chmod(path, 0o666) for a file, 0o777 for a directory, Sys.chmod in R)"
}

// unshareTimeout bounds one `podman unshare rm`.
const unshareTimeout = 2 * time.Minute

// removeAll is os.RemoveAll, retried inside the user's namespace when a
// non-root server is refused.
var removeAll = func(path string) error {
	err := os.RemoveAll(path)
	if err == nil || os.Geteuid() == 0 || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	if uerr := unshareRemove(path); uerr != nil {
		return fmt.Errorf("%w; retrying in the user namespace: %v", err, uerr)
	}
	return nil
}

// RemoveAll removes a directory a sandbox had mounted (so Podman's U option
// may have given it to a sub-id), inside the user's namespace if needed.
func RemoveAll(path string) error { return removeAll(path) }

func unshareRemove(path string) error {
	podman, err := exec.LookPath("podman")
	if err != nil {
		return fmt.Errorf("podman is not on PATH: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), unshareTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, podman, "unshare", "rm", "-rf", "--", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("podman unshare rm: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// quotaHint tells how to go on when a provisioner that requires the quota
// cannot enforce it (a non-root server cannot loop-mount). The core's own
// provisioner never requires it: the policy refuses the container instead
// (guarantee workspace-quota), so this is for a Provisioner that does.
func quotaHint(p Provisioner) string {
	if p == nil || p.Enforced() {
		return ""
	}
	return ` (the workspace-quota guarantee is missing: a non-root server cannot loop-mount a filesystem per workspace; run as root, or set security.waive = ["workspace-quota"] to bound workspaces only by a periodic walk)`
}
