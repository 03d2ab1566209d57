// Package forward sends a tool call of a session that another replica of
// a core in the cluster serves to that replica over the pod network, with
// the caller's own credentials, and answers with that replica's result,
// its progress passed on. Over HTTP a client may so reach any replica for
// a session's calls: the session stays where its kernel runs.
package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
)

// Header marks a forwarded call with the replica that forwarded it: the
// replica it reaches answers it itself, never forwards it again.
const Header = "Mcp-Forge-Forwarded-By"

// maxConns bounds the connections kept, one per replica address and
// tenant (a tenant's credential refused there fails its connection only);
// past it the least recently used goes (closed apart: a close waits for
// its calls).
const maxConns = 256

// Locate is the pod address of a replica, "NAMESPACE/NAME", checked to be
// one of this core's (kubernetes.Client.ReplicaAddress).
type Locate func(ctx context.Context, replica string) (string, error)

// Route is the replica that serves the session a call names, "" when none
// other does (engine.HeldElsewhere, with the caller's identity).
type Route func(ctx context.Context, call *mcp.CallToolRequest) string

// Forwarder forwards the calls of sessions other replicas serve.
type Forwarder struct {
	route   Route
	locate  Locate
	port    int
	path    string
	self    string // this replica, NAMESPACE/NAME
	version string
	rec     audit.Recorder
	log     hclog.Logger

	mu      sync.Mutex
	clients map[string]*conn // replica address and tenant → a connection

	seq      atomic.Uint64
	progress sync.Map // token of a forwarded call → pending
}

type conn struct {
	cs   *mcp.ClientSession
	used time.Time
}

// pending is where a forwarded call's progress goes back to.
type pending struct {
	ctx   context.Context // the caller's request: its progress goes to its stream
	to    *mcp.ServerSession
	token any
}

// New returns a Forwarder to replicas listening on port at path (this
// replica's own: they run the same configuration).
func New(route Route, locate Locate, port int, path, self, version string, rec audit.Recorder, log hclog.Logger) *Forwarder {
	if self == "" {
		self = "a replica" // the header must be there for the loop guard
	}
	return &Forwarder{route: route, locate: locate, port: port, path: path, self: self, version: version, rec: rec, log: log, clients: map[string]*conn{}}
}

// Middleware forwards a tool call of a session another replica serves. It
// asks first, so that nothing of the call is admitted or counted here;
// a call refused all the same (the session moved meanwhile: the refusal
// the tool answered with keeps the engine's error beside it, which names
// the replica, a *runtime.HeldError) is forwarded then, and what the
// layers inside took of it given back (toolcall.Forwarded: the tenants'
// rate token). It must be outside the tenants' middleware (added after
// it).
func (f *Forwarder) Middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		call, ok := req.(*mcp.CallToolRequest)
		if method != "tools/call" || !ok || call.Params == nil || call.Extra == nil || call.Extra.Header.Get(Header) != "" {
			return next(ctx, method, req)
		}
		tried := ""
		if replica := f.route(ctx, call); replica != "" && replica != f.self {
			res, done, err := f.forward(ctx, replica, call)
			if done {
				return res, err
			}
			tried = replica
		}
		res, err := next(ctx, method, req)
		refused, _ := res.(*mcp.CallToolResult)
		replica := heldBy(refused)
		if err != nil || replica == "" || replica == tried || replica == f.self {
			return res, err
		}
		out, done, ferr := f.forward(ctx, replica, call)
		if !done {
			return res, err // not sent: the refusal stands (retry)
		}
		toolcall.Forwarded(refused)
		return out, ferr
	}
}

// heldBy is the replica that serves the session of a call refused here
// for it (rule session-held), "" for any other result.
func heldBy(res *mcp.CallToolResult) string {
	var held *runtime.HeldError
	if res == nil || !res.IsError || !errors.As(res.GetError(), &held) {
		return ""
	}
	return held.By
}

