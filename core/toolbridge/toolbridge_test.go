package toolbridge

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit/audittest"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
)

// fakeBridge serves a few tools of server "mem" for logic tests.
type fakeBridge struct {
	mu      sync.Mutex
	calls   []string
	gen     map[string][]byte            // extra generated files
	answers map[string]bridge.CallResult // by tool: what the tool answers
}

func (f *fakeBridge) ListTools(context.Context) ([]bridge.Tool, error) {
	var out []bridge.Tool
	for _, n := range []string{"echo", "hang", "img", "fail", "leak", "delete_all", "ask"} {
		out = append(out, bridge.Tool{Server: "mem", Name: n, InputSchema: json.RawMessage(`{"type":"object"}`)})
	}
	out = append(out, bridge.Tool{Server: "unconfigured", Name: "x"})
	return out, nil
}

func (f *fakeBridge) CallTool(ctx context.Context, req bridge.CallRequest) (bridge.CallResult, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req.Tool)
	a, ok := f.answers[req.Tool]
	f.mu.Unlock()
	if ok {
		return a, nil
	}
	switch req.Tool {
	case "echo", "ask":
		return bridge.CallResult{Structured: req.Arguments}, nil
	case "hang":
		<-ctx.Done()
		return bridge.CallResult{}, ctx.Err()
	case "img":
		return bridge.CallResult{Text: "see image", Images: []backend.Image{{Name: "a", MIMEType: "image/png", Data: []byte("\x89PNG fake")}}}, nil
	case "fail":
		return bridge.CallResult{IsError: true, Message: "no such entity"}, nil
	case "leak":
		return bridge.CallResult{Text: "token is sekrit-value-123"}, nil
	}
	return bridge.CallResult{}, fmt.Errorf("unexpected tool %s", req.Tool)
}

func (f *fakeBridge) Generate(_ context.Context, req bridge.GenerateRequest) (map[string][]byte, error) {
	out := map[string][]byte{
		"python/forge_tools/__init__.py": []byte("# " + strings.Join(req.Tools, " ") + "\n"),
		"bin/call":                       []byte("#!/bin/sh\n"),
	}
	for k, v := range f.gen {
		out[k] = v
	}
	return out, nil
}

func (f *fakeBridge) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func testService(t *testing.T, fb *fakeBridge, mut func(*config.Config)) (*Service, *audittest.Recorder) {
	t.Helper()
	cfg := config.Default()
	cfg.MCPTools = map[string]config.MCPTool{"mem": {Command: "x", Deny: []string{"delete_*"}, Approve: []string{"ask"},
		Env: map[string]string{"TOKEN": "sekrit-value-123"}}}
	cfg.Bridge = config.Bridge{CallTimeout: 1, MaxCallsPerRun: 100, MaxConcurrentCalls: 8}
	if mut != nil {
		mut(&cfg)
	}
	rec := &audittest.Recorder{}
	// Short root: unix socket paths are limited to 107 bytes.
	root, err := os.MkdirTemp("", "tb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	s, err := New(cfg, "fakebridge", func(context.Context) (bridge.Bridge, error) { return fb, nil }, filepath.Join(root, "tools"), rec, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, rec
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name string
		srv  config.MCPTool
		tool string
		want Decision
	}{
		{"default allow", config.MCPTool{}, "x", Allow},
		{"deny glob", config.MCPTool{Deny: []string{"del*"}}, "delete", Deny},
		{"deny beats approve", config.MCPTool{Deny: []string{"x"}, Approve: []string{"*"}}, "x", Deny},
		{"approve beats allow", config.MCPTool{Allow: []string{"*"}, Approve: []string{"w*"}}, "write", Approve},
		{"allow list makes the rest deny", config.MCPTool{Allow: []string{"read"}}, "write", Deny},
		{"allow list hit", config.MCPTool{Allow: []string{"read"}}, "read", Allow},
		{"explicit default", config.MCPTool{Allow: []string{"read"}, Default: "approve"}, "write", Approve},
		{"default deny", config.MCPTool{Default: "deny"}, "x", Deny},
		{"deny by the server's own name", config.MCPTool{Deny: []string{"get-*"}}, "get_env/get-env", Deny},
		{"approve by the server's own name", config.MCPTool{Approve: []string{"write-file"}}, "write_file/write-file", Approve},
		{"allow list by the server's own name", config.MCPTool{Allow: []string{"read-file"}}, "read_file/read-file", Allow},
		{"unmapped name is not matched twice", config.MCPTool{Deny: []string{"get-*"}}, "get_env", Allow},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Decide(c.srv, strings.Split(c.tool, "/")...); got != c.want {
				t.Fatalf("Decide = %s, want %s", got, c.want)
			}
		})
	}
}

