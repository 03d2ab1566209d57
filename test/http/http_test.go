// Package httpe2e runs the real server binary over streamable HTTP with
// real clients (go-sdk's StreamableClientTransport, the TypeScript SDK)
// against real Podman.
package httpe2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

type execOut struct {
	Success bool   `json:"success"`
	Stdout  string `json:"stdout"`
	Result  any    `json:"result"`
	Error   *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Quota   string `json:"quota"`
	} `json:"error"`
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (*mcp.CallToolResult, execOut) {
	t.Helper()
	var out execOut
	res := testenv.Call(t, cs, tool, args, &out)
	return res, out
}

// metric returns the value of one sample line of a scrape ("name{labels}").
func metric(t *testing.T, scrape, sample string) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

func post(t *testing.T, url, key, contentType string, body []byte) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", "application/json, text/event-stream")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header, b.String()
}

const listTools = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`

// Without a token, or with a wrong one, the MCP endpoint answers 401 with a
// WWW-Authenticate challenge; a go-sdk client cannot connect.
func TestHTTPAuthRequired(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice")
	s := testenv.StartHTTP(t, tenants)
	for name, key := range map[string]string{"no token": "", "wrong token": "mcpf_wrong", "hash as token": strings.Repeat("a", 64)} {
		code, h, body := post(t, s.URL, key, "application/json", []byte(listTools))
		if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: got %d %q %q, want 401 with a Bearer challenge", name, code, h.Get("WWW-Authenticate"), body)
		}
		if _, err := s.Connect(t, key, nil); err == nil {
			t.Errorf("%s: a go-sdk client connected", name)
		}
	}
	if code, _, _ := post(t, s.URL, keys["alice"], "application/json", []byte(listTools)); code != http.StatusOK {
		t.Errorf("with the key: %d, want 200", code)
	}
	// Metrics on the MCP listener need a key too; health does not.
	if code, _ := s.Get(t, "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a key: %d, want 401", code)
	}
	if code, body := s.Get(t, "/healthz", ""); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
}

// The checks the stdio client runs, over HTTP with a token: tools, Python
// and R results, a user error as a tool result, a session across calls,
// the resources.
func TestHTTPSameChecksAsStdio(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice")
	s := testenv.StartHTTP(t, tenants)
	cs := s.MustConnect(t, keys["alice"])
	ctx := context.Background()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"execute_python", "execute_r", "document_state", "list_sessions", "destroy_session", "restart_session"} {
		if !strings.Contains(strings.Join(names, ","), want) {
			t.Errorf("tool %s missing from %v", want, names)
		}
	}
	res, out := call(t, cs, "execute_python", map[string]any{"code": "print('over http')\nsum([20, 22])"})
	if res.IsError || out.Result != "42" || out.Stdout != "over http\n" {
		t.Fatalf("python: %s %+v", testenv.Text(res), out)
	}
	res, out = call(t, cs, "execute_r", map[string]any{"code": "cat('r\\n')\n6 * 7"})
	if res.IsError || !strings.Contains(testenv.Text(res), "42") {
		t.Fatalf("r: %s", testenv.Text(res))
	}
	res, out = call(t, cs, "execute_python", map[string]any{"code": "1/0"})
	if !res.IsError || out.Error == nil || out.Error.Type != "ZeroDivisionError" {
		t.Fatalf("user error: %s", testenv.Text(res))
	}
	// A session survives across HTTP requests (each its own MCP session in
	// stateless mode): it belongs to the tenant.
	call(t, cs, "execute_python", map[string]any{"code": "x = 41", "session_id": "keep"})
	cs2 := s.MustConnect(t, keys["alice"])
	res, out = call(t, cs2, "execute_python", map[string]any{"code": "x + 1", "session_id": "keep"})
	if res.IsError || out.Result != "42" {
		t.Fatalf("session across connections: %s", testenv.Text(res))
	}
	rr, err := cs2.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mcp://forge/sessions/keep/variables"})
	if err != nil || !strings.Contains(rr.Contents[0].Text, `"x"`) {
		t.Fatalf("variables resource: %v %+v", err, rr)
	}
	rr, err = cs2.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mcp://forge/environment/info"})
	if err != nil || !strings.Contains(rr.Contents[0].Text, `"keep"`) {
		t.Fatalf("environment resource lists the tenant's session: %v %+v", err, rr)
	}
}

// Tenant B can neither run in, read, document, restart, destroy nor list
// tenant A's session, even knowing its id: sessions are namespaced by
// tenant, so B's calls with A's id answer as for an unknown id, and B's
// execute with it opens B's own session.
func TestHTTPTenantIsolation(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice", "bob")
	s := testenv.StartHTTP(t, tenants)
	alice, bob := s.MustConnect(t, keys["alice"]), s.MustConnect(t, keys["bob"])
	ctx := context.Background()
	if res, _ := call(t, alice, "execute_python", map[string]any{"code": "secret = 'alice'", "session_id": "shared-id"}); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	for _, uri := range []string{"mcp://forge/sessions/shared-id/state", "mcp://forge/sessions/shared-id/variables"} {
		if rr, err := bob.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("bob read %s: %+v", uri, rr.Contents[0].Text)
		}
	}
	for _, tool := range []string{"document_state", "restart_session", "destroy_session"} {
		// A refusal may come as a tool error or (document_state today: its
		// empty output fails the SDK's output validation) a protocol error.
		res, err := bob.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"session_id": "shared-id", "note": "x"}})
		if err == nil && !res.IsError {
			t.Errorf("bob's %s on alice's session succeeded: %s", tool, testenv.Text(res))
		}
		if err == nil && strings.Contains(testenv.Text(res), "in use") {
			t.Errorf("bob's %s tells him the id is in use: %s", tool, testenv.Text(res))
		}
	}
	var list struct {
		Sessions []struct {
			ID string `json:"session_id"`
		} `json:"sessions"`
	}
	testenv.Call(t, bob, "list_sessions", map[string]any{}, &list)
	if len(list.Sessions) != 0 {
		t.Errorf("bob lists %+v", list.Sessions)
	}
	rr, err := bob.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mcp://forge/environment/info"})
	if err != nil || strings.Contains(rr.Contents[0].Text, "shared-id") {
		t.Errorf("bob's environment resource shows alice's session: %v", err)
	}
	// bob's own "shared-id" is a new session without alice's variables.
	if res, out := call(t, bob, "execute_python", map[string]any{"code": "print(secret)", "session_id": "shared-id"}); !res.IsError || out.Error == nil || out.Error.Type != "NameError" {
		t.Errorf("bob's shared-id is not a session of his own: %s", testenv.Text(res))
	}
	if res, _ := call(t, bob, "execute_python", map[string]any{"code": "secret = 'bob'", "session_id": "shared-id"}); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	// Alice's session is intact.
	if res, _ := call(t, alice, "execute_python", map[string]any{"code": "secret", "session_id": "shared-id"}); res.IsError || !strings.Contains(testenv.Text(res), "'alice'") {
		t.Errorf("alice's session after bob's: %s", testenv.Text(res))
	}
	if res, _ := call(t, bob, "execute_python", map[string]any{"code": "secret", "session_id": "shared-id"}); res.IsError || !strings.Contains(testenv.Text(res), "'bob'") {
		t.Errorf("bob's session: %s", testenv.Text(res))
	}
	for _, cs := range []*mcp.ClientSession{alice, bob} {
		testenv.Call(t, cs, "list_sessions", map[string]any{}, &list)
		if len(list.Sessions) != 1 || list.Sessions[0].ID != "shared-id" {
			t.Errorf("lists %+v", list.Sessions)
		}
	}
	// bob destroys his; alice's stays.
	if res := testenv.Call(t, bob, "destroy_session", map[string]any{"session_id": "shared-id"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if res, _ := call(t, alice, "execute_python", map[string]any{"code": "secret", "session_id": "shared-id"}); res.IsError || !strings.Contains(testenv.Text(res), "'alice'") {
		t.Errorf("alice's session after bob destroyed his: %s", testenv.Text(res))
	}
	// The audit log names each session by its internal id, with the tenant's
	// id in details.session; the container lines of each session carry its
	// tenant.
	b, _ := os.ReadFile(s.AuditLog)
	type entry struct {
		Event     string         `json:"event"`
		UserID    string         `json:"user_id"`
		SessionID string         `json:"session_id"`
		Details   map[string]any `json:"details"`
	}
	var entries []entry
	internal := map[string]string{} // tenant → internal id of its shared-id
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e entry
		json.Unmarshal([]byte(line), &e)
		entries = append(entries, e)
		if e.Event == "session.create" && e.Details["session"] == "shared-id" {
			internal[e.UserID] = e.SessionID
		}
	}
	if internal["alice"] == "" || internal["bob"] == "" || internal["alice"] == internal["bob"] || !strings.HasPrefix(internal["alice"], "shared-id-") {
		t.Fatalf("internal ids: %v", internal)
	}
	// A session that took a warm kernel got a container created before it
	// existed (under a pool id): its session.create line (warm, with the
	// container) is where that container becomes the tenant's.
	containers := map[string]int{}
	for _, e := range entries {
		warm, _ := e.Details["warm"].(bool)
		handover := e.Event == "session.create" && warm && e.Details["container"] != nil
		if e.Event != "container.create" && !handover {
			continue
		}
		for tenant, id := range internal {
			if e.SessionID == id {
				containers[tenant]++
				if e.UserID != tenant {
					t.Errorf("%s of %s's session attributed to %q", e.Event, tenant, e.UserID)
				}
			}
		}
	}
	if containers["alice"] != 1 || containers["bob"] != 1 {
		t.Errorf("container.create lines per tenant: %v", containers)
	}
}

// A quota refusal is a tool error naming the quota's configuration field.
func TestHTTPQuotas(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "carol", "dave")
	// dave's overrides: one session, one run at a time, a rate he never hits.
	tenants += "max_sessions = 1\nmax_concurrent_runs = 1\nexecutions_per_minute = 600\nexecution_burst = 100\n"
	s := testenv.StartHTTP(t, tenants+"[quotas]\nexecutions_per_minute = 1\nexecution_burst = 3\n")
	carol, dave := s.MustConnect(t, keys["carol"]), s.MustConnect(t, keys["dave"])

	// Rate: carol's burst of 3, then refused (empty code is refused by the
	// engine, but only after the quota let it through).
	for i := 0; i < 3; i++ {
		if res, out := call(t, carol, "execute_python", map[string]any{"code": ""}); out.Error == nil || out.Error.Type != "RequestError" {
			t.Fatalf("call %d: %s", i, testenv.Text(res))
		}
	}
	res, out := call(t, carol, "execute_python", map[string]any{"code": "1"})
	if !res.IsError || out.Error == nil || out.Error.Quota != "quotas.executions_per_minute" || !strings.Contains(testenv.Text(res), "quotas.executions_per_minute") {
		t.Fatalf("rate quota: %s %+v", testenv.Text(res), out.Error)
	}

	// Sessions: dave may hold one.
	if res, _ := call(t, dave, "execute_python", map[string]any{"code": "a = 1", "session_id": "d1"}); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	res, out = call(t, dave, "execute_python", map[string]any{"code": "b = 1", "session_id": "d2"})
	if !res.IsError || !strings.Contains(testenv.Text(res), "tenants.dave.max_sessions") {
		t.Fatalf("session quota: %s", testenv.Text(res))
	}
	// Concurrent runs: dave may run one at a time. Once his long run is in
	// the engine (its audit line is written), a second call is refused.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res, _ := call(t, dave, "execute_python", map[string]any{"code": "import time; time.sleep(4)", "session_id": "d1"})
		if res.IsError {
			t.Errorf("long run: %s", testenv.Text(res))
		}
	}()
	testenv.WaitFor(t, "dave's long run to start", time.Minute, func() bool {
		b, _ := os.ReadFile(s.AuditLog)
		return strings.Count(string(b), `"event":"execution.request","severity":"info","session_id":"d1-`) >= 2
	})
	res, _ = call(t, dave, "execute_python", map[string]any{"code": "1"})
	refused := testenv.Text(res)
	if !res.IsError || !strings.Contains(refused, "tenants.dave.max_concurrent_runs") {
		t.Errorf("second concurrent run: %s", refused)
	}
	wg.Wait()
	t.Logf("refusal: %s", refused)
	// Refusals are audited with the quota as the rule, and counted.
	b, _ := os.ReadFile(s.AuditLog)
	for _, rule := range []string{"quotas.executions_per_minute", "tenants.dave.max_sessions", "tenants.dave.max_concurrent_runs"} {
		if !strings.Contains(string(b), `"rule":"`+rule+`"`) {
			t.Errorf("no audit line with rule %s", rule)
		}
	}
	_, scrape := s.Get(t, "/metrics", keys["carol"])
	if v := metric(t, scrape, `mcp_forge_quota_refusals_total{quota="executions_per_minute",tenant="carol"}`); v != 1 {
		t.Errorf("carol's rate refusals in metrics: %v", v)
	}
	if v := metric(t, scrape, `mcp_forge_quota_refusals_total{quota="max_sessions",tenant="dave"}`); v != 1 {
		t.Errorf("dave's session refusals in metrics: %v", v)
	}
}

