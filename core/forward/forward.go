// Package forward sends a tool call that another replica of a core in the
// cluster must serve (the session it names is that replica's: core/held)
// to that replica over the pod network, with the caller's own
// credentials, and answers with that replica's result, its progress
// passed on. Over HTTP a client may so reach any replica for any call:
// the session stays where its kernel runs.
package forward

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/held"
)

// Header marks a forwarded call with the replica that forwarded it: the
// replica it reaches answers it itself, never forwards it again.
const Header = "Mcp-Forge-Forwarded-By"

// maxClients bounds the connections kept to replicas (one per replica
// and credential): past it they are all closed and made again.
const maxClients = 256

// Locate is the pod address of a replica, "NAMESPACE/NAME", checked to be
// one of this core's (kubernetes.Client.ReplicaAddress).
type Locate func(ctx context.Context, replica string) (string, error)

// Forwarder forwards calls refused for a session another replica serves.
type Forwarder struct {
	locate  Locate
	port    int
	path    string
	self    string // this replica, NAMESPACE/NAME
	version string
	rec     audit.Recorder
	log     hclog.Logger

	mu      sync.Mutex
	clients map[string]*mcp.ClientSession // address and credential → a connection

	seq      atomic.Uint64
	progress sync.Map // token of a forwarded call → pending
}

// pending is where a forwarded call's progress goes back to.
type pending struct {
	to    *mcp.ServerSession
	token any
}

// New returns a Forwarder to replicas listening on port at path (this
// replica's own: they run the same configuration).
func New(locate Locate, port int, path, self, version string, rec audit.Recorder, log hclog.Logger) *Forwarder {
	return &Forwarder{locate: locate, port: port, path: path, self: self, version: version, rec: rec, log: log, clients: map[string]*mcp.ClientSession{}}
}

// Middleware forwards a tool call that the core refused because another
// replica serves its session (it must be outside the tenants' middleware,
// so that this replica's run slot is free before the other replica counts
// its own). A call that cannot be forwarded keeps its refusal (retry).
func (f *Forwarder) Middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		call, ok := req.(*mcp.CallToolRequest)
		if method != "tools/call" || !ok || call.Params == nil || call.Extra == nil || call.Extra.Header.Get(Header) != "" {
			return next(ctx, method, req)
		}
		wctx, by := held.Watch(ctx)
		res, err := next(wctx, method, req)
		replica := by()
		if err != nil || replica == "" {
			return res, err
		}
		start := time.Now()
		out, ferr := f.forward(ctx, replica, call)
		e := audit.Entry{Event: audit.SessionForward, Success: ferr == nil, Severity: audit.Info, Error: audit.ErrText(ferr),
			Details: map[string]any{"tool": call.Params.Name, "to": replica, "forward_ms": time.Since(start).Milliseconds()}}
		if call.Extra.TokenInfo != nil {
			e.UserID = call.Extra.TokenInfo.UserID
		}
		if ferr != nil {
			e.Severity = audit.Warning
			f.log.Warn("could not forward a call to the replica serving its session", "tool", call.Params.Name, "replica", replica, "error", ferr)
		}
		f.rec.Record(e)
		if ferr != nil {
			return res, nil
		}
		return out, nil
	}
}

// forward calls the same tool with the same arguments on replica.
func (f *Forwarder) forward(ctx context.Context, replica string, call *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	host, err := f.locate(ctx, replica)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(host, strconv.Itoa(f.port))
	cred := call.Extra.Header.Get("Authorization")
	cs, err := f.client(ctx, addr, cred)
	if err != nil {
		return nil, err
	}
	params := &mcp.CallToolParams{Name: call.Params.Name, Arguments: call.Params.Arguments}
	if tok := call.Params.GetProgressToken(); tok != nil && call.Session != nil {
		// A token of this replica's own, so that two callers' equal
		// tokens on one connection stay apart.
		fwd := "forward-" + strconv.FormatUint(f.seq.Add(1), 10)
		f.progress.Store(fwd, pending{to: call.Session, token: tok})
		defer f.progress.Delete(fwd)
		params.SetProgressToken(fwd)
	}
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		f.drop(addr, cred, cs)
		return nil, fmt.Errorf("call %s on %s (%s): %w", call.Params.Name, replica, addr, err)
	}
	return res, nil
}

// client is the connection to addr with credential cred, made once.
func (f *Forwarder) client(ctx context.Context, addr, cred string) (*mcp.ClientSession, error) {
	key := addr + "\x00" + credKey(cred)
	f.mu.Lock()
	cs := f.clients[key]
	f.mu.Unlock()
	if cs != nil {
		return cs, nil
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "mcp-forge-forward", Version: f.version}, &mcp.ClientOptions{ProgressNotificationHandler: f.onProgress})
	tr := &mcp.StreamableClientTransport{Endpoint: "http://" + addr + f.path, DisableStandaloneSSE: true, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: headers{cred: cred, by: f.self}}}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cs, err := c.Connect(cctx, tr, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if have := f.clients[key]; have != nil {
		cs.Close()
		return have, nil
	}
	if len(f.clients) >= maxClients {
		for k, old := range f.clients {
			old.Close()
			delete(f.clients, k)
		}
	}
	f.clients[key] = cs
	return cs, nil
}

// drop forgets a connection that failed: the replica may be gone.
func (f *Forwarder) drop(addr, cred string, cs *mcp.ClientSession) {
	key := addr + "\x00" + credKey(cred)
	f.mu.Lock()
	if f.clients[key] == cs {
		delete(f.clients, key)
	}
	f.mu.Unlock()
	cs.Close()
}

// Close closes the connections to replicas.
func (f *Forwarder) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, cs := range f.clients {
		cs.Close()
		delete(f.clients, k)
	}
}

// onProgress passes a forwarded call's progress back to its caller, with
// the caller's own token.
func (f *Forwarder) onProgress(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
	v, ok := f.progress.Load(req.Params.ProgressToken)
	if !ok {
		return
	}
	p := v.(pending)
	_ = p.to.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: req.Params.Progress, Total: req.Params.Total, Message: req.Params.Message})
}

// credKey keeps a credential out of the map's keys.
func credKey(cred string) string {
	sum := sha256.Sum256([]byte(cred))
	return hex.EncodeToString(sum[:])
}

// headers sends the caller's credential and marks the call as forwarded.
type headers struct{ cred, by string }

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.cred != "" {
		r.Header.Set("Authorization", h.cred)
	}
	r.Header.Set(Header, h.by)
	return http.DefaultTransport.RoundTrip(r)
}