// mappedBridge lists a tool the bridge renamed (the server calls it
// "get-env", sandbox code get_env).
type mappedBridge struct{ fakeBridge }

func (m *mappedBridge) ListTools(ctx context.Context) ([]bridge.Tool, error) {
	out, err := m.fakeBridge.ListTools(ctx)
	return append(out, bridge.Tool{Server: "mem", Name: "get_env", OriginalName: "get-env", InputSchema: json.RawMessage(`{"type":"object"}`)}), err
}

// Regression: a deny glob written with the server's own tool name (as its
// documentation spells it) was matched only against the mapped name, so
// deny = ["get-env"] let everything.get_env through (found end to end with
// server-everything).
func TestPolicyMatchesTheServersOwnName(t *testing.T) {
	s, _ := testService(t, &fakeBridge{}, func(c *config.Config) {
		m := c.MCPTools["mem"]
		m.Deny = append(m.Deny, "get-env")
		c.MCPTools["mem"] = m
	})
	s.get = func(context.Context) (bridge.Bridge, error) { return &mappedBridge{}, nil }
	ctx := context.Background()
	var e *Error
	if _, err := s.Resolve(ctx, []string{"mem.get_env"}); !errors.As(err, &e) || e.Rule != RuleDenied {
		t.Fatalf("Resolve(mem.get_env) = %v, want a refusal by %s", err, RuleDenied)
	}
	got, err := s.Resolve(ctx, []string{"mem"})
	if err != nil || slices.Contains(got, "mem.get_env") {
		t.Fatalf("Resolve(mem) = %v, %v: grants the denied tool", got, err)
	}
	if d := s.Decide("mem", "get_env"); d != Deny {
		t.Fatalf("Decide(mem, get_env) at call time = %s", d)
	}
	for _, tl := range s.Available(ctx).Tools {
		if tl.ID == "mem.get_env" && (tl.Policy != Deny || tl.OriginalName != "get-env") {
			t.Fatalf("tools/available shows %s (%q) as %s", tl.ID, tl.OriginalName, tl.Policy)
		}
	}
}

// With the bridge plugin loaded (bin/ ships mcpbridge) and no server in
// the config, the refusal says what to configure.
func TestResolveWithoutServers(t *testing.T) {
	s, _ := testService(t, &fakeBridge{}, func(c *config.Config) { c.MCPTools = nil })
	var e *Error
	_, err := s.Resolve(context.Background(), []string{"memory"})
	if !errors.As(err, &e) || e.Rule != RuleUnknown || !strings.Contains(e.Msg, `mcp_tools "memory": no such MCP server is configured (configured: none)`) || !strings.Contains(e.Msg, "[mcp_tools.NAME] in forge.toml") {
		t.Fatalf("Resolve = %v", err)
	}
}

func TestResolve(t *testing.T) {
	s, _ := testService(t, &fakeBridge{}, nil)
	ctx := context.Background()
	for _, c := range []struct {
		names []string
		rule  string
		want  string
	}{
		{[]string{"nope"}, RuleUnknown, "no such MCP server is configured (configured: mem)"},
		{[]string{"unconfigured.x"}, RuleUnknown, "no such MCP server"},
		{[]string{"mem.missing"}, RuleUnknown, `server mem has no tool "missing"`},
		{[]string{"mem.delete_all"}, RuleDenied, `denied by policy: mcp_tools.mem.deny ("delete_*" matches it)`},
		{[]string{"mem.echo"}, "", "mem.echo"},
		{[]string{"mem"}, "", "mem.ask mem.echo mem.fail mem.hang mem.img mem.leak"},
	} {
		got, err := s.Resolve(ctx, c.names)
		var e *Error
		switch {
		case c.rule != "" && (!errors.As(err, &e) || e.Rule != c.rule || !strings.Contains(e.Msg, c.want)):
			t.Errorf("Resolve(%v) = %v, want rule %s with %q", c.names, err, c.rule, c.want)
		case c.rule == "" && (err != nil || strings.Join(got, " ") != c.want):
			t.Errorf("Resolve(%v) = %v, %v; want %s", c.names, got, err, c.want)
		}
	}
}

