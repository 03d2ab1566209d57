package mcpserver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/audit/audittest"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine/assembly"
	"github.com/mcp-forge/mcp-forge/core/engine/enginetest"
	"github.com/mcp-forge/mcp-forge/core/forward"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// heldStore is a cluster in which replica by serves every recorded
// session: claiming one is refused.
type heldStore struct{ by string }

func (s heldStore) RecordSession(context.Context, string, runtime.SessionRecord) error { return nil }
func (s heldStore) FindSession(_ context.Context, internal string) (runtime.SessionRecord, string, error) {
	// The one session recorded: the local tenant's s1.
	if internal != session.InternalID(tenant.Local, "s1") {
		return runtime.SessionRecord{}, "", runtime.ErrNoRecord
	}
	return runtime.SessionRecord{Client: tenant.Local, ID: "s1", Internal: internal, Backend: "jupyter", Language: "python"}, "ctr-s1", nil
}
func (s heldStore) ClaimSession(context.Context, string) error        { return &runtime.HeldError{By: s.by} }
func (s heldStore) Holder(context.Context, string) (string, error)    { return s.by, nil }
func (s heldStore) OwnsSession(context.Context, string) (bool, error) { return false, nil }
func (s heldStore) ReleaseSession(context.Context, string) error      { return nil }
func (s heldStore) Forget(string)                                     {}
func (s heldStore) ReleaseAll(context.Context) (int, error)           { return 0, nil }
func (s heldStore) Successors(context.Context) (int, error)           { return 0, nil }

// noHosts is host services never reached: the claim fails first.
type noHosts struct{}

func (noHosts) Endpoints(string, string) (string, []runtime.SessionEndpoint, bool) {
	return "", nil, false
}
func (noHosts) Adopt(string, string, string, []runtime.SessionEndpoint) error {
	return errors.New("not reached")
}
func (noHosts) Release(string, string)                                {}
func (noHosts) Remove(context.Context, string, string) error          { return errors.New("not reached") }
func (noHosts) Running(context.Context, string, string) (bool, error) { return false, nil }

// A call refused by the engine because another replica serves its session
// (rule session-held; the session moved after the forwarder asked) is
// forwarded to that replica, through the real tools, tenants' middleware
// and forwarder, in the order core/forge installs them: the refusal the
// tool answers with names the replica (GetError), and the tenant's rate
// token is given back once the call went there, never when it could not.
func TestHeldRefusalForwarded(t *testing.T) {
	var ran atomic.Int32
	holder := mcp.NewServer(&mcp.Implementation{Name: "holder", Version: "1"}, nil)
	mcp.AddTool(holder, &mcp.Tool{Name: "execute_python"}, func(_ context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
		ran.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran on the holder, forwarded by " + req.Extra.Header.Get(forward.Header)}}}, nil, nil
	})
	hsrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return holder }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(hsrv.Close)
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(hsrv.URL, "http://"))
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}

	cfg := config.Default()
	cfg.Volumes.BasePath = t.TempDir()
	cfg.Quotas.ExecutionsPerMinute, cfg.Quotas.ExecutionBurst = 1, 1 // one token, and the next in a minute
	pm, _ := fixture()
	rec, read := enginetest.Audit(t)
	eng, err := assembly.New(cfg, policy.New(policy.FromConfig(cfg), nil), pm, workspace.New(cfg.Volumes.BasePath, "t", 0, nil), rec, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	eng.SetSessionStore(heldStore{by: "ns/holder"}, noHosts{})
	srv := New(eng, cfg, hclog.NewNullLogger())
	reg := tenant.New(cfg)
	// As core/forge's httpCore.UseTenants: the identity, the tenants'
	// middleware, then the forwarder outside it.
	srv.SetIdentity(reg.Identify)
	srv.MCP().AddReceivingMiddleware(reg.Middleware(rec, nil))
	var reachable atomic.Bool
	locate := func(context.Context, string) (string, error) {
		if !reachable.Load() {
			return "", errors.New("replica ns/holder is not running")
		}
		return "127.0.0.1", nil
	}
	fwRec := &audittest.Recorder{}
	// The forwarder's own question comes too early to see the session
	// held: only the refusal names the replica.
	fw := forward.New(func(context.Context, *mcp.CallToolRequest) string { return "" }, locate, port, "", "ns/me", "test", fwRec, hclog.NewNullLogger())
	t.Cleanup(fw.Close)
	srv.MCP().AddReceivingMiddleware(fw.Middleware)
	bsrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.MCP() }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(bsrv.Close)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: bsrv.URL, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	call := func() *mcp.CallToolResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": "1", "session_id": "s1"}})
		if err != nil {
			t.Fatalf("protocol error: %v", err)
		}
		return res
	}

	// Forwarded twice: each time the token comes back, or the second call
	// would be refused by the rate.
	reachable.Store(true)
	for i := 1; i <= 2; i++ {
		res := call()
		if res.IsError || text(res) != "ran on the holder, forwarded by ns/me" || ran.Load() != int32(i) {
			t.Fatalf("call %d: %q (isError %v), %d ran on the holder; want the holder's answer", i, text(res), res.IsError, ran.Load())
		}
		if !reg.RateLeft(tenant.Local) {
			t.Fatalf("call %d was forwarded, yet its rate token was not given back", i)
		}
		if es := fwRec.Take(); len(es) != 1 || es[0].Event != audit.SessionForward || !es[0].Success || es[0].Details["to"] != "ns/holder" {
			t.Fatalf("call %d: forward audited as %+v", i, es)
		}
	}
	// The engine refused it first, audited with its rule.
	refused := 0
	for _, e := range read() {
		if e.Event == "request.refused" && e.Details["rule"] == "session-held" {
			refused++
		}
	}
	if refused != 2 {
		t.Errorf("%d session-held refusals audited, want 2", refused)
	}

	// The holder cannot be reached: the refusal stands, and the call
	// keeps its token (it ran nowhere else to be counted).
	reachable.Store(false)
	res := call()
	if !res.IsError || !strings.Contains(text(res), "is being served by another replica") || ran.Load() != 2 {
		t.Fatalf("unreachable holder: %q (isError %v), want the refusal", text(res), res.IsError)
	}
	if reg.RateLeft(tenant.Local) {
		t.Fatal("a call that was not forwarded gave its rate token back")
	}
	if res := call(); !res.IsError || !strings.Contains(text(res), "quota executions_per_minute exceeded") {
		t.Fatalf("the next call: %q, want the rate's refusal", text(res))
	}
}