// A progress token on a session run gets the kernel's output as progress
// notifications, streamed over SSE before the result.
func TestHTTPProgressOverSSE(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice")
	s := testenv.StartHTTP(t, tenants)
	var mu sync.Mutex
	var msgs []string
	var first time.Time
	cs, err := s.Connect(t, keys["alice"], &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() {
			first = time.Now()
		}
		msgs = append(msgs, r.Params.Message)
	}})
	if err != nil {
		t.Fatal(err)
	}
	call(t, cs, "execute_python", map[string]any{"code": "1", "session_id": "p"})
	params := &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{
		"code": "import time, sys\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.7)\n", "session_id": "p"}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(context.Background(), params)
	done := time.Now()
	if err != nil || res.IsError {
		t.Fatalf("%v %s", err, testenv.Text(res))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(msgs) < 3 || !strings.Contains(strings.Join(msgs, "|"), "tick 2") {
		t.Fatalf("progress messages: %q", msgs)
	}
	if done.Sub(first) < 500*time.Millisecond {
		t.Errorf("the first progress arrived %s before the result: not streamed", done.Sub(first))
	}
}

// Hostile bodies get clear HTTP errors; a flood from one tenant is cut by
// its own quota while another tenant is served.
func TestHTTPHostileRequests(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice", "mallory")
	s := testenv.StartHTTP(t, tenants+"[quotas]\nexecutions_per_minute = 30\nexecution_burst = 5\n")
	key := keys["mallory"]
	huge := append([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":"`), bytes.Repeat([]byte("x"), 9<<20)...)
	huge = append(huge, []byte(`"}}}`)...)
	cases := []struct {
		name, ctype, body string
		code              int
		want              string
	}{
		{"oversized", "application/json", string(huge), http.StatusRequestEntityTooLarge, "exceeds"},
		{"malformed JSON", "application/json", `{"jsonrpc":"2.0","id":1,"method":`, http.StatusBadRequest, ""},
		{"not JSON-RPC", "application/json", `[1,2,3]`, http.StatusBadRequest, ""},
		{"wrong content type", "text/plain", listTools, http.StatusUnsupportedMediaType, "Content-Type must be 'application/json'"},
	}
	for _, c := range cases {
		code, _, body := post(t, s.URL, key, c.ctype, []byte(c.body))
		if code != c.code || !strings.Contains(body, c.want) || strings.TrimSpace(body) == "" {
			t.Errorf("%s: %d %.200q, want %d with %q", c.name, code, body, c.code, c.want)
		} else {
			t.Logf("%s: %d %.120q", c.name, code, strings.TrimSpace(body))
		}
	}
	// A browser on another origin cannot post.
	req, _ := http.NewRequest(http.MethodPost, s.URL, strings.NewReader(listTools))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Authorization", "Bearer "+key)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin POST: %v %v", err, resp.StatusCode)
	}
	// DNS rebinding: a loopback listener refuses a foreign Host header.
	req, _ = http.NewRequest(http.MethodPost, s.URL, strings.NewReader(listTools))
	req.Host = "attacker.example"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("foreign Host on loopback: %v %v", err, resp.StatusCode)
	}

	// Flood: mallory fires 60 executions at once; alice runs meanwhile.
	mal := s.MustConnect(t, key)
	alice := s.MustConnect(t, keys["alice"])
	var wg sync.WaitGroup
	var mu sync.Mutex
	quota := 0
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := mal.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": "1"}})
			// Refused by a quota: as a tool error, or as HTTP 429 when more
			// than quotas.max_requests_in_flight are open at once.
			if (err == nil && strings.Contains(testenv.Text(res), "quota")) || (err != nil && strings.Contains(err.Error(), "max_requests_in_flight")) {
				mu.Lock()
				quota++
				mu.Unlock()
			}
		}()
	}
	res, out := call(t, alice, "execute_python", map[string]any{"code": "6*7"})
	wg.Wait()
	if res.IsError || out.Result != "42" {
		t.Errorf("alice during mallory's flood: %s", testenv.Text(res))
	}
	// How many overlap depends on the machine's speed; most must be refused.
	if quota < 30 {
		t.Errorf("only %d of mallory's 60 calls were refused by a quota", quota)
	}
	t.Logf("flood: %d of 60 refused by mallory's quotas; alice served", quota)
}