// forward calls the same tool with the same arguments on replica,
// audited. done is false when the call did not reach it (it did not run
// there: the caller may go on as if never forwarded); otherwise res and
// err are the answer: the replica's, or a refusal saying the call may
// have run when its answer was lost on the way.
func (f *Forwarder) forward(ctx context.Context, replica string, call *mcp.CallToolRequest) (res *mcp.CallToolResult, done bool, err error) {
	start := time.Now()
	session := toolcall.SessionID(call)
	res, sent, err := f.send(ctx, replica, call)
	e := audit.Entry{Event: audit.SessionForward, Success: sent && err == nil, Severity: audit.Info, Error: audit.ErrText(err),
		Details: map[string]any{"tool": call.Params.Name, "session": session, "to": replica, "forward_ms": time.Since(start).Milliseconds()}}
	if call.Extra.TokenInfo != nil {
		e.UserID = call.Extra.TokenInfo.UserID
	}
	switch {
	case err == nil:
	case !sent:
		e.Severity = audit.Warning
		f.log.Warn("could not reach the replica serving a session", "tool", call.Params.Name, "replica", replica, "error", err)
	case answered(err) || ctx.Err() != nil:
		// The replica's own answer (a protocol error), or the caller
		// went away: passed on as they are.
	default:
		e.Severity = audit.Warning
		f.log.Warn("the answer of a forwarded call was lost", "tool", call.Params.Name, "replica", replica, "error", err)
		msg := fmt.Sprintf("this call was passed to the replica of this server that serves session %q, and its answer was lost on the way: the code may have run. "+
			"Look at the session's state (its variables, list_files) before running it again", session)
		res, err = toolcall.Refused("ForwardLost", msg, nil), nil
	}
	f.rec.Record(e)
	return res, sent, err
}

// send makes the call on replica; sent says whether it left this replica
// (its connection to the replica was up).
func (f *Forwarder) send(ctx context.Context, replica string, call *mcp.CallToolRequest) (*mcp.CallToolResult, bool, error) {
	host, err := f.locate(ctx, replica)
	if err != nil {
		return nil, false, err
	}
	addr := net.JoinHostPort(host, strconv.Itoa(f.port))
	cred := call.Extra.Header.Get("Authorization")
	key := addr + "\x00"
	if call.Extra.TokenInfo != nil {
		key += call.Extra.TokenInfo.UserID
	}
	cs, err := f.client(key, addr, cred)
	if err != nil {
		return nil, false, err
	}
	params := &mcp.CallToolParams{Name: call.Params.Name}
	if len(call.Params.Arguments) > 0 {
		params.Arguments = call.Params.Arguments
	}
	if tok := call.Params.GetProgressToken(); tok != nil && call.Session != nil {
		// A token of this replica's own, so that two callers' equal
		// tokens on one connection stay apart.
		fwd := "forward-" + strconv.FormatUint(f.seq.Add(1), 10)
		f.progress.Store(fwd, pending{ctx: ctx, to: call.Session, token: tok})
		defer f.progress.Delete(fwd)
		params.SetProgressToken(fwd)
	}
	// The caller's credential rides with this call only (credentials),
	// which also notes the HTTP status the replica answered with.
	st := &status{}
	res, err := cs.CallTool(context.WithValue(context.WithValue(ctx, credKey{}, cred), statusKey{}, st), params)
	if err != nil {
		var dial *net.OpError
		// Turned away by the replica's HTTP layer before anything ran
		// (its own JSON-RPC answer aside).
		refused := false
		switch st.get() {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			refused = !answered(err)
		}
		if !answered(err) && !refused && ctx.Err() == nil {
			f.drop(key, cs) // the replica may be gone
		}
		return nil, !refused && !(errors.As(err, &dial) && dial.Op == "dial"), fmt.Errorf("call %s on %s (%s): %w", call.Params.Name, replica, addr, err)
	}
	return res, true, nil
}

// answered says whether err is the replica's own answer (a JSON-RPC
// error it sent), not one of the client's transport (the codes go-sdk
// gives those: unknown, closing, rejected by the transport).
func answered(err error) bool {
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) {
		return false
	}
	switch wire.Code {
	case -32001, -32003, -32004, -32005:
		return false
	}
	return true
}

