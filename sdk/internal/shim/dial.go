package shim

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
)

// Dial is host.Sandbox.Dial over SandboxService.Dial: the first request
// names the endpoint, the first response says the core connected. Then
// either the core sent the connected socket over the fd channel (the
// response's nonce says so) and the stream ends, or both sides carry bytes
// on the stream until each half-closes.
func (c *sandboxClient) Dial(ctx context.Context, id, endpoint string) (net.Conn, error) {
	conn, nonce, err := c.dial(ctx, id, endpoint, c.fds != nil)
	if err != nil || nonce == nil {
		return conn, err
	}
	if fc, err := c.fds.take(nonce, c.fds.wait); err == nil {
		return fdConn{UnixConn: fc.(*net.UnixConn), addr: endpointAddr(id + "/" + endpoint)}, nil
	}
	// The socket did not come: the stream, which every core serves.
	conn, _, err = c.dial(ctx, id, endpoint, false)
	return conn, err
}

// dial opens a Dial stream; with fd set it lets the core send the socket
// instead, and then returns the nonce it is tagged with and no conn.
func (c *sandboxClient) dial(ctx context.Context, id, endpoint string, fd bool) (net.Conn, []byte, error) {
	// The stream outlives the dial's context: it is the connection's, and
	// ends with Close.
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := c.c.Dial(sctx)
	if err == nil {
		err = stream.Send(&pb.DialRequest{Kind: &pb.DialRequest_Open{Open: &pb.DialOpen{ContainerId: id, Endpoint: endpoint, FdChannel: fd}}})
	}
	if err != nil {
		cancel()
		return nil, nil, fromStatus(err)
	}
	type answer struct {
		nonce []byte
		err   error
	}
	opened := make(chan answer, 1)
	go func() {
		r, err := stream.Recv()
		if err == nil && r.GetOpened() == nil {
			err = &host.Error{Kind: host.KindInternal, Message: "dial: the core answered the open with data, not opened"}
		}
		opened <- answer{r.GetOpened().GetFdNonce(), err}
	}()
	var a answer
	select {
	case a = <-opened:
	case <-ctx.Done():
		a.err = ctx.Err()
	}
	if a.err != nil {
		cancel()
		return nil, nil, fromStatus(a.err)
	}
	if len(a.nonce) > 0 {
		cancel() // the stream's work is done
		return nil, a.nonce, nil
	}
	return newStreamConn(stream, cancel, id+"/"+endpoint), nil, nil
}

// fdConn is a socket the core sent: the endpoint's connection itself,
// named as a stream's is.
type fdConn struct {
	*net.UnixConn
	addr endpointAddr
}

func (c fdConn) LocalAddr() net.Addr  { return endpointAddr("plugin") }
func (c fdConn) RemoteAddr() net.Addr { return c.addr }

// dialStream is the plugin's side of SandboxService.Dial.
type dialStream interface {
	Send(*pb.DialRequest) error
	Recv() (*pb.DialResponse, error)
	CloseSend() error
}

// streamConn is a net.Conn over a Dial stream. Writes go into a bounded
// queue that one goroutine sends from (a write returns once its bytes are
// queued, as a socket's returns once they are in its send buffer), and
// one goroutine receives into another, so that deadlines can interrupt a
// Read or a Write without ending the stream.
type streamConn struct {
	stream dialStream
	cancel context.CancelFunc
	addr   endpointAddr

	sendq     chan []byte // nil chunk: half-close
	sendDone  chan struct{}
	recvq     chan []byte
	closed    chan struct{}
	closeOnce sync.Once
	halfOnce  sync.Once

	mu      sync.Mutex
	sendErr error // why the stream stopped sending
	recvErr error // io.EOF once the endpoint closed its side
	readDL  deadline
	writeDL deadline

	readMu  sync.Mutex // one Read at a time: pending is its
	pending []byte
	writeMu sync.Mutex // one Write at a time, so its chunks stay in order
}

func newStreamConn(stream dialStream, cancel context.CancelFunc, name string) *streamConn {
	c := &streamConn{stream: stream, cancel: cancel, addr: endpointAddr(name),
		sendq: make(chan []byte, 16), sendDone: make(chan struct{}), recvq: make(chan []byte, 16),
		closed: make(chan struct{}),
		readDL: newDeadline(), writeDL: newDeadline()}
	go c.sender()
	go c.receiver()
	return c
}