// Metrics scraped after a run show what the run did.
func TestHTTPMetricsCount(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice", "bob")
	s := testenv.StartHTTP(t, tenants+"[server]\nadmin_addr = \"127.0.0.1:0\"\n")
	if s.Admin == s.Addr {
		t.Fatal("admin_addr did not give a separate listener")
	}
	alice, bob := s.MustConnect(t, keys["alice"]), s.MustConnect(t, keys["bob"])
	for i := 0; i < 3; i++ {
		call(t, alice, "execute_python", map[string]any{"code": "1"})
	}
	call(t, alice, "execute_python", map[string]any{"code": "1/0"})
	call(t, bob, "execute_python", map[string]any{"code": "x = 1", "session_id": "m1"})
	call(t, bob, "execute_python", map[string]any{"code": "import os; os.listdir('/')", "custom_image": "docker.io/evil:latest"})
	code, scrape := s.Get(t, "/metrics", "") // the admin listener has no key
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	checks := map[string]float64{
		`mcp_forge_executions_total{backend="python",language="python",outcome="success",tenant="alice"}`: 3,
		`mcp_forge_executions_total{backend="python",language="python",outcome="error",tenant="alice"}`:   1,
		`mcp_forge_executions_total{backend="jupyter",language="python",outcome="success",tenant="bob"}`:  1,
		`mcp_forge_tool_calls_total{outcome="rejected",tenant="bob",tool="execute_python"}`:               1,
		`mcp_forge_execution_duration_seconds_count{backend="python",language="python"}`:                  4,
		`mcp_forge_sessions_live{tenant="bob"}`:                                                           1,
		`mcp_forge_sessions_live{tenant="alice"}`:                                                         0,
	}
	for sample, want := range checks {
		if got := metric(t, scrape, sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
	if !strings.Contains(scrape, `mcp_forge_plugin_restarts_total{plugin="jupyter"} 0`) {
		t.Error("plugin restarts missing")
	}
}

// /readyz follows the Podman service: unready when it stops, ready when it
// returns. The service is one this test starts on its own socket.
func TestHTTPReadyzFollowsPodman(t *testing.T) {
	testenv.Require(t)
	sock := filepath.Join(os.TempDir(), fmt.Sprintf("forge-ready-%d.sock", os.Getpid()))
	start := func() *exec.Cmd {
		cmd := exec.Command("podman", "--runtime", "runc", "system", "service", "--time=0", "unix://"+sock)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	stop := func(cmd *exec.Cmd) {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		os.Remove(sock)
	}
	svc := start()
	t.Cleanup(func() { stop(svc) })
	testenv.WaitFor(t, "the test's Podman service", time.Minute, func() bool { _, err := os.Stat(sock); return err == nil })
	s := testenv.StartHTTP(t, "[server]\npodman_socket = \""+sock+"\"\n")
	ready := func() (int, string) { return s.Get(t, "/readyz", "") }
	testenv.WaitFor(t, "ready", time.Minute, func() bool { c, _ := ready(); return c == 200 })
	stop(svc)
	testenv.WaitFor(t, "unready once Podman stopped", time.Minute, func() bool {
		c, body := ready()
		return c == 503 && strings.Contains(body, `"name":"podman","ok":false`)
	})
	_, body := ready()
	t.Logf("unready: %s", body)
	svc = start()
	testenv.WaitFor(t, "ready again once Podman returned", time.Minute, func() bool { c, _ := ready(); return c == 200 })
}

// SIGTERM lets a running call finish, then the server exits 0.
func TestHTTPGracefulShutdown(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice")
	s := testenv.StartHTTP(t, tenants)
	cs := s.MustConnect(t, keys["alice"])
	call(t, cs, "execute_python", map[string]any{"code": "1", "session_id": "g"})
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": "import time; time.sleep(3); 'finished'", "session_id": "g"}})
		done <- result{res, err}
	}()
	testenv.WaitFor(t, "the run to be busy", time.Minute, func() bool {
		b, _ := os.ReadFile(s.AuditLog)
		return strings.Count(string(b), `"event":"execution.request"`) >= 2
	})
	s.Cmd.Process.Signal(os.Interrupt)
	r := <-done
	if r.err != nil || r.res.IsError || !strings.Contains(testenv.Text(r.res), "finished") {
		t.Fatalf("the running call was cut: %v %s", r.err, testenv.Text(r.res))
	}
	err, exited := s.Exited(time.Minute)
	if !exited || err != nil {
		t.Fatalf("exit after SIGTERM: exited=%v err=%v", exited, err)
	}
}

// A non-loopback bind without tenants refuses to start.
func TestHTTPRefusesPublicWithoutAuth(t *testing.T) {
	testenv.Require(t)
	out, err := exec.Command(testenv.Binary(t), "serve", "--http", "0.0.0.0:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refusing to serve 0.0.0.0:0 without authentication") {
		t.Fatalf("started, or unclear: %v\n%s", err, out)
	}
}

// The official TypeScript SDK client over streamable HTTP: the stdio
// client's checks with a key, and 401 without one.
func TestHTTPTypeScriptSDKClient(t *testing.T) {
	nodeClient(t, "ok: tools=", "http-client.mjs")
}

// Answers near and past the 10 MiB the TypeScript SDK accepts, over
// streamable HTTP: files in parts, large outputs cut once
// (test/node/big-answers.mjs, which the stdio test runs too).
func TestHTTPTypeScriptSDKBigAnswers(t *testing.T) {
	nodeClient(t, "ok: largest answer", "big-answers.mjs", "http")
}

// nodeClient runs a script of test/node against a server of one tenant,
// with its key in FORGE_KEY and the server's URL as the last argument, and
// wants ok in its output.
func nodeClient(t *testing.T, ok string, args ...string) {
	testenv.Require(t)
	dir := filepath.Join(testenv.RepoRoot(), "test", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the TypeScript SDK is not installed: run `npm ci` in test/node (make test does)")
	}
	tenants, keys := testenv.TenantKeys(t, "alice")
	s := testenv.StartHTTP(t, tenants)
	cmd := exec.Command("node", append(args, s.URL)...)
	cmd.Env = append(os.Environ(), "FORGE_KEY="+keys["alice"])
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), ok) {
		t.Fatalf("TypeScript client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// A part URI whose number times the part size overflows int64 must be
// refused, not served (part 2^43 aliased part 0) nor crash the server
// (part 2^42 made a negative slice bound: a panic in a handler goroutine
// ends the process, every tenant's connection with it).
func TestHTTPTypeScriptSDKAttackPartOverflow(t *testing.T) {
	t.Setenv("ATK_ONLY", "part-uris-odd,part-uri-overflow-panic,alive")
	nodeClient(t, "done: 3 attacks, 0 failed", "attack-answers.mjs", "http")
}

// A call still running when server.shutdown_timeout passes is cut, and the
// server exits instead of waiting for it.
func TestHTTPShutdownDeadline(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice")
	s := testenv.StartHTTP(t, tenants+"[server]\nshutdown_timeout = 2\n")
	cs := s.MustConnect(t, keys["alice"])
	call(t, cs, "execute_python", map[string]any{"code": "1", "session_id": "g"})
	finished := make(chan bool, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": "import time; time.sleep(60)", "session_id": "g"}})
		finished <- err == nil && !res.IsError
	}()
	testenv.WaitFor(t, "the long run to start", time.Minute, func() bool {
		b, _ := os.ReadFile(s.AuditLog)
		return strings.Count(string(b), `"event":"execution.request"`) >= 2
	})
	start := time.Now()
	s.Cmd.Process.Signal(os.Interrupt)
	err, exited := s.Exited(45 * time.Second)
	if !exited {
		t.Fatalf("server still running %s after SIGTERM with shutdown_timeout = 2", time.Since(start))
	}
	if err != nil {
		t.Errorf("exit: %v", err)
	}
	t.Logf("exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	b, _ := os.ReadFile(s.LogFile)
	if !strings.Contains(string(b), "shutdown deadline passed") {
		t.Errorf("the log does not say calls were cut")
	}
	if <-finished {
		t.Error("the 60 s call finished although the server exited")
	}
}

// slowRequest opens a connection and sends a POST's headers and the start
// of its body (a JSON-RPC request declared whole by Content-Length), then
// nothing: a client stalled mid-body, as a slow link or a slowloris is.
// Raw writes, because net/http's client gives no control over what reaches
// the wire when. rest is what completes the body.
func slowRequest(t *testing.T, addr, path, key string) (conn net.Conn, rest string) {
	t.Helper()
	const sent = `{"jsonrpc":"2.0",`
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	auth := ""
	if key != "" {
		auth = "Authorization: Bearer " + key + "\r\n"
	}
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s", path, addr, auth, len(listTools), sent); err != nil {
		t.Fatal(err)
	}
	return conn, strings.TrimPrefix(listTools, sent)
}

// readResponse reads the response to a raw request, within a bound.
func readResponse(t *testing.T, conn net.Conn, bound time.Duration) (*http.Response, string, *bufio.Reader) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(bound))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no response within %s: %v", bound, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), br
}

// inFlight is a tenant's requests holding a quotas.max_requests_in_flight
// slot, from the server's own gauge.
func inFlight(t *testing.T, s *testenv.HTTPServer, key, name string) float64 {
	t.Helper()
	_, scrape := s.Get(t, "/metrics", key)
	return metric(t, scrape, `mcp_forge_http_requests_in_flight{tenant="`+name+`"}`)
}

// A tenant's requests in flight are bounded: four requests from mallory
// whose bodies stall hold her four slots, so her fifth gets 429 naming the
// quota (audited with it), while alice is served; the slots come back when
// the bodies end, whether finished or abandoned.
func TestHTTPSlowClientsBounded(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice", "mallory")
	// A body deadline far beyond the test, so it is the quota that acts.
	s := testenv.StartHTTP(t, tenants+"[server]\nrequest_body_timeout = 600\n[quotas]\nmax_concurrent_runs = 2\nmax_requests_in_flight = 4\n")
	var conns []net.Conn
	var rest string
	for i := 0; i < 4; i++ {
		c, r := slowRequest(t, s.Addr, "/mcp", keys["mallory"])
		conns, rest = append(conns, c), r
	}
	// The fifth request goes only once the server holds all four: sent
	// earlier, it could take a slot before a stalled one arrived.
	testenv.WaitFor(t, "mallory's four stalled requests to hold her slots", time.Minute, func() bool {
		return inFlight(t, s, keys["alice"], "mallory") == 4
	})
	code, hdr, body := post(t, s.URL, keys["mallory"], "application/json", []byte(listTools))
	if code != http.StatusTooManyRequests || !strings.Contains(body, "quotas.max_requests_in_flight") || hdr.Get("Retry-After") == "" {
		t.Errorf("mallory's fifth request: %d %.200q Retry-After %q, want 429 naming quotas.max_requests_in_flight with Retry-After", code, body, hdr.Get("Retry-After"))
	}
	if code, _, body := post(t, s.URL, keys["alice"], "application/json", []byte(listTools)); code != http.StatusOK {
		t.Errorf("alice while mallory holds her requests: %d %s", code, body)
	}
	// Two clients finish their bodies (they were held, not refused: they
	// are served now), two give up.
	for _, c := range conns[:2] {
		if _, err := io.WriteString(c, rest); err != nil {
			t.Fatal(err)
		}
		if resp, body, _ := readResponse(t, c, time.Minute); resp.StatusCode != http.StatusOK || !strings.Contains(body, "execute_python") {
			t.Errorf("a stalled request whose body then ended: %d %.200q", resp.StatusCode, body)
		}
	}
	for _, c := range conns[2:] {
		c.Close()
	}
	testenv.WaitFor(t, "mallory's slots to come back", time.Minute, func() bool {
		return inFlight(t, s, keys["alice"], "mallory") == 0
	})
	if code, _, body := post(t, s.URL, keys["mallory"], "application/json", []byte(listTools)); code != http.StatusOK {
		t.Errorf("mallory after her slow requests ended: %d %s", code, body)
	}
	b, _ := os.ReadFile(s.AuditLog)
	if !strings.Contains(string(b), `"rule":"quotas.max_requests_in_flight"`) {
		t.Error("the 429 is not audited with its rule")
	}
}

// A client that never finishes its body does not hold its slot forever:
// at server.request_body_timeout it gets 400 naming the setting (audited
// with that rule and the tenant) and the slot comes back. A stalled body
// that no handler reads (a 401, /healthz) is cut the same way.
func TestHTTPStalledBodyCut(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice", "mallory")
	s := testenv.StartHTTP(t, tenants+"[server]\nrequest_body_timeout = 2\n")
	c, _ := slowRequest(t, s.Addr, "/mcp", keys["mallory"])
	testenv.WaitFor(t, "mallory's stalled request to hold a slot", time.Minute, func() bool {
		return inFlight(t, s, keys["alice"], "mallory") == 1
	})
	resp, body, br := readResponse(t, c, time.Minute)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "server.request_body_timeout") {
		t.Errorf("stalled body: %d %.200q, want 400 naming server.request_body_timeout", resp.StatusCode, body)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("the connection stays open after the timeout (read: %v)", err)
	}
	testenv.WaitFor(t, "mallory's slot to come back", time.Minute, func() bool {
		return inFlight(t, s, keys["alice"], "mallory") == 0
	})
	testenv.WaitFor(t, "the timeout in the audit log", time.Minute, func() bool {
		b, _ := os.ReadFile(s.AuditLog)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, `"rule":"server.request_body_timeout"`) && strings.Contains(line, `"user_id":"mallory"`) {
				return true
			}
		}
		return false
	})

	// Handlers that never read the body: net/http drains it before
	// answering, within the same deadline.
	for _, c := range []struct{ path, key string }{{"/mcp", ""}, {"/healthz", ""}} {
		conn, _ := slowRequest(t, s.Addr, c.path, c.key)
		resp, _, br := readResponse(t, conn, time.Minute)
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("%s without a token, body stalled: %d, and the connection stays open (read: %v)", c.path, resp.StatusCode, err)
		}
	}
}