// client is the connection key names, to the replica at addr, made once
// (its initialize with cred, the first caller's credential, which the
// connection does not keep).
func (f *Forwarder) client(key, addr, cred string) (*mcp.ClientSession, error) {
	f.mu.Lock()
	if c := f.clients[key]; c != nil {
		c.used = time.Now()
		f.mu.Unlock()
		return c.cs, nil
	}
	f.mu.Unlock()
	c := mcp.NewClient(&mcp.Implementation{Name: "mcp-forge-forward", Version: f.version}, &mcp.ClientOptions{ProgressNotificationHandler: f.onProgress})
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
	tr := &mcp.StreamableClientTransport{Endpoint: "http://" + addr + f.path, DisableStandaloneSSE: true, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: credentials{by: f.self, base: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}}}}
	// Nothing of the first caller's request is kept with the connection,
	// its credential only for the connection's own first requests.
	box := &credBox{}
	box.set(cred)
	cctx, cancel := context.WithTimeout(context.WithValue(context.Background(), credKey{}, box), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(cctx, tr, nil)
	box.set("")
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	f.mu.Lock()
	if have := f.clients[key]; have != nil {
		f.mu.Unlock()
		go cs.Close()
		return have.cs, nil
	}
	var oldest string
	if len(f.clients) >= maxConns {
		for a, c := range f.clients {
			if oldest == "" || c.used.Before(f.clients[oldest].used) {
				oldest = a
			}
		}
		go f.clients[oldest].cs.Close()
		delete(f.clients, oldest)
	}
	f.clients[key] = &conn{cs: cs, used: time.Now()}
	f.mu.Unlock()
	return cs, nil
}

// drop forgets a connection that failed; its close (which waits for its
// other calls) is not waited for.
func (f *Forwarder) drop(key string, cs *mcp.ClientSession) {
	f.mu.Lock()
	if c := f.clients[key]; c != nil && c.cs == cs {
		delete(f.clients, key)
	}
	f.mu.Unlock()
	go cs.Close()
}

// Close closes the connections to replicas.
func (f *Forwarder) Close() {
	f.mu.Lock()
	all := f.clients
	f.clients = map[string]*conn{}
	f.mu.Unlock()
	for _, c := range all {
		c.cs.Close()
	}
}

// onProgress passes a forwarded call's progress back to its caller, with
// the caller's own token, on the caller's request. (Progress that reaches
// here after the call's answer has nowhere to go.)
func (f *Forwarder) onProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	v, ok := f.progress.Load(req.Params.ProgressToken)
	if !ok {
		return
	}
	p := v.(pending)
	_ = p.to.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: req.Params.Progress, Total: req.Params.Total, Message: req.Params.Message})
}

// credKey carries a call's credential to its HTTP requests: a string for
// a call, a *credBox for a connection's own requests.
type credKey struct{}

// credBox is the credential of a connection's first requests, cleared
// once it is made.
type credBox struct {
	mu sync.Mutex
	v  string
}

func (b *credBox) set(v string) {
	b.mu.Lock()
	b.v = v
	b.mu.Unlock()
}

func (b *credBox) get() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.v
}

// statusKey carries a call's status: the HTTP status of its request.
type statusKey struct{}

type status struct{ code atomic.Int32 }

func (s *status) get() int { return int(s.code.Load()) }

// credentials sends each request with the credential of the call it
// belongs to, marks it as forwarded, and notes the status it got.
type credentials struct {
	by   string
	base http.RoundTripper
}

func (c credentials) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	switch cred := r.Context().Value(credKey{}).(type) {
	case string:
		r.Header.Set("Authorization", cred)
	case *credBox:
		if v := cred.get(); v != "" {
			r.Header.Set("Authorization", v)
		}
	}
	r.Header.Set(Header, c.by)
	resp, err := c.base.RoundTrip(r)
	if st, _ := r.Context().Value(statusKey{}).(*status); st != nil && resp != nil {
		st.code.Store(int32(resp.StatusCode))
	}
	return resp, err
}