// client speaks the wire protocol to a grant's socket.
type client struct {
	t    *testing.T
	c    net.Conn
	r    *bufio.Reader
	wmu  sync.Mutex
	next int64
}

func dial(t *testing.T, g *Grant) *client {
	t.Helper()
	c, err := net.Dial("unix", filepath.Join(g.Dir(), bridge.SocketName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

func (c *client) send(tool string, args any) int64 {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.next++
	b, _ := json.Marshal(map[string]any{"id": c.next, "tool": tool, "arguments": args})
	if _, err := c.c.Write(append(b, '\n')); err != nil {
		c.t.Fatal(err)
	}
	return c.next
}

type response struct {
	ID     int64             `json:"id"`
	Result json.RawMessage   `json:"result"`
	Images []string          `json:"images"`
	Error  *bridge.WireError `json:"error"`
}

func (c *client) read() response {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	var r response
	if err := json.Unmarshal(line, &r); err != nil {
		c.t.Fatalf("bad response %q: %v", line, err)
	}
	return r
}

func (c *client) call(tool string, args any) response {
	c.t.Helper()
	id := c.send(tool, args)
	r := c.read()
	if r.ID != id {
		c.t.Fatalf("response id %d, want %d", r.ID, id)
	}
	return r
}

func issue(t *testing.T, s *Service, tools ...string) *Grant {
	t.Helper()
	g, err := s.Issue(context.Background(), IssueRequest{Plugin: "python", Client: "c1", RunID: "r1", Language: "python", Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestCalls(t *testing.T) {
	fb := &fakeBridge{}
	s, rec := testService(t, fb, nil)
	g := issue(t, s, "mem.echo", "mem.hang", "mem.img", "mem.fail", "mem.leak", "mem.delete_all")
	out := t.TempDir()
	g.Attach(out, "/forge/out")
	c := dial(t, g)

	t.Run("structured result", func(t *testing.T) {
		r := c.call("mem.echo", map[string]any{"n": 12345678901234567})
		if r.Error != nil || string(r.Result) != `{"n":12345678901234567}` {
			t.Fatalf("got %+v %s", r.Error, r.Result)
		}
	})
	t.Run("not granted", func(t *testing.T) {
		r := c.call("mem.ask", nil)
		if r.Error == nil || r.Error.Kind != bridge.WireErrorDenied || !strings.Contains(r.Error.Message, "was not granted") {
			t.Fatalf("got %+v", r.Error)
		}
	})
	t.Run("policy deny at call time", func(t *testing.T) {
		r := c.call("mem.delete_all", nil)
		if r.Error == nil || r.Error.Kind != bridge.WireErrorDenied || !strings.Contains(r.Error.Message, "denied by policy: mcp_tools.mem.deny") {
			t.Fatalf("got %+v", r.Error)
		}
	})
	t.Run("tool error", func(t *testing.T) {
		r := c.call("mem.fail", nil)
		if r.Error == nil || r.Error.Kind != bridge.WireErrorTool || r.Error.Message != "no such entity" {
			t.Fatalf("got %+v", r.Error)
		}
	})
	t.Run("secret scrubbed", func(t *testing.T) {
		r := c.call("mem.leak", nil)
		if strings.Contains(string(r.Result), "sekrit") {
			t.Fatalf("secret reached the sandbox: %s", r.Result)
		}
	})
	t.Run("image saved", func(t *testing.T) {
		r := c.call("mem.img", nil)
		if r.Error != nil || len(r.Images) != 1 || !strings.HasPrefix(r.Images[0], "/forge/out/tool-") {
			t.Fatalf("got %+v %v", r.Error, r.Images)
		}
		data, err := os.ReadFile(filepath.Join(out, strings.TrimPrefix(r.Images[0], "/forge/out/")))
		if err != nil || string(data) != "\x89PNG fake" {
			t.Fatalf("image file: %q %v", data, err)
		}
	})
	t.Run("timeout, with a call answered meanwhile", func(t *testing.T) {
		hang := c.send("mem.hang", nil)
		echo := c.send("mem.echo", map[string]any{"x": 1})
		first, second := c.read(), c.read()
		if first.ID != echo || first.Error != nil {
			t.Fatalf("the quick call should answer first: %+v", first)
		}
		if second.ID != hang || second.Error == nil || second.Error.Kind != bridge.WireErrorTimeout {
			t.Fatalf("want a timeout for the hanging call: %+v", second)
		}
	})
	t.Run("arguments not an object", func(t *testing.T) {
		r := c.call("mem.echo", []int{1})
		if r.Error == nil || r.Error.Kind != bridge.WireErrorInvalid {
			t.Fatalf("got %+v", r.Error)
		}
	})
	for _, e := range rec.Entries() {
		b, _ := json.Marshal(e)
		if strings.Contains(string(b), "12345678901234567") || strings.Contains(string(b), "sekrit") || strings.Contains(string(b), "no such entity") {
			t.Fatalf("the audit log holds arguments or results: %s", b)
		}
	}
	var calls int
	for _, e := range rec.Entries() {
		if e.Event == EventCall {
			calls++
			if e.Details["server"] == nil || e.Details["outcome"] == nil || e.Details["duration_ms"] == nil {
				t.Fatalf("incomplete audit entry %+v", e)
			}
			if e.Details["outcome"] != "ok" && e.Details["outcome"] != bridge.WireErrorTool && e.Details["outcome"] != bridge.WireErrorTimeout && e.Details["rule"] == nil {
				t.Fatalf("refusal audited without a rule: %+v", e)
			}
		}
	}
	if calls < 9 {
		t.Fatalf("%d calls audited, want every one", calls)
	}
}

// A denied tool called in a run is never granted (Resolve leaves it out),
// so the answer must say the policy denies it, by which key, and what the
// user can do: not "name it in mcp_tools", which would be refused too.
func TestDeniedToolMessage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy config.MCPTool
		tool   string
		rule   string
		want   []string
	}{
		{"deny glob", config.MCPTool{Deny: []string{"delete_*"}}, "mem.delete_all", RuleDenied,
			[]string{`denied by policy: mcp_tools.mem.deny ("delete_*" matches it)`, "naming it in mcp_tools is refused too", "granted (mem.echo)", "ask the operator to change mcp_tools.mem in forge.toml"}},
		{"allow list", config.MCPTool{Allow: []string{"echo"}}, "mem.fail", RuleDenied,
			[]string{"denied by policy: mcp_tools.mem.allow (the server has an allow list and no glob of it names the tool", "mcp://forge/tools/available"}},
		{"default deny", config.MCPTool{Default: "deny", Allow: []string{"echo"}}, "mem.leak", RuleDenied,
			[]string{`denied by policy: mcp_tools.mem.default ("deny"`}},
		{"allowed but not granted", config.MCPTool{}, "mem.fail", RuleNotGranted,
			[]string{"was not granted to this run (granted: mem.echo); name it in mcp_tools of the execute call"}},
		{"no such server", config.MCPTool{}, "other.x", RuleNotGranted,
			[]string{`no MCP server "other" is configured (configured: mem`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, rec := testService(t, &fakeBridge{}, func(c *config.Config) {
				tc.policy.Command = "x"
				c.MCPTools = map[string]config.MCPTool{"mem": tc.policy}
			})
			if _, err := s.Tools(context.Background()); err != nil {
				t.Fatal(err)
			}
			g := issue(t, s, "mem.echo")
			r := dial(t, g).call(tc.tool, nil)
			if r.Error == nil || r.Error.Kind != bridge.WireErrorDenied {
				t.Fatalf("got %+v", r.Error)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Error.Message, w) {
					t.Errorf("message %q lacks %q", r.Error.Message, w)
				}
			}
			if tc.rule == RuleDenied && strings.Contains(r.Error.Message, "name it in mcp_tools") {
				t.Errorf("a denied tool is sent to mcp_tools: %q", r.Error.Message)
			}
			var rules []any
			for _, e := range rec.Entries() {
				if e.Event == EventCall {
					rules = append(rules, e.Details["rule"])
				}
			}
			if len(rules) != 1 || rules[0] != tc.rule {
				t.Errorf("audited rules %v, want [%s]", rules, tc.rule)
			}
		})
	}
}

// Issue 20 item 6: a secret of a bridged server's env is scrubbed from
// what the bridge returns in whatever encoding the server printed it:
// JSON with non-ASCII escaped, URL encoding, base64 inside a longer string,
// hex, a number in structured content. The core must not rely on the
// bridge plugin having redacted it.
func TestScrubEncodedSecrets(t *testing.T) {
	const secret = `Tök/en+ "ä" 42-sekrit`
	ascii := `T\u00f6k\/en+ \"\u00e4\" 42-sekrit`
	for _, tc := range []struct {
		name, enc string
	}{
		{"raw", secret},
		{"JSON ASCII", ascii},
		{"JSON upper-case", strings.ReplaceAll(strings.ReplaceAll(ascii, "00f6", "00F6"), "00e4", "00E4")},
		{"URL", url.QueryEscape(secret)},
		{"URL %20", url.PathEscape(secret)},
		{"base64 at 1", base64.StdEncoding.EncodeToString([]byte("x" + secret + "yz"))},
		{"base64 URL at 2", base64.RawURLEncoding.EncodeToString([]byte("xy" + secret))},
		{"hex", hex.EncodeToString([]byte(secret))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quoted, _ := json.Marshal(tc.enc)
			fb := &fakeBridge{answers: map[string]bridge.CallResult{
				"echo": {Text: "env: " + tc.enc},
				"ask":  {Structured: json.RawMessage(`{"env": ` + string(quoted) + `, "n": 1}`)},
				"fail": {IsError: true, Message: "cannot use " + tc.enc},
			}}
			s, rec := testService(t, fb, func(c *config.Config) {
				m := c.MCPTools["mem"]
				m.Approve = nil
				m.Env = map[string]string{"TOKEN": secret}
				c.MCPTools["mem"] = m
			})
			c := dial(t, issue(t, s, "mem.echo", "mem.ask", "mem.fail"))
			for _, tool := range []string{"mem.echo", "mem.ask", "mem.fail"} {
				r := c.call(tool, nil)
				b, _ := json.Marshal(r)
				if strings.Contains(string(b), tc.enc) || strings.Contains(string(b), "sekrit") || !strings.Contains(string(b), "[redacted]") {
					t.Errorf("%s: the secret reached the sandbox: %s", tool, b)
				}
				if tool == "mem.ask" && (r.Error != nil || !json.Valid(r.Result)) {
					t.Errorf("structured result no longer JSON: %s", b)
				}
			}
			for _, e := range rec.Entries() {
				if b, _ := json.Marshal(e); strings.Contains(string(b), "sekrit") || strings.Contains(string(b), tc.enc) {
					t.Errorf("audit holds the secret: %s", b)
				}
			}
		})
	}
}

func TestBudget(t *testing.T) {
	s, _ := testService(t, &fakeBridge{}, func(c *config.Config) { c.Bridge.MaxCallsPerRun = 3 })
	g := issue(t, s, "mem.echo")
	c := dial(t, g)
	for i := 0; i < 3; i++ {
		if r := c.call("mem.echo", nil); r.Error != nil {
			t.Fatalf("call %d: %+v", i, r.Error)
		}
	}
	r := c.call("mem.echo", nil)
	if r.Error == nil || r.Error.Kind != bridge.WireErrorBudget {
		t.Fatalf("4th call: %+v", r.Error)
	}
	g.BeginRun("r2", "c1", nil) // a session's next execute
	if r := c.call("mem.echo", nil); r.Error != nil {
		t.Fatalf("after a new run: %+v", r.Error)
	}
}

func TestServerBudget(t *testing.T) {
	s, _ := testService(t, &fakeBridge{}, func(c *config.Config) {
		m := c.MCPTools["mem"]
		m.MaxCallsPerRun = 2
		c.MCPTools["mem"] = m
	})
	g := issue(t, s, "mem.echo")
	c := dial(t, g)
	for i := 0; i < 2; i++ {
		if r := c.call("mem.echo", nil); r.Error != nil {
			t.Fatalf("call %d: %+v", i, r.Error)
		}
	}
	if r := c.call("mem.echo", nil); r.Error == nil || r.Error.Kind != bridge.WireErrorBudget || !strings.Contains(r.Error.Message, "mcp_tools.mem.max_calls_per_run") {
		t.Fatalf("3rd call: %+v", r.Error)
	}
}

func TestApproval(t *testing.T) {
	fb := &fakeBridge{}
	s, _ := testService(t, fb, nil)
	g := issue(t, s, "mem.ask")
	c := dial(t, g)
	var asked string
	for _, tc := range []struct {
		name     string
		approver Approver
		want     string // "" for success
	}{
		{"no client", nil, "no MCP client"},
		{"unsupported", func(context.Context, string) (bool, bool, error) { return false, false, nil }, "client cannot be asked"},
		{"declined", func(context.Context, string) (bool, bool, error) { return false, true, nil }, "declined"},
		{"approved", func(_ context.Context, m string) (bool, bool, error) { asked = m; return true, true, nil }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g.BeginRun("r", "c1", tc.approver)
			r := c.call("mem.ask", map[string]any{"q": "what"})
			if tc.want == "" {
				if r.Error != nil {
					t.Fatalf("got %+v", r.Error)
				}
				return
			}
			if r.Error == nil || r.Error.Kind != bridge.WireErrorDenied || !strings.Contains(r.Error.Message, tc.want) {
				t.Fatalf("got %+v, want denied with %q", r.Error, tc.want)
			}
		})
	}
	if !strings.Contains(asked, "mem.ask") || !strings.Contains(asked, `"q": "what"`) {
		t.Fatalf("the approval question should show the tool and its arguments: %q", asked)
	}
	if n := len(fb.called()); n != 1 {
		t.Fatalf("the tool was called %d times, want once (only when approved)", n)
	}
}

func TestBadLines(t *testing.T) {
	s, _ := testService(t, &fakeBridge{}, nil)
	g := issue(t, s, "mem.echo")
	for _, tc := range []struct {
		name string
		line []byte
	}{
		{"not json", []byte("hello\n")},
		{"too long", append([]byte(`{"id":1,"tool":"mem.echo","arguments":{"a":"`), append([]byte(strings.Repeat("x", bridge.MaxWireMessage)), []byte("\"}}\n")...)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, g)
			go c.c.Write(tc.line)
			r := c.read()
			if r.ID != 0 || r.Error == nil || r.Error.Kind != bridge.WireErrorInvalid {
				t.Fatalf("got %+v", r)
			}
			c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.r.ReadByte(); err == nil {
				t.Fatal("the connection should be closed after a bad line")
			}
		})
	}
}

