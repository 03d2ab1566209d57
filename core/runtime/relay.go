package runtime

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RelayRun runs mcp-forge-agent's `dial` of one unix socket in a sandbox,
// with stdin and stdout as the connection's two ways, until ctx ends or
// the agent exits; it answers the agent's exit code.
type RelayRun func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (int, error)

// DialRelay connects to a unix socket inside a sandbox through run: the
// agent's dial over an exec stream (the Kubernetes API server's, or
// Podman's), so that the socket never has to be bound where the core
// lives. This is what keeps a gVisor sandbox checkpointable (runsc refuses
// to save a socket bound on the host) and reaches a pod's sockets at all.
//
// rctx bounds the relay's life, apart from the dial's ctx: cut (its
// cancel) ends it, and DialRelay calls cut itself once either end has
// hung up. The caller gets one end of a socketpair, so that it has
// deadlines and half-close like any unix connection. The agent's exit
// code 3 or first byte 3 (nothing listens there yet) is ErrNoListener.
func DialRelay(ctx, rctx context.Context, cut context.CancelFunc, what string, run RelayRun) (net.Conn, error) {
	ours, theirs, err := socketPair()
	if err != nil {
		cut()
		return nil, err
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errb bytes.Buffer
	ended := make(chan struct{})
	var code int
	var xerr error
	go func() {
		defer close(ended)
		code, xerr = run(rctx, inR, outW, &limited{w: &errb, n: 4096})
		outW.Close()
		inR.Close()
	}()
	first := make([]byte, 1)
	got := make(chan error, 1)
	go func() { _, err := io.ReadFull(outR, first); got <- err }()
	select {
	case err := <-got:
		if err != nil || first[0] != 1 {
			cut()
			inW.Close()
			<-ended
			ours.Close()
			theirs.Close()
			if code == 3 || err == nil && first[0] == 3 {
				return nil, fmt.Errorf("%s: %w", what, ErrNoListener)
			}
			return nil, fmt.Errorf("relay to %s: %v %v %s", what, xerr, err, bytes.TrimSpace(errb.Bytes()))
		}
	case <-ctx.Done():
		cut()
		inW.Close()
		outR.Close()
		ours.Close()
		theirs.Close()
		return nil, ctx.Err()
	}
	go func() { // the caller's writes to the sandbox
		_, _ = io.Copy(inW, bufio.NewReaderSize(theirs, 32<<10))
		inW.Close()
		// A half-close, or the caller's Close: only the latter hangs up
		// both ways, and then nothing will read what the sandbox sends.
		for !hungUp(theirs) {
			select {
			case <-ended:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		cut()
		outR.Close()
	}()
	go func() { // the sandbox's answers to the caller
		_, _ = io.Copy(theirs, outR)
		_ = theirs.CloseWrite()
		cut() // the sandbox's end closed, or the caller's: the relay is done
		<-ended
		theirs.Close()
	}()
	return ours, nil
}

// limited keeps the first n bytes written to it (an agent's stderr).
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// hungUp reports whether the peer of c closed both ways (POLLHUP), not
// only its writing half.
func hungUp(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return true
	}
	hup := false
	_ = raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			hup = fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return hup
}

// socketPair is a connected pair of unix stream sockets.
func socketPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	conv := func(fd int, name string) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	a, err := conv(fds[0], "channel")
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, err
	}
	b, err := conv(fds[1], "relay")
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}
