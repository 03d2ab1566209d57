package httpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/tenant"
)

// fakeCore is a core with one MCP tool (echo) and scripted readiness; it
// records what the transport gave and told it.
type fakeCore struct {
	srv   *mcp.Server
	ready []Check

	mu      sync.Mutex
	reg     *tenant.Registry
	hooks   []func(*audit.Entry)
	entries []audit.Entry
}

func newFakeCore(ready ...Check) *fakeCore {
	c := &fakeCore{srv: mcp.NewServer(&mcp.Implementation{Name: "fake", Version: "1"}, nil), ready: ready}
	mcp.AddTool(c.srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, req *mcp.CallToolRequest, in struct{ Text string }) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	return c
}

func (c *fakeCore) MCPServer(*http.Request) *mcp.Server { return c.srv }
func (c *fakeCore) Tasks(next http.Handler, _ func(*http.Request) (string, error), _ int64) http.Handler {
	return next
}

func (c *fakeCore) UseTenants(reg *tenant.Registry, obs tenant.Observer) {
	c.mu.Lock()
	c.reg = reg
	c.mu.Unlock()
	c.srv.AddReceivingMiddleware(reg.Middleware(c, obs))
}

func (c *fakeCore) Record(e audit.Entry) {
	c.mu.Lock()
	hooks := c.hooks
	c.mu.Unlock()
	for _, h := range hooks {
		h(&e)
	}
	c.mu.Lock()
	c.entries = append(c.entries, e)
	c.mu.Unlock()
}

func (c *fakeCore) AddAuditHook(h func(*audit.Entry)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hooks = append(c.hooks, h)
}

func (c *fakeCore) SessionCount(string) int { return 3 }

func (c *fakeCore) PluginStatuses() []PluginStatus {
	return []PluginStatus{{Name: "python", Languages: []string{"python"}, Restarts: 2}}
}

func (c *fakeCore) Ready(context.Context) []Check { return c.ready }

func (c *fakeCore) events() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.entries {
		out = append(out, fmt.Sprint(e.Event, " ", e.UserID, " ", e.Details["rule"]))
	}
	return out
}

var _ Core = (*fakeCore)(nil)

const key = "the-tenants-key"

// authenticated has one tenant, alice, with key.
func authenticated(cfg *config.Config) {
	cfg.Tenants = map[string]config.Tenant{"alice": {APIKeySHA256: []string{tenant.HashKey(key)}}}
}

// running is a served Server.
type running struct {
	*Server
	main, admin string // base URLs
	stop        func() error
}

// start serves core with cfg on loopback ports until the test ends.
func start(t *testing.T, cfg config.Config, core Core) *running {
	t.Helper()
	s, err := New(cfg, core, "127.0.0.1:0", hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, func(m, a string) { addrs <- [2]string{m, a} }) }()
	r := &running{Server: s}
	select {
	case a := <-addrs:
		r.main, r.admin = "http://"+a[0], "http://"+a[1]
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	var once sync.Once
	var serr error
	r.stop = func() error {
		once.Do(func() { cancel(); serr = <-done })
		return serr
	}
	t.Cleanup(func() { r.stop() })
	return r
}

