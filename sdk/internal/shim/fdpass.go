package shim

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The fd channel: a SOCK_SEQPACKET socketpair whose one end the core keeps
// and whose other the plugin inherits at launch. When Dial's endpoint is a
// local socket, the core sends the plugin the connected socket over it
// (SCM_RIGHTS, one message per connection, tagged with a fresh nonce that
// the Dial stream's opened answer repeats) instead of relaying its bytes
// through the stream, which costs a gRPC message and several goroutine
// wake-ups per write on both sides. The plugin holds what the stream gives
// it: one connection to one declared endpoint, opened and checked (and
// audited) by the core.

// FDChannelEnv names the plugin's file descriptor of its end of the fd
// channel. A plugin the core did not start (debug mode, tests serving in
// process) has none and gets its connections through the stream.
const FDChannelEnv = "MCP_FORGE_FD_CHANNEL"

const (
	fdNonceLen = 16
	// fdWait bounds how long the plugin waits for a socket the core said it
	// sent; the core sends it before it answers, so it is normally there.
	fdWait = 5 * time.Second
	// fdUnclaimed bounds how long, and how many, sockets nobody waits for
	// (their Dial gave up) are held before they are closed.
	fdUnclaimed = 30 * time.Second
	// fdSendWait bounds a send to a plugin whose end is full.
	fdSendWait     = time.Second
	fdUnclaimedMax = 64
)

// NewFDChannel returns the two ends of a fresh fd channel: the core's, and
// the plugin's, to be inherited (exec.Cmd.ExtraFiles) and closed by the
// caller once the plugin started. Both are close-on-exec, so no other child
// of the core (another plugin, a podman command) inherits either.
func NewFDChannel() (*FDSender, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("fd channel: socketpair: %w", err)
	}
	// The core only sends: with its receiving side shut, the plugin's end
	// cannot send at all (EPIPE), so no file descriptor ever reaches the
	// core this way.
	if err := syscall.Shutdown(fds[0], syscall.SHUT_RD); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, fmt.Errorf("fd channel: shutdown: %w", err)
	}
	core := os.NewFile(uintptr(fds[0]), "fd-channel-core")
	c, err := net.FileConn(core) // a CLOEXEC duplicate
	core.Close()
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, fmt.Errorf("fd channel: %w", err)
	}
	return &FDSender{conn: c.(*net.UnixConn)}, os.NewFile(uintptr(fds[1]), "fd-channel-plugin"), nil
}

// FDSender is the core's end of a plugin's fd channel.
type FDSender struct {
	conn *net.UnixConn
	sent atomic.Int64
	mu   sync.Mutex // one send at a time, under its own deadline
}

// Sent is how many sockets went to the plugin this way.
func (s *FDSender) Sent() int64 { return s.sent.Load() }

// Close closes the core's end; the plugin's Dials go back to the stream.
func (s *FDSender) Close() error { return s.conn.Close() }

// send sends conn's socket to the plugin and returns the nonce it is tagged
// with. It sends only a local socket (a *net.UnixConn); ok is false for any
// other connection, which the caller relays. conn stays the caller's: it
// closes its copy once the plugin has its own.
func (s *FDSender) send(conn net.Conn) (nonce []byte, ok bool, err error) {
	uc, isUnix := conn.(*net.UnixConn)
	if s == nil || !isUnix {
		return nil, false, nil
	}
	nonce = make([]byte, fdNonceLen)
	if _, err := rand.Read(nonce); err != nil {
		return nil, false, fmt.Errorf("fd channel: nonce: %w", err)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, false, fmt.Errorf("fd channel: %w", err)
	}
	// A plugin that stopped reading must not hold the core's Dial: past
	// fdSendWait the connection is relayed instead.
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conn.SetWriteDeadline(time.Now().Add(fdSendWait))
	var sendErr error
	err = raw.Control(func(fd uintptr) {
		_, _, sendErr = s.conn.WriteMsgUnix(nonce, syscall.UnixRights(int(fd)), nil)
	})
	if err == nil {
		err = sendErr
	}
	if err != nil {
		return nil, false, fmt.Errorf("fd channel: send: %w", err)
	}
	s.sent.Add(1)
	return nonce, true, nil
}

// fdReceiver is the plugin's end: one goroutine receives the core's
// sockets and hands each to the Dial that waits for its nonce.
type fdReceiver struct {
	conn *net.UnixConn
	wait time.Duration // how long a Dial waits for its socket (fdWait)

	mu      sync.Mutex
	err     error // why receiving stopped; then every wait fails
	waiting map[string]chan *os.File
	arrived map[string]arrivedFD // sent before their Dial asked (the usual order)
}

type arrivedFD struct {
	f  *os.File
	at time.Time
}

