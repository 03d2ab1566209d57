package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-zeromq/zmq4"
)

// Event is one output of an execution, in arrival order.
type Event struct {
	Kind string            // "stream", "display_data", "execute_result", "error", "status"
	Name string            // stream name: "stdout" or "stderr"
	Text string            // stream text
	Data map[string]any    // mime bundle for display_data and execute_result
	Err  *ErrorContent     // for "error"
	Meta map[string]string // extra, e.g. execution_state for "status"
	// InvalidUTF8: the kernel sent bytes that are not UTF-8 (Python's
	// surrogate escapes, R's raw strings); decoding replaced them with
	// U+FFFD.
	InvalidUTF8 bool
}

// ErrorContent is an error reply or error message.
type ErrorContent struct {
	EName     string   `json:"ename"`
	EValue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

// Reply is an execute_reply.
type Reply struct {
	Status         string `json:"status"` // "ok", "error", "aborted" (IRkernel: "abort")
	ExecutionCount int    `json:"execution_count"`
	ErrorContent
	InvalidUTF8 bool `json:"-"` // as for Event
}

// Client talks to one kernel.
type Client struct {
	conn    Connection
	sign    signer
	session string

	shell, control, stdin, iopub, hb zmq4.Socket
	sendMu                           sync.Mutex

	mu      sync.Mutex
	waiters map[string]*waiter // parent msg_id → in-flight request
	closed  chan struct{}

	unregister func() // forgets the client's DialFunc

	// BadSignatures counts messages dropped because their HMAC did not verify.
	BadSignatures atomic.Int64
	lastIOPub     atomic.Int64 // unix nanos of the last iopub message
}

type waiter struct {
	events chan Event
	reply  chan Message
	idle   chan struct{}
	once   sync.Once
}

// Dial connects to a kernel through dial, one stream per channel. It
// retries while the kernel does not listen yet (ErrNotListening) until ctx
// ends, then waits for the kernel to answer kernel_info (repeating it until
// iopub delivers, the SUB slow joiner problem).
func Dial(ctx context.Context, conn Connection, dial DialFunc) (*Client, error) {
	c := &Client{conn: conn, sign: signer{key: []byte(conn.Key)}, session: newID(), waiters: map[string]*waiter{}, closed: make(chan struct{})}
	prefix, forget, err := registerDial(dial)
	if err != nil {
		return nil, err
	}
	c.unregister = forget
	id := zmq4.SocketIdentity("forge-" + c.session[:8])
	bg := context.Background()
	opts := []zmq4.Option{zmq4.WithDialerRetry(20 * time.Millisecond), zmq4.WithDialerMaxRetries(0), zmq4.WithAutomaticReconnect(false)}
	c.shell = zmq4.NewDealer(bg, append(opts, zmq4.WithID(id))...)
	c.stdin = zmq4.NewDealer(bg, append(opts, zmq4.WithID(id))...) // same identity as shell
	c.control = zmq4.NewDealer(bg, append(opts, zmq4.WithID(zmq4.SocketIdentity("forge-ctl-"+c.session[:8])))...)
	c.iopub = zmq4.NewSub(bg, opts...)
	c.hb = zmq4.NewReq(bg, opts...)
	connect := func(s zmq4.Socket, channel string) error {
		for {
			err := s.Dial(prefix + channel)
			if err == nil {
				return nil
			}
			if !errors.Is(err, ErrNotListening) {
				return fmt.Errorf("jupyter: dial the kernel's %s channel: %w", channel, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("jupyter: dial the kernel's %s channel: %w (last error: %v)", channel, ctx.Err(), err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	for _, d := range []struct {
		s       zmq4.Socket
		channel string
	}{{c.shell, ChannelShell}, {c.stdin, ChannelStdin}, {c.control, ChannelControl}, {c.iopub, ChannelIOPub}, {c.hb, ChannelHB}} {
		if err := connect(d.s, d.channel); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.iopub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		c.Close()
		return nil, err
	}
	go c.readLoop(c.shell, true)
	go c.readLoop(c.control, true)
	go c.readLoop(c.iopub, false)
	go c.drain(c.stdin)
	for {
		ictx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := c.KernelInfo(ictx)
		cancel()
		if err == nil && c.lastIOPub.Load() != 0 {
			return c, nil
		}
		if ctx.Err() != nil {
			c.Close()
			return nil, fmt.Errorf("jupyter: kernel did not answer kernel_info: %w", ctx.Err())
		}
	}
}

// drain reads and discards input requests: sandboxed code gets no stdin.
func (c *Client) drain(s zmq4.Socket) {
	for {
		if _, err := s.Recv(); err != nil {
			return
		}
	}
}

func (c *Client) readLoop(s zmq4.Socket, isReply bool) {
	for {
		raw, err := s.Recv()
		if err != nil {
			return
		}
		m, err := c.sign.decode(raw.Frames)
		if err != nil {
			if errors.Is(err, ErrBadSignature) {
				c.BadSignatures.Add(1)
			}
			continue
		}
		if !isReply {
			c.lastIOPub.Store(time.Now().UnixNano())
		}
		c.mu.Lock()
		w := c.waiters[m.Parent.MsgID]
		c.mu.Unlock()
		if w == nil {
			continue
		}
		if isReply {
			select {
			case w.reply <- m:
			default:
			}
			continue
		}
		if ev, ok := toEvent(m); ok {
			if ev.Kind == "status" && ev.Meta["execution_state"] == "idle" {
				w.once.Do(func() { close(w.idle) })
				continue
			}
			select {
			case w.events <- ev:
			case <-c.closed:
				return
			}
		}
	}
}

func toEvent(m Message) (ev Event, ok bool) {
	defer func() { ev.InvalidUTF8 = ok && !utf8.Valid(m.Content) }()
	switch m.Header.MsgType {
	case "stream":
		var s struct{ Name, Text string }
		json.Unmarshal(m.Content, &s)
		return Event{Kind: "stream", Name: s.Name, Text: s.Text}, true
	case "display_data", "execute_result", "update_display_data":
		var d struct {
			Data map[string]any `json:"data"`
		}
		json.Unmarshal(m.Content, &d)
		kind := m.Header.MsgType
		if kind == "update_display_data" {
			kind = "display_data"
		}
		return Event{Kind: kind, Data: d.Data}, true
	case "error":
		var e ErrorContent
		json.Unmarshal(m.Content, &e)
		return Event{Kind: "error", Err: &e}, true
	case "status":
		var s struct {
			State string `json:"execution_state"`
		}
		json.Unmarshal(m.Content, &s)
		return Event{Kind: "status", Meta: map[string]string{"execution_state": s.State}}, true
	}
	return Event{}, false
}

func (c *Client) send(s zmq4.Socket, msgType string, content any) (*waiter, string, error) {
	body, err := json.Marshal(content)
	if err != nil {
		return nil, "", err
	}
	h := newHeader(c.session, msgType)
	frames, err := c.sign.encode(Message{Header: h, Content: body})
	if err != nil {
		return nil, "", err
	}
	w := &waiter{events: make(chan Event, 256), reply: make(chan Message, 1), idle: make(chan struct{})}
	c.mu.Lock()
	c.waiters[h.MsgID] = w
	c.mu.Unlock()
	c.sendMu.Lock()
	err = s.Send(zmq4.NewMsgFrom(frames...))
	c.sendMu.Unlock()
	if err != nil {
		c.forget(h.MsgID)
		return nil, "", fmt.Errorf("jupyter: send %s: %w", msgType, err)
	}
	return w, h.MsgID, nil
}

func (c *Client) forget(id string) {
	c.mu.Lock()
	delete(c.waiters, id)
	c.mu.Unlock()
}

func (c *Client) request(ctx context.Context, s zmq4.Socket, msgType string, content any) (Message, error) {
	w, id, err := c.send(s, msgType, content)
	if err != nil {
		return Message{}, err
	}
	defer c.forget(id)
	select {
	case m := <-w.reply:
		return m, nil
	case <-ctx.Done():
		return Message{}, fmt.Errorf("jupyter: %s: %w", msgType, ctx.Err())
	case <-c.closed:
		return Message{}, errors.New("jupyter: client closed")
	}
}

// Connection is the connection the client was dialled with (its key
// included): what reaches the same kernel again.
func (c *Client) Connection() Connection { return c.conn }

// KernelInfo asks the kernel for its kernel_info_reply content.
func (c *Client) KernelInfo(ctx context.Context) (map[string]any, error) {
	m, err := c.request(ctx, c.shell, "kernel_info_request", map[string]any{})
	if err != nil {
		return nil, err
	}
	var info map[string]any
	json.Unmarshal(m.Content, &info)
	return info, nil
}

// ExecuteOptions tune an execute_request.
type ExecuteOptions struct {
	Silent       bool
	StoreHistory bool
}

// Execution is an execute in flight.
type Execution struct {
	c      *Client
	id     string
	w      *waiter
	Events <-chan Event
}

// Execute sends code and returns the in-flight execution; read Events until
// Wait returns.
func (c *Client) Execute(code string, o ExecuteOptions) (*Execution, error) {
	w, id, err := c.send(c.shell, "execute_request", map[string]any{
		"code": code, "silent": o.Silent, "store_history": o.StoreHistory, "user_expressions": map[string]any{}, "allow_stdin": false,
		// One request at a time is ever in flight, so there is no queue to
		// abort on an error; with stop_on_error ipykernel also aborts a request
		// arriving within 0.1 s after an error, failing a quick next call.
		"stop_on_error": false,
	})
	if err != nil {
		return nil, err
	}
	return &Execution{c: c, id: id, w: w, Events: w.events}, nil
}

// IdleGrace is how long the end of an execution waits for the kernel's
// idle status after its execute_reply.
const IdleGrace = 2 * time.Second

// ErrClosed is the error of an execution whose client was closed.
var ErrClosed = errors.New("jupyter: client closed")

// Wait returns the execute_reply once it and the kernel's idle status have
// arrived (so every output has been delivered), or ctx's error.
func (e *Execution) Wait(ctx context.Context) (Reply, error) {
	var r Reply
	got := false
	for !got {
		select {
		case m := <-e.w.reply:
			r = ParseReply(m)
			got = true
		case <-ctx.Done():
			return r, ctx.Err()
		case <-e.c.closed:
			return r, ErrClosed
		}
	}
	// Outputs may trail the reply on iopub; idle marks the end.
	select {
	case <-e.w.idle:
	case <-time.After(IdleGrace):
	case <-ctx.Done():
	}
	return r, nil
}

// Replied delivers the execute_reply (decode it with ParseReply), Idle is
// closed once the kernel reported idle for this request, and Closed once
// the client is closed: the parts of Wait, for a caller that selects on
// them with its own events and timers instead of running Wait in a
// goroutine of its own per execute. The end is the reply and then idle (or
// IdleGrace after the reply).
func (e *Execution) Replied() <-chan Message { return e.w.reply }

// Idle: see Replied.
func (e *Execution) Idle() <-chan struct{} { return e.w.idle }

// Closed: see Replied.
func (e *Execution) Closed() <-chan struct{} { return e.c.closed }

// ParseReply decodes an execute_reply.
func ParseReply(m Message) Reply {
	var r Reply
	json.Unmarshal(m.Content, &r)
	r.InvalidUTF8 = !utf8.Valid(m.Content)
	return r
}

// Close stops routing this execution's messages.
func (e *Execution) Close() { e.c.forget(e.id) }

// Run executes code and collects every event.
func (c *Client) Run(ctx context.Context, code string, o ExecuteOptions) (Reply, []Event, error) {
	x, err := c.Execute(code, o)
	if err != nil {
		return Reply{}, nil, err
	}
	defer x.Close()
	var events []Event
	done := make(chan struct{})
	var r Reply
	var werr error
	go func() { r, werr = x.Wait(ctx); close(done) }()
	for {
		select {
		case ev := <-x.Events:
			events = append(events, ev)
		case <-done:
			for {
				select {
				case ev := <-x.Events:
					events = append(events, ev)
				default:
					return r, events, werr
				}
			}
		}
	}
}

// Interrupt sends interrupt_request on the control channel and waits for
// the reply.
func (c *Client) Interrupt(ctx context.Context) error {
	_, err := c.request(ctx, c.control, "interrupt_request", map[string]any{})
	return err
}

// Shutdown asks the kernel to exit.
func (c *Client) Shutdown(ctx context.Context, restart bool) error {
	_, err := c.request(ctx, c.control, "shutdown_request", map[string]any{"restart": restart})
	return err
}

// Alive pings the heartbeat channel. A busy IRkernel does not answer its
// heartbeat, so a false here alone does not mean dead.
func (c *Client) Alive(ctx context.Context) bool {
	ch := make(chan bool, 1)
	go func() {
		c.sendMu.Lock()
		err := c.hb.Send(zmq4.NewMsgString("ping"))
		c.sendMu.Unlock()
		if err != nil {
			ch <- false
			return
		}
		_, err = c.hb.Recv()
		ch <- err == nil
	}()
	select {
	case ok := <-ch:
		return ok
	case <-ctx.Done():
		return false
	}
}

// Close closes every socket.
func (c *Client) Close() error {
	select {
	case <-c.closed:
		return nil
	default:
	}
	close(c.closed)
	if c.unregister != nil {
		c.unregister()
	}
	var errs []string
	for _, s := range []zmq4.Socket{c.shell, c.stdin, c.control, c.iopub, c.hb} {
		if s != nil {
			if err := s.Close(); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
