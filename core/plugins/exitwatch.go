package plugins

import (
	"os"

	"golang.org/x/sys/unix"
)

// exitEvent returns a channel closed when process pid ends, and a function
// that stops watching. It watches a pidfd, which becomes readable when the
// process exits without reaping it (go-plugin reaps it), through Go's
// poller: no thread is held while waiting. The channel is nil (never ready)
// when the process cannot be watched (pidfds need Linux 5.3).
func exitEvent(pid int) (<-chan struct{}, func()) {
	if pid <= 0 {
		return nil, func() {}
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err == unix.ESRCH {
		done := make(chan struct{})
		close(done)
		return done, func() {}
	}
	if err != nil {
		return nil, func() {}
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, func() {}
	}
	done := make(chan struct{})
	go func() {
		exited := false
		// Read waits for readability between calls; the pidfd is readable
		// once the process is gone. It returns early if f is closed.
		_ = rc.Read(func(fd uintptr) bool {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			exited = err == nil && n > 0
			return exited
		})
		if exited {
			close(done)
		}
	}()
	return done, func() { f.Close() }
}