var (
	processFDOnce sync.Once
	processFD     *fdReceiver
)

// processFDChannel is this plugin process's fd channel, from FDChannelEnv;
// nil when the core gave it none (the stream serves every Dial then).
func processFDChannel() *fdReceiver {
	processFDOnce.Do(func() {
		fd, err := strconv.Atoi(os.Getenv(FDChannelEnv))
		if err != nil || fd <= 2 {
			return
		}
		processFD, _ = newFDReceiverFile(os.NewFile(uintptr(fd), "fd-channel"))
	})
	return processFD
}

// newFDReceiverFile receives on f, the plugin's end, which it closes: the
// receiver holds a close-on-exec duplicate, so no child of the plugin
// inherits the channel.
func newFDReceiverFile(f *os.File) (*fdReceiver, error) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("fd channel: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("fd channel: not a unix socket")
	}
	return newFDReceiver(uc), nil
}

func newFDReceiver(c *net.UnixConn) *fdReceiver {
	r := &fdReceiver{conn: c, wait: fdWait, waiting: map[string]chan *os.File{}, arrived: map[string]arrivedFD{}}
	go r.receive()
	return r
}

// receive reads the core's messages: each one nonce and one socket. A
// message of another shape is dropped, its descriptors closed.
func (r *fdReceiver) receive() {
	buf := make([]byte, fdNonceLen+1)
	oob := make([]byte, syscall.CmsgSpace(4*8)) // room to see (and close) extras
	for {
		n, oobn, flags, _, err := r.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			r.stop(fmt.Errorf("fd channel: %w", err))
			return
		}
		files := parseRights(oob[:oobn])
		if n != fdNonceLen || len(files) != 1 || flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 {
			for _, f := range files {
				f.Close()
			}
			continue
		}
		r.deliver(string(buf[:n]), files[0])
	}
}

// parseRights returns the descriptors of oob's SCM_RIGHTS messages (already
// close-on-exec: ReadMsgUnix asks for MSG_CMSG_CLOEXEC).
func parseRights(oob []byte) []*os.File {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var out []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			out = append(out, os.NewFile(uintptr(fd), "endpoint"))
		}
	}
	return out
}

func (r *fdReceiver) deliver(nonce string, f *os.File) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.waiting[nonce]; ok {
		delete(r.waiting, nonce)
		w <- f // buffered: the waiter is gone or takes it
		return
	}
	if _, dup := r.arrived[nonce]; dup {
		f.Close()
		return
	}
	now := time.Now()
	for k, a := range r.arrived {
		if now.Sub(a.at) > fdUnclaimed || len(r.arrived) >= fdUnclaimedMax {
			a.f.Close()
			delete(r.arrived, k)
		}
	}
	r.arrived[nonce] = arrivedFD{f: f, at: now}
}

func (r *fdReceiver) stop(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
	for k, w := range r.waiting {
		close(w)
		delete(r.waiting, k)
	}
	for k, a := range r.arrived {
		a.f.Close()
		delete(r.arrived, k)
	}
}

// errFDWait is a wait for a socket that did not come.
var errFDWait = errors.New("fd channel: the core's socket did not arrive")

// take returns the connection the core sent tagged with nonce, waiting at
// most wait for it; each nonce is taken once.
func (r *fdReceiver) take(nonce []byte, wait time.Duration) (net.Conn, error) {
	key := string(nonce)
	r.mu.Lock()
	if a, ok := r.arrived[key]; ok {
		delete(r.arrived, key)
		r.mu.Unlock()
		return fileConn(a.f)
	}
	if r.err != nil {
		r.mu.Unlock()
		return nil, r.err
	}
	w := make(chan *os.File, 1)
	r.waiting[key] = w
	r.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case f, ok := <-w:
		if !ok {
			return nil, errFDWait
		}
		return fileConn(f)
	case <-t.C:
		r.mu.Lock()
		delete(r.waiting, key)
		r.mu.Unlock()
		// It may have come just now: whoever holds it closes it.
		select {
		case f, ok := <-w:
			if ok {
				return fileConn(f)
			}
		default:
		}
		return nil, errFDWait
	}
}

// fileConn turns a received descriptor into a net.Conn, accepting only a
// connected unix stream socket.
func fileConn(f *os.File) (net.Conn, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("fd channel: %w", err)
	}
	if uc, ok := c.(*net.UnixConn); ok && isStream(uc) {
		return uc, nil
	}
	c.Close()
	return nil, fmt.Errorf("fd channel: the core sent something else than a unix stream socket")
}

func isStream(uc *net.UnixConn) bool {
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	typ := -1
	raw.Control(func(fd uintptr) {
		typ, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TYPE)
	})
	return typ == syscall.SOCK_STREAM
}
