package agent

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// dialUnix connects to the unix socket at p from its directory (a
// relative address: no limit on the path's length but the kernel's).
func dialUnix(p string) (*net.UnixConn, error) {
	if err := os.Chdir(filepath.Dir(p)); err != nil {
		return nil, err
	}
	return net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Base(p), Net: "unix"})
}

// Dial relays the unix socket at p to stdin and stdout: one byte 1 says
// it is connected; nothing listens there yet: one byte 3 and exit code 3
// (the byte for a caller that cannot see the exit code: runsc exec
// --detach).
func Dial(p string, in io.Reader, out io.Writer) int {
	c, err := dialUnix(p)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", p, err)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			_, _ = out.Write([]byte{3})
			return 3
		}
		return 1
	}
	defer c.Close()
	if _, err := out.Write([]byte{1}); err != nil {
		return 0
	}
	go func() {
		_, _ = io.Copy(c, in)
		_ = c.CloseWrite()
	}()
	_, _ = io.Copy(out, c)
	return 0
}

// MaxRelayConns bounds the connections Listen carries at once: more are
// closed as they come.
const MaxRelayConns = 64

// Listen listens on each socket path (replacing what is there, mode
// 0666), sends a ready frame once all listen, and carries connections as
// frames (FrameOpen ...) over in and out until in ends.
func Listen(paths []string, in io.Reader, out io.Writer) error {
	var ls []*net.UnixListener
	for _, p := range paths {
		if err := os.Chdir(filepath.Dir(p)); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		base := filepath.Base(p)
		_ = os.Remove(base)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: base, Net: "unix"})
		if err != nil {
			return fmt.Errorf("listen %s: %w", p, err)
		}
		l.SetUnlinkOnClose(false)
		if err := os.Chmod(base, 0o666); err != nil {
			return err
		}
		ls = append(ls, l)
	}
	_ = os.Chdir("/")
	r := &podRelay{out: out, conns: map[uint32]*net.UnixConn{}}
	if err := r.send(Frame{Type: FrameReady}); err != nil {
		return err
	}
	for i, l := range ls {
		go r.accept(l, uint32(i))
	}
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		f, err := ReadFrame(br)
		if err != nil {
			return nil // the core hung up
		}
		c := r.conn(f.Conn)
		if c == nil {
			continue
		}
		switch f.Type {
		case FrameData:
			if _, err := c.Write(f.Data); err != nil {
				_ = r.send(Frame{Type: FrameClose, Conn: f.Conn})
				r.drop(f.Conn)
			}
		case FrameEOF:
			_ = c.CloseWrite()
		default:
			r.drop(f.Conn)
		}
	}
}

// podRelay is the pod's end of a Listen.
type podRelay struct {
	wmu   sync.Mutex
	out   io.Writer
	mu    sync.Mutex
	next  uint32
	conns map[uint32]*net.UnixConn
}

func (r *podRelay) send(f Frame) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return WriteFrame(r.out, f)
}

func (r *podRelay) conn(id uint32) *net.UnixConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[id]
}

func (r *podRelay) drop(id uint32) {
	r.mu.Lock()
	c := r.conns[id]
	delete(r.conns, id)
	r.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

func (r *podRelay) accept(l *net.UnixListener, index uint32) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return
		}
		r.mu.Lock()
		if len(r.conns) >= MaxRelayConns {
			r.mu.Unlock()
			c.Close()
			continue
		}
		r.next++
		id := r.next
		r.conns[id] = c
		r.mu.Unlock()
		data := binary.BigEndian.AppendUint32(nil, index)
		if r.send(Frame{Type: FrameOpen, Conn: id, Data: data}) != nil {
			r.drop(id)
			return
		}
		go r.read(id, c)
	}
}

// read carries what the sandbox writes on connection id to the core.
func (r *podRelay) read(id uint32, c *net.UnixConn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 && r.send(Frame{Type: FrameData, Conn: id, Data: buf[:n]}) != nil {
			r.drop(id)
			return
		}
		if errors.Is(err, io.EOF) {
			_ = r.send(Frame{Type: FrameEOF, Conn: id})
			return
		}
		if err != nil {
			if r.conn(id) != nil {
				_ = r.send(Frame{Type: FrameClose, Conn: id})
				r.drop(id)
			}
			return
		}
	}
}