// sender sends the queued chunks in order, merging those already queued
// into one message (up to host.DialChunk): a writer that writes a message
// in pieces (zmq4 writes each frame's header and body apart, through
// net.Buffers, which only a kernel socket turns into one writev) would
// otherwise cost a gRPC message and a wake-up on both sides per piece.
func (c *streamConn) sender() {
	defer close(c.sendDone)
	var held []byte // a chunk taken from the queue that did not fit
	for {
		chunk := held
		held = nil
		if chunk == nil {
			var ok bool
			if chunk, ok = <-c.sendq; !ok {
				return
			}
		}
		end := chunk == nil
	merge:
		for !end && len(chunk) < host.DialChunk {
			select {
			case next := <-c.sendq:
				if next == nil {
					end = true
				} else if len(chunk)+len(next) > host.DialChunk {
					held = next
					break merge
				} else {
					chunk = append(chunk, next...)
				}
			default:
				break merge
			}
		}
		var err error
		if len(chunk) > 0 {
			err = c.stream.Send(&pb.DialRequest{Kind: &pb.DialRequest_Data{Data: chunk}})
		}
		if err == nil && end {
			err = c.stream.CloseSend()
		}
		if err != nil {
			c.mu.Lock()
			c.sendErr = fromStatus(err)
			c.mu.Unlock()
			return
		}
		if end {
			return
		}
	}
}

func (c *streamConn) receiver() {
	for {
		r, err := c.stream.Recv()
		if err == nil && r.GetClosed() != nil {
			err = io.EOF
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				err = fromStatus(err)
			}
			c.mu.Lock()
			c.recvErr = err
			c.mu.Unlock()
			close(c.recvq)
			return
		}
		if data := r.GetData(); len(data) > 0 {
			select {
			case c.recvq <- data:
			case <-c.closed:
				return
			}
		}
	}
}

// Read implements net.Conn.
func (c *streamConn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if len(c.pending) == 0 {
		select {
		case <-c.closed:
			return 0, net.ErrClosed
		default:
		}
		select {
		case data, ok := <-c.recvq:
			if !ok {
				c.mu.Lock()
				defer c.mu.Unlock()
				return 0, c.recvErr
			}
			c.pending = data
		case <-c.closed:
			return 0, net.ErrClosed
		case <-c.readDL.wait():
			return 0, os.ErrDeadlineExceeded
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Write implements net.Conn: p goes in chunks of at most host.DialChunk.
func (c *streamConn) Write(p []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	n := 0
	for n < len(p) {
		c.mu.Lock()
		err := c.sendErr
		c.mu.Unlock()
		if err != nil {
			return n, err
		}
		chunk := append([]byte(nil), p[n:min(len(p), n+host.DialChunk)]...)
		select {
		case <-c.closed:
			return n, net.ErrClosed
		case <-c.sendDone:
			return n, errors.New("write after CloseWrite")
		default:
		}
		select {
		case c.sendq <- chunk:
			n += len(chunk)
		case <-c.closed:
			return n, net.ErrClosed
		case <-c.writeDL.wait():
			return n, os.ErrDeadlineExceeded
		}
	}
	return n, nil
}

// CloseWrite ends the plugin's side: the endpoint reads EOF once the queued
// bytes are sent; Read goes on until the endpoint closes its side.
func (c *streamConn) CloseWrite() error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.halfClose(c.closed)
	return nil
}

// halfClose queues the end of the plugin's data, unless stop closes first.
func (c *streamConn) halfClose(stop <-chan struct{}) {
	c.halfOnce.Do(func() {
		select {
		case c.sendq <- nil:
		case <-stop:
		}
	})
}

// Close implements net.Conn: bytes already written are still sent (for at
// most closeFlush), then the stream ends both ways.
func (c *streamConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed) // unblocks Read and Write
		go func() {
			flushed, stop := context.WithTimeout(context.Background(), closeFlush)
			defer stop()
			c.halfClose(flushed.Done())
			select {
			case <-c.sendDone:
			case <-flushed.Done():
			}
			c.cancel()
		}()
	})
	return nil
}

// closeFlush bounds how long Close lets queued bytes drain to a stalled
// endpoint.
const closeFlush = time.Second

func (c *streamConn) LocalAddr() net.Addr  { return endpointAddr("plugin") }
func (c *streamConn) RemoteAddr() net.Addr { return c.addr }

func (c *streamConn) SetDeadline(t time.Time) error {
	c.readDL.set(t)
	c.writeDL.set(t)
	return nil
}
func (c *streamConn) SetReadDeadline(t time.Time) error  { c.readDL.set(t); return nil }
func (c *streamConn) SetWriteDeadline(t time.Time) error { c.writeDL.set(t); return nil }

// endpointAddr names a Dial connection's ends: container id/endpoint.
type endpointAddr string

func (a endpointAddr) Network() string { return "forge-endpoint" }
func (a endpointAddr) String() string  { return string(a) }