const listTools = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`

func callEcho(text string) string {
	return `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"Text":"` + text + `"}}}`
}

// post sends one JSON-RPC message to the MCP endpoint.
func post(t *testing.T, url, body string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func get(t *testing.T, url string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// Every refusal in front of the MCP endpoint, and what gets through.
func TestRefusals(t *testing.T) {
	t.Parallel()
	bearer := map[string]string{"Authorization": "Bearer " + key}
	cases := []struct {
		name      string
		cfg       func(*config.Config)
		body      string
		header    map[string]string
		code      int
		contains  string
		header401 bool // a Bearer challenge
	}{
		{name: "open, loopback", body: callEcho("hi"), code: 200, contains: `"text":"hi"`},
		{name: "no token", cfg: authenticated, body: listTools, code: 401, header401: true},
		{name: "wrong token", cfg: authenticated, body: listTools, header: map[string]string{"Authorization": "Bearer nope"}, code: 401, header401: true},
		{name: "right token", cfg: authenticated, body: callEcho("alice"), header: bearer, code: 200, contains: `"text":"alice"`},
		{name: "cross-origin", body: listTools, header: map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, code: 403, contains: "cross-origin request from https://evil.example"},
		{name: "trusted origin", cfg: func(c *config.Config) { c.Server.AllowedOrigins = []string{"https://app.example"} },
			body: listTools, header: map[string]string{"Origin": "https://app.example", "Sec-Fetch-Site": "cross-site"}, code: 200, contains: `"echo"`},
		{name: "rebinding host", body: listTools, header: map[string]string{"Host": "evil.example"}, code: 403},
		{name: "body too large", cfg: func(c *config.Config) { c.Server.MaxRequestBody = 64 }, body: callEcho(strings.Repeat("x", 200)), code: 413},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			r := start(t, cfg, newFakeCore())
			code, h, body := post(t, r.main+Path, c.body, c.header)
			if code != c.code || !strings.Contains(body, c.contains) {
				t.Errorf("%d %q, want %d containing %q", code, body, c.code, c.contains)
			}
			if got := strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer "); got != c.header401 {
				t.Errorf("challenge %q", h.Get("WWW-Authenticate"))
			}
		})
	}
}

// A tenant's open requests are bounded: one more is a 429 naming the
// quota, audited with its rule.
func TestRequestsInFlightQuota(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Quotas.MaxRequestsInFlight = 1
	core := newFakeCore()
	r := start(t, cfg, core)
	// The first request holds the slot: its body never ends.
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.main, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{", Path, strings.TrimPrefix(r.main, "http://"))
	deadline := time.Now().Add(10 * time.Second)
	for r.Tenants.Requests(tenant.Local) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	code, h, body := post(t, r.main+Path, listTools, nil)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") != "1" || !strings.Contains(body, "max_requests_in_flight") {
		t.Errorf("second request: %d %q (Retry-After %q)", code, body, h.Get("Retry-After"))
	}
	if d := cmp.Diff([]string{tenant.QuotaRefused + " local quotas.max_requests_in_flight"}, core.events()); d != "" {
		t.Errorf("audit (-want +got):\n%s", d)
	}
	conn.Close()
	for r.Tenants.Requests(tenant.Local) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if code, _, body := post(t, r.main+Path, listTools, nil); code != 200 {
		t.Errorf("after the slot was freed: %d %q", code, body)
	}
}

// /readyz is 200 only when every check of the core passes.
func TestReadyz(t *testing.T) {
	t.Parallel()
	ok := Check{Name: "podman", OK: true, Detail: "up"}
	bad := Check{Name: "image x", Detail: "missing"}
	cases := []struct {
		name   string
		checks []Check
		code   int
	}{
		{"all pass", []Check{ok}, 200},
		{"one fails", []Check{ok, bad}, 503},
		{"no check", nil, 503},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := start(t, config.Default(), newFakeCore(c.checks...))
			code, h, body := get(t, r.admin+"/readyz", nil)
			var got struct {
				Ready  bool
				Checks []Check
			}
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatal(err)
			}
			if code != c.code || got.Ready != (c.code == 200) || h.Get("Content-Type") != "application/json" {
				t.Errorf("%d ready=%v", code, got.Ready)
			}
			if d := cmp.Diff(c.checks, got.Checks); d != "" {
				t.Errorf("checks (-want +got):\n%s", d)
			}
		})
	}
}

// On the public listener of an authenticated server the metrics need a
// key; on a separate admin listener they do not, and the MCP endpoint is
// not there.
func TestAdminRoutes(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	authenticated(&cfg)
	r := start(t, cfg, newFakeCore(Check{Name: "x", OK: true}))
	if code, _, _ := get(t, r.main+"/metrics", nil); code != 401 {
		t.Errorf("public metrics without a key: %d", code)
	}
	code, _, body := get(t, r.main+"/metrics", map[string]string{"Authorization": "Bearer " + key})
	if code != 200 || !strings.Contains(body, `mcp_forge_sessions_live{tenant="alice"} 3`) || !strings.Contains(body, `mcp_forge_plugin_restarts_total{plugin="python"} 2`) {
		t.Errorf("public metrics with a key: %d\n%s", code, body)
	}
	if code, _, body := get(t, r.main+"/healthz", nil); code != 200 || body != "ok\n" {
		t.Errorf("healthz %d %q", code, body)
	}

	cfg.Server.AdminAddr = "127.0.0.1:0"
	r = start(t, cfg, newFakeCore(Check{Name: "x", OK: true}))
	if r.admin == r.main {
		t.Fatal("no separate admin listener")
	}
	if code, _, _ := get(t, r.admin+"/metrics", nil); code != 200 {
		t.Errorf("admin metrics: %d", code)
	}
	if code, _, _ := get(t, r.admin+"/readyz", nil); code != 200 {
		t.Errorf("admin readyz: %d", code)
	}
	if code, _, _ := post(t, r.admin+Path, listTools, nil); code != 404 {
		t.Errorf("MCP on the admin listener: %d", code)
	}
	if code, _, _ := get(t, r.main+"/healthz", nil); code != 404 {
		t.Errorf("healthz on the public listener: %d", code)
	}
}

// The protected-resource metadata (RFC 9728) is served and announced in
// 401s.
func TestResourceMetadata(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	authenticated(&cfg)
	cfg.Auth.JWT.ResourceURL = "https://forge.example/mcp"
	cfg.Auth.JWT.AuthorizationServers = []string{"https://id.example"}
	r := start(t, cfg, newFakeCore())
	code, _, body := get(t, r.main+wellKnown+"/mcp", nil)
	if code != 200 || !strings.Contains(body, `"resource":"https://forge.example/mcp"`) {
		t.Errorf("metadata %d %q", code, body)
	}
	_, h, _ := post(t, r.main+Path, listTools, nil)
	if !strings.Contains(h.Get("WWW-Authenticate"), `resource_metadata="https://forge.example/.well-known/oauth-protected-resource/mcp"`) {
		t.Errorf("challenge %q", h.Get("WWW-Authenticate"))
	}
}

// The core is given the tenants once and the audit hooks attribute and
// count entries.
func TestNewWiresTheCore(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	authenticated(&cfg)
	core := newFakeCore()
	s, err := New(cfg, core, "127.0.0.1:0", hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if core.reg != s.Tenants || len(core.hooks) != 2 {
		t.Errorf("tenants given: %v, hooks %d", core.reg == s.Tenants, len(core.hooks))
	}
}

// server.admin_public lets the admin listener bind a pod's address, where
// the kubelet probes it; the MCP listener still needs its keys.
func TestAdminPublic(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Server.AdminAddr, cfg.Server.AdminPublic = "0.0.0.0:0", true
	if _, err := New(cfg, newFakeCore(), "0.0.0.0:0", hclog.NewNullLogger()); err == nil || !strings.Contains(err.Error(), "refusing to serve 0.0.0.0:0 without authentication") {
		t.Errorf("an unauthenticated MCP listener: %v", err)
	}
	authenticated(&cfg)
	if _, err := New(cfg, newFakeCore(), "0.0.0.0:0", hclog.NewNullLogger()); err != nil {
		t.Errorf("admin_public refused: %v", err)
	}
}

// What New and Serve refuse to start with.
func TestConfigurationRefused(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })
	cases := []struct {
		name  string
		addr  string
		cfg   func(*config.Config)
		serve bool // refused by Serve, not New
		want  string
	}{
		{"public without auth", "0.0.0.0:0", nil, false, "refusing to serve 0.0.0.0:0 without authentication"},
		{"public admin", "127.0.0.1:0", func(c *config.Config) { c.Server.AdminAddr = "0.0.0.0:9" }, false, "server.admin_addr: 0.0.0.0:9 would serve /metrics (tenant names and call counts) without authentication"},
		{"bad JWKS", "127.0.0.1:0", func(c *config.Config) {
			authenticated(c)
			c.Auth.JWT = config.JWT{JWKSFile: filepath.Join(t.TempDir(), "none.json"), Issuer: "i", Audience: "a", TenantClaim: "sub"}
		}, false, "none.json"},
		{"bad origin", "127.0.0.1:0", func(c *config.Config) { c.Server.AllowedOrigins = []string{"not a url"} }, true, "server.allowed_origins"},
		{"no body timeout", "127.0.0.1:0", func(c *config.Config) { c.Server.RequestBodyTimeout = 0 }, true, "server.request_body_timeout must be a positive"},
		{"bad TLS files", "127.0.0.1:0", func(c *config.Config) { c.Server.TLSCert, c.Server.TLSKey = "/nonexistent/c.pem", "/nonexistent/k.pem" }, true, "server.tls_cert/tls_key"},
		{"port taken", taken.Addr().String(), nil, true, "listen on " + taken.Addr().String()},
		{"admin port taken", "127.0.0.1:0", func(c *config.Config) { c.Server.AdminAddr = taken.Addr().String() }, true, "listen on server.admin_addr"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			s, err := New(cfg, newFakeCore(), c.addr, hclog.NewNullLogger())
			if !c.serve {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("New: %v, want %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Serve(ctx, nil); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Serve: %v, want %q", err, c.want)
			}
		})
	}
}

// A stop lets running requests finish within server.shutdown_timeout and
// cuts them after.
func TestShutdownCutsAfterTheDeadline(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Server.ShutdownTimeout = 1
	r := start(t, cfg, newFakeCore())
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.main, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A request go-sdk accepts, so that its handler is held reading the
	// body: without Accept it answered 400 at once, and that answer, held
	// by net/http until the unread body was discarded, sometimes got out
	// when the shutdown cut the discard short (a flake under -race).
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{", Path, strings.TrimPrefix(r.main, "http://"))
	deadline := time.Now().Add(10 * time.Second)
	for r.Tenants.Requests(tenant.Local) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	began := time.Now()
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < time.Second || took > 10*time.Second {
		t.Errorf("stopped after %s, want the 1s deadline", took)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(conn).ReadByte(); err == nil {
		t.Error("the held request's connection is still open")
	}
}

// countingReady counts rounds of checks; each takes a while, as one that
// asks an API server does.
type countingReady struct{ n atomic.Int32 }

func (c *countingReady) Ready(ctx context.Context) []Check {
	c.n.Add(1)
	time.Sleep(20 * time.Millisecond)
	return []Check{{Name: "engine", OK: ctx.Err() == nil}}
}

// A burst of /readyz requests shares one round of checks, an answer
// serves readyTTL, and a requester that hangs up does not fail the round.
func TestReadyCache(t *testing.T) {
	t.Parallel()
	var c readyCache
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	core := &countingReady{}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if got := c.get(gone, core.Ready); len(got) != 1 || !got[0].OK {
		t.Errorf("the round of a requester that hung up: %+v", got)
	}
	burst := func() {
		var wg sync.WaitGroup
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if got := c.get(context.Background(), core.Ready); len(got) != 1 || !got[0].OK {
					t.Errorf("checks %+v", got)
				}
			}()
		}
		wg.Wait()
	}
	burst()
	if n := core.n.Load(); n != 1 {
		t.Errorf("within readyTTL: %d rounds; want 1", n)
	}
	mu.Lock()
	now = now.Add(readyTTL)
	mu.Unlock()
	burst()
	if n := core.n.Load(); n != 2 {
		t.Errorf("a burst after readyTTL: %d rounds; want 2", n)
	}
}