func TestGrantLifecycle(t *testing.T) {
	fb := &fakeBridge{}
	s, _ := testService(t, fb, nil)
	g := issue(t, s, "mem.echo")
	dir := g.Dir()
	st, err := os.Stat(filepath.Join(dir, "bin/call"))
	if err != nil || st.Mode().Perm()&0o111 == 0 {
		t.Fatalf("bin/call should be executable: %v %v", st, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "python/forge_tools/__init__.py")); !strings.Contains(string(b), "mem.echo") || strings.Contains(string(b), "mem.img") {
		t.Fatalf("generated for the wrong tools: %s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "r/profile.R")); err != nil {
		t.Fatalf("r/profile.R: %v", err)
	}
	if _, err := s.Grant("r", g.Token()); err == nil {
		t.Fatal("a grant must resolve only for the plugin it was issued to")
	}
	if _, err := s.Grant("python", g.Token()); err != nil {
		t.Fatal(err)
	}
	// A session extends its grant: the code is regenerated for both.
	if err := g.Extend(context.Background(), []string{"mem.img"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "python/forge_tools/__init__.py")); !strings.Contains(string(b), "mem.echo mem.img") {
		t.Fatalf("not regenerated: %s", b)
	}
	c := dial(t, g)
	if r := c.call("mem.img", nil); r.Error != nil {
		t.Fatalf("extended tool: %+v", r.Error)
	}
	hang := c.send("mem.hang", nil) // not granted: answered at once
	_ = hang
	c.read()
	g.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("grant directory left behind: %v", err)
	}
	if _, err := s.Grant("python", g.Token()); err == nil {
		t.Fatal("a closed grant must not resolve")
	}
	if s.Live() != 0 {
		t.Fatalf("%d grants live after close", s.Live())
	}
	g.Close() // twice is harmless
}