// deadline is a settable point in time whose passing closes a channel.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	ch    chan struct{}
}

func newDeadline() deadline { return deadline{ch: make(chan struct{})} }

// set moves the deadline; the zero time means none.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	select {
	case <-d.ch: // passed: a fresh channel for the new deadline
		d.ch = make(chan struct{})
	default:
	}
	if t.IsZero() {
		return
	}
	ch := d.ch
	if dur := time.Until(t); dur > 0 {
		d.timer = time.AfterFunc(dur, func() { close(ch) })
	} else {
		close(ch)
	}
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}

// MaxDialData is the most one DialRequest may carry (host.proto).
const MaxDialData = 64 << 10

// MaxOpenChannels bounds the Dials one plugin has open through the core at
// once (a connection handed over as a descriptor stops counting then).
const MaxOpenChannels = 512

// ChannelRefuser is a host that records a Dial the shim refused before it
// reached the host (over MaxOpenChannels), so the refusal is audited.
type ChannelRefuser interface {
	RefuseChannel(containerID, endpoint string, err error)
}

// Dial serves SandboxService.Dial: the endpoint comes from the first
// message, then bytes are pumped both ways; each side's end of data is a
// half-close of the other.
func (s *sandboxServer) Dial(stream pb.SandboxService_DialServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return toStatus(host.Errorf(host.KindInvalid, "dial: the first message must name the endpoint (open)"))
	}
	ctx := stream.Context()
	if s.open.Add(1) > MaxOpenChannels {
		s.open.Add(-1)
		err := host.Errorf(host.KindUnavailable, "dial: this plugin already has %d channels open, the most the core keeps for one plugin; close one first", MaxOpenChannels)
		if r, ok := s.impl.(ChannelRefuser); ok {
			r.RefuseChannel(open.ContainerId, open.Endpoint, err)
		}
		return toStatus(err)
	}
	defer s.open.Add(-1)
	conn, err := s.impl.Dial(ctx, open.ContainerId, open.Endpoint)
	if err != nil {
		return toStatus(err)
	}
	defer conn.Close()
	if open.FdChannel {
		// The plugin's own copy of the socket, when it can take one; on any
		// failure the stream relays, as for a plugin without the channel.
		if nonce, ok, err := s.fds.send(conn); err == nil && ok {
			return stream.Send(&pb.DialResponse{Kind: &pb.DialResponse_Opened{Opened: &pb.DialOpened{FdNonce: nonce}}})
		}
	}
	if err := stream.Send(&pb.DialResponse{Kind: &pb.DialResponse_Opened{Opened: &pb.DialOpened{}}}); err != nil {
		return err
	}
	// The plugin's bytes to the endpoint; its CloseSend half-closes it.
	fromPlugin := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				fromPlugin <- closeWrite(conn)
				return
			}
			if err != nil {
				fromPlugin <- err
				return
			}
			// The protocol's bound (DialRequest.data, twice what this SDK's
			// sender makes): a larger message would sit in the core's memory
			// while the sandbox does not read.
			if len(r.GetData()) > MaxDialData {
				fromPlugin <- host.Errorf(host.KindInvalid, "dial: a message of %d bytes, more than the protocol's %d", len(r.GetData()), MaxDialData)
				return
			}
			if _, err := conn.Write(r.GetData()); err != nil {
				fromPlugin <- err
				return
			}
		}
	}()
	// The endpoint's bytes to the plugin, then closed.
	toPlugin := make(chan error, 1)
	go func() {
		buf := make([]byte, host.DialChunk)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				if serr := stream.Send(&pb.DialResponse{Kind: &pb.DialResponse_Data{Data: buf[:n]}}); serr != nil {
					toPlugin <- serr
					return
				}
			}
			if errors.Is(err, io.EOF) {
				toPlugin <- stream.Send(&pb.DialResponse{Kind: &pb.DialResponse_Closed{Closed: &pb.DialClosed{}}})
				return
			}
			if err != nil {
				toPlugin <- err
				return
			}
		}
	}()
	var failed error
	for pending := 2; pending > 0; pending-- {
		select {
		case err = <-fromPlugin:
		case err = <-toPlugin:
		case <-ctx.Done():
			return nil // the plugin closed the connection
		}
		if err != nil && failed == nil {
			failed = err
			conn.Close() // unblocks the other pump
		}
	}
	if failed != nil && ctx.Err() == nil {
		return toStatus(host.Errorf(host.KindUnavailable, "dial %s/%s: %v", open.ContainerId, open.Endpoint, failed))
	}
	return nil
}

// closeWrite half-closes conn where it can (a unix or TCP socket), else
// closes it.
func closeWrite(conn net.Conn) error {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return conn.Close()
}
