package shim

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// pair returns the core's end of a fresh fd channel and a receiver on the
// plugin's.
func pair(t *testing.T) (*FDSender, *fdReceiver) {
	t.Helper()
	s, pluginEnd, err := NewFDChannel()
	if err != nil {
		t.Fatal(err)
	}
	r, err := newFDReceiverFile(pluginEnd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); r.conn.Close() })
	return s, r
}

// echoConn returns a connected unix stream socket whose peer echoes.
func echoConn(t *testing.T) *net.UnixConn {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "e.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	c, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.UnixConn)
}

func echoes(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q, %v", buf, err)
	}
}

// A sent socket reaches the waiter of its nonce, whichever comes first,
// is the connection itself (the core's copy closed, it still echoes), and
// each nonce is taken once.
func TestFDNonceMatching(t *testing.T) {
	t.Parallel()
	for _, waitFirst := range []bool{false, true} {
		s, r := pair(t)
		a, b := echoConn(t), echoConn(t)
		na, ok, err := s.send(a)
		if err != nil || !ok {
			t.Fatalf("send: %v %v", ok, err)
		}
		if waitFirst {
			// The waiter first, then the socket (deliver, as receive does).
			nb := bytes.Repeat([]byte{9}, fdNonceLen)
			got := make(chan net.Conn, 1)
			go func() { c, _ := r.take(nb, 5*time.Second); got <- c }()
			time.Sleep(50 * time.Millisecond)
			f, err := b.File()
			if err != nil {
				t.Fatal(err)
			}
			r.deliver(string(nb), f)
			cb := <-got
			if cb == nil {
				t.Fatal("take b: nothing")
			}
			b.Close()
			echoes(t, cb)
			cb.Close()
		}
		ca, err := r.take(na, 5*time.Second)
		if err != nil {
			t.Fatalf("take a: %v", err)
		}
		a.Close() // the plugin's copy is its own
		echoes(t, ca)
		ca.Close()
		if _, err := r.take(na, 50*time.Millisecond); !errors.Is(err, errFDWait) {
			t.Fatalf("second take of a nonce: %v, want errFDWait", err)
		}
		if len(na) != fdNonceLen || s.Sent() < 1 {
			t.Fatalf("nonce %x, sent %d", na, s.Sent())
		}
	}
}

// A nonce nobody sent times out; so does one after the channel closed.
func TestFDTakeTimeout(t *testing.T) {
	t.Parallel()
	s, r := pair(t)
	start := time.Now()
	if _, err := r.take(bytes.Repeat([]byte{7}, fdNonceLen), 100*time.Millisecond); !errors.Is(err, errFDWait) {
		t.Fatalf("take: %v, want errFDWait", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("waited %v", d)
	}
	s.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := r.take(bytes.Repeat([]byte{8}, fdNonceLen), 10*time.Millisecond)
		r.mu.Lock()
		stopped := r.err != nil
		r.mu.Unlock()
		if stopped && err != nil && !errors.Is(err, errFDWait) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver did not stop once the core's end closed: %v", err)
		}
	}
}

// Only a local socket goes over the channel; anything else (a relay's
// conn) stays the stream's, as does every Dial of a server without one.
func TestFDSendOnlyUnixSockets(t *testing.T) {
	t.Parallel()
	s, _ := pair(t)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, ok, err := s.send(a); ok || err != nil {
		t.Fatalf("send of a pipe: ok %v, err %v", ok, err)
	}
	var none *FDSender
	if _, ok, err := none.send(echoConn(t)); ok || err != nil {
		t.Fatalf("send without a channel: ok %v, err %v", ok, err)
	}
	if s.Sent() != 0 {
		t.Fatalf("sent %d", s.Sent())
	}
}

// The plugin cannot send the core anything over the channel, file
// descriptors least of all: the core's receiving side is shut.
func TestFDChannelOneWay(t *testing.T) {
	t.Parallel()
	s, pluginEnd, err := NewFDChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer pluginEnd.Close()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Sendmsg(int(pluginEnd.Fd()), []byte("x"), syscall.UnixRights(int(f.Fd())), nil, 0)
	if !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("the plugin's send to the core: %v, want EPIPE", err)
	}
}

// What the core did not mean, the plugin's receiver drops, closing every
// descriptor: a message without a socket, with two, with a short nonce, or
// a descriptor that is no unix stream socket.
func TestFDReceiverDropsMalformed(t *testing.T) {
	t.Parallel()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fakeCore := fds[0]
	defer syscall.Close(fakeCore)
	r, err := newFDReceiverFile(os.NewFile(uintptr(fds[1]), "plugin"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.conn.Close()
	var held []*os.File // alive until the end: a dropped *os.File's finalizer closes its fd
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	sock := func() int {
		f, err := echoConn(t).File()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, f)
		return int(f.Fd())
	}
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	nonce := func(b byte) []byte { return bytes.Repeat([]byte{b}, fdNonceLen) }
	cases := []struct {
		name  string
		data  []byte
		fds   []int
		nonce []byte
		want  string // "": dropped
	}{
		{"no socket", nonce(1), nil, nonce(1), ""},
		{"two sockets", nonce(2), []int{sock(), sock()}, nonce(2), ""},
		{"short nonce", nonce(3)[:8], []int{sock()}, nonce(3)[:8], ""},
		{"not a socket", nonce(4), []int{int(devnull.Fd())}, nonce(4), "fd channel"},
		{"wrong nonce", nonce(5), []int{sock()}, nonce(6), ""},
		{"good", nonce(7), []int{sock()}, nonce(7), "ok"},
	}
	for _, c := range cases {
		var oob []byte
		if c.fds != nil {
			oob = syscall.UnixRights(c.fds...)
		}
		if err := syscall.Sendmsg(fakeCore, c.data, oob, nil, 0); err != nil {
			t.Fatalf("%s: sendmsg: %v", c.name, err)
		}
		conn, err := r.take(c.nonce, 200*time.Millisecond)
		switch {
		case c.want == "ok" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want == "" && !errors.Is(err, errFDWait):
			t.Errorf("%s: got %v, %v; want it dropped", c.name, conn, err)
		case c.want != "" && c.want != "ok" && (err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want))):
			t.Errorf("%s: got %v; want an error with %q", c.name, err, c.want)
		}
		if conn != nil {
			conn.Close()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.arrived) != 1 { // the wrong nonce's socket, held until it expires
		t.Errorf("held %d sockets, want 1 (the wrong nonce's)", len(r.arrived))
	}
}