func TestGeneratedNames(t *testing.T) {
	for _, bad := range []string{"../escape", "/abs", "bridge.sock", "a/../../b", "python/.hidden"} {
		t.Run(bad, func(t *testing.T) {
			s, _ := testService(t, &fakeBridge{gen: map[string][]byte{bad: []byte("x")}}, nil)
			_, err := s.Issue(context.Background(), IssueRequest{Plugin: "python", Language: "python", Tools: []string{"mem.echo"}})
			if err == nil || !strings.Contains(err.Error(), "names must be clean relative paths") {
				t.Fatalf("got %v", err)
			}
			if s.Live() != 0 {
				t.Fatal("a failed grant must not stay")
			}
		})
	}
}

func TestCloseCancelsCalls(t *testing.T) {
	s, _ := testService(t, &fakeBridge{}, func(c *config.Config) { c.Bridge.CallTimeout = 60 })
	g := issue(t, s, "mem.hang")
	c := dial(t, g)
	c.send("mem.hang", nil)
	// Wait until the call is in the bridge, then end the run.
	deadline := time.Now().Add(5 * time.Second)
	for len(g.sem) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { g.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a hanging call")
	}
}

// Grant directories a dead server left are removed at start; a live
// grant (its socket answers) and a fresh directory stay.
func TestSweep(t *testing.T) {
	s, _ := testService(t, &fakeBridge{}, nil)
	live := issue(t, s, "mem.echo")
	dead := filepath.Join(s.root, "deadbeef")
	fresh := filepath.Join(s.root, "fresh")
	for _, d := range []string{dead, fresh} {
		if err := os.MkdirAll(filepath.Join(d, "python"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(dead, old, old)
	os.Chtimes(live.Dir(), old, old)
	if n := s.sweep(time.Minute); n != 1 {
		t.Fatalf("swept %d, want 1", n)
	}
	for d, want := range map[string]bool{dead: false, fresh: true, live.Dir(): true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", d, err == nil, want)
		}
	}
}

// A sandbox cannot open connections without bound: past MaxConns a new
// one is told why and closed; the open ones keep working.
func TestMaxConns(t *testing.T) {
	s, _ := testService(t, &fakeBridge{}, nil)
	g := issue(t, s, "mem.echo")
	var cs []*client
	for i := 0; i < MaxConns; i++ {
		c := dial(t, g)
		if r := c.call("mem.echo", nil); r.Error != nil { // served: counted
			t.Fatal(r.Error)
		}
		cs = append(cs, c)
	}
	extra := dial(t, g)
	r := extra.read()
	if r.Error == nil || !strings.Contains(r.Error.Message, "too many connections") {
		t.Fatalf("got %+v", r)
	}
	if r := cs[0].call("mem.echo", nil); r.Error != nil {
		t.Fatal(r.Error)
	}
}

func TestResolveServerWithoutTools(t *testing.T) {
	s, _ := testService(t, &fakeBridge{}, func(c *config.Config) {
		c.MCPTools["empty"] = config.MCPTool{Command: "x"}
	})
	if _, err := s.Resolve(context.Background(), []string{"empty"}); err == nil || !strings.Contains(err.Error(), "lists no tools") {
		t.Fatalf("got %v", err)
	}
	locked, _ := testService(t, &fakeBridge{}, func(c *config.Config) { c.MCPTools["mem"] = config.MCPTool{Command: "x", Deny: []string{"*"}} })
	var e *Error
	if _, err := locked.Resolve(context.Background(), []string{"mem"}); !errors.As(err, &e) || e.Rule != RuleDenied || !strings.Contains(e.Msg, "denies every tool") {
		t.Fatalf("got %v", err)
	}
}
