package workspace

import (
	"context"
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Refusals and failures of DialSocket, besides ErrLink and ErrPath.
var (
	ErrNotSocket  = errors.New("not a socket")
	ErrNoListener = errors.New("nothing listens there yet")
)

// DialSocket connects to the unix socket at rel in the workspace, which the
// sandbox created and can replace at any time: the socket is opened with
// openat2 beneath the workspace following no link (O_PATH), checked to be a
// socket, and connected through its /proc/self/fd magic link, so the
// connection reaches the inode that was checked whatever is renamed in
// between, and the path's length is no concern (sun_path holds 107 bytes).
func (w *Workspace) DialSocket(ctx context.Context, rel string) (net.Conn, error) {
	clean, err := CleanPath(rel)
	if err != nil {
		return nil, err
	}
	f := NewFiles(w.Path)
	root, err := f.openRoot()
	if err != nil {
		return nil, err
	}
	fd, err := openBeneath(root, clean, unix.O_PATH, 0)
	unix.Close(root)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("%w: %s", ErrNoListener, quote(rel))
	}
	if err != nil {
		return nil, pathErr(rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", quote(rel), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%w: %s is a %s", ErrNotSocket, quote(rel), kind(st.Mode))
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
	if errors.Is(err, unix.ECONNREFUSED) {
		return nil, fmt.Errorf("%w: %s (the socket has no listener)", ErrNoListener, quote(rel))
	}
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", quote(rel), err)
	}
	return conn, nil
}
