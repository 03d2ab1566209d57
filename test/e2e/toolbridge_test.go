package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

const bridgeSecret = "s3cr3t-e2e-value-42"

// startBridgeServer starts mcp-forge with the test bridge plugin
// (testdata/toolbridgeplugin) serving server "fake".
func startBridgeServer(t *testing.T, budget int) *testenv.Server {
	t.Helper()
	testenv.Require(t)
	bin := filepath.Join(t.TempDir(), "toolbridge-plugin")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/toolbridgeplugin").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	sum, err := plugins.Checksum(bin)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.StartServer(t, `
[mcp_tools.fake]
command = "unused-by-the-test-bridge"
env = { FAKE_TOKEN = "`+bridgeSecret+`" }
deny = ["forbidden"]

[bridge]
plugin = "toolbridge"    # bin/ also holds the real mcpbridge plugin
call_timeout = 2
max_calls_per_run = `+strconv.Itoa(budget)+`

[plugins.toolbridge]
path = "`+bin+`"
sha256 = "`+sum+`"
`)
}

// Sandbox code calls granted tools over the grant's socket, under the
// policy, budget and timeout; images land in the run's output directory;
// a session's grant grows with later calls; nothing is left afterwards.
func TestToolBridge(t *testing.T) {
	s := startBridgeServer(t, 5)
	run := func(t *testing.T, args map[string]any) (out, string) {
		t.Helper()
		var o out
		res := s.Call(t, "execute_python", args, &o)
		return o, testenv.Text(res)
	}

	t.Run("granted tool", func(t *testing.T) {
		o, text := run(t, map[string]any{"code": "import forge_tools.fake as f\nprint(f.add(a=2, b=3)['sum'])", "mcp_tools": []string{"fake.add"}})
		if !o.Success || strings.TrimSpace(o.Stdout) != "5" {
			t.Fatalf("%+v\n%s", o, text)
		}
	})
	t.Run("tool not granted", func(t *testing.T) {
		o, text := run(t, map[string]any{"mcp_tools": []string{"fake.add"}, "code": `import forge_tools
try:
    forge_tools.call("fake.image")
except forge_tools.ToolError as e:
    print(e.kind, "|", e)`})
		if !o.Success || !strings.HasPrefix(o.Stdout, "denied |") || !strings.Contains(o.Stdout, "was not granted") {
			t.Fatalf("%+v\n%s", o, text)
		}
	})
	t.Run("denied tool called in the run", func(t *testing.T) {
		// Issue 20 item 16: a denied tool is never granted, so its message
		// must name the policy key and what to do, not send the user to
		// mcp_tools (which refuses it: mcp-tools-denied).
		o, text := run(t, map[string]any{"mcp_tools": []string{"fake.add"}, "code": `import forge_tools
try:
    forge_tools.call("fake.forbidden")
except forge_tools.ToolError as e:
    print(e.kind, "|", e)`})
		want := `denied by policy: mcp_tools.fake.deny ("forbidden" matches it)`
		if !o.Success || !strings.HasPrefix(o.Stdout, "denied |") || !strings.Contains(o.Stdout, want) ||
			!strings.Contains(o.Stdout, "ask the operator to change mcp_tools.fake in forge.toml") || strings.Contains(o.Stdout, "name it in mcp_tools") {
			t.Fatalf("want %q and what to do:\n%+v\n%s", want, o, text)
		}
		found := false
		for _, e := range auditEntries(t, s.AuditLog) {
			found = found || e.Event == "bridge.call" && e.Details["tool"] == "forbidden" && e.Details["rule"] == "mcp-tools-denied"
		}
		if !found {
			t.Error("no bridge.call entry with rule mcp-tools-denied for fake.forbidden")
		}
	})
	t.Run("denied by policy", func(t *testing.T) {
		o, text := run(t, map[string]any{"code": "1", "mcp_tools": []string{"fake.forbidden"}})
		if o.Error == nil || o.Error.Type != "RequestError" || !strings.Contains(o.Error.Message, "denied by policy: mcp_tools.fake.deny") {
			t.Fatalf("%+v\n%s", o, text)
		}
	})
	t.Run("unknown server", func(t *testing.T) {
		o, text := run(t, map[string]any{"code": "1", "mcp_tools": []string{"nosuch"}})
		if o.Error == nil || !strings.Contains(o.Error.Message, "no such MCP server is configured (configured: fake)") {
			t.Fatalf("%+v\n%s", o, text)
		}
	})
	t.Run("budget", func(t *testing.T) {
		o, text := run(t, map[string]any{"mcp_tools": []string{"fake"}, "code": `import forge_tools.fake as f
n = 0
try:
    for i in range(10):
        f.add(a=i, b=1)
        n += 1
except Exception as e:
    print(n, e.kind)`})
		if !o.Success || strings.TrimSpace(o.Stdout) != "5 budget" {
			t.Fatalf("%+v\n%s", o, text)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		o, text := run(t, map[string]any{"mcp_tools": []string{"fake.hang"}, "code": `import time, forge_tools.fake as f
t = time.time()
try:
    f.hang()
except Exception as e:
    print(e.kind, round(time.time() - t))`})
		if !o.Success || strings.TrimSpace(o.Stdout) != "timeout 2" {
			t.Fatalf("%+v\n%s", o, text)
		}
	})
	t.Run("image and secret", func(t *testing.T) {
		o, text := run(t, map[string]any{"mcp_tools": []string{"fake.image", "fake.config"}, "code": `import forge_tools.fake as f, os
r = f.image()
print(r["images"], os.path.getsize(r["images"][0]) > 0)
print(f.config())`})
		if !o.Success || !strings.Contains(o.Stdout, "['/forge/out/tool-1-1.png'] True") || len(o.Images) == 0 {
			t.Fatalf("%+v\n%s", o, text)
		}
		// The bridge got the server's env; the sandbox never sees it.
		if !strings.Contains(o.Stdout, "servers=1 token=[redacted] timeout=2s") || strings.Contains(text, bridgeSecret) {
			t.Fatalf("%+v\n%s", o, text)
		}
	})
	t.Run("R loads the generated code through its profile", func(t *testing.T) {
		var o out
		res := s.Call(t, "execute_r", map[string]any{"code": `cat(forge_tools_granted, Sys.getenv("FORGE_TOOLS_SOCKET"))`, "mcp_tools": []string{"fake.add"}}, &o)
		if !o.Success || o.Stdout != "fake.add /forge/tools/bridge.sock" {
			t.Fatalf("%+v\n%s", o, testenv.Text(res))
		}
	})
	t.Run("session keeps its grant", func(t *testing.T) {
		// Tools asked on the first call: the directory is mounted at start.
		o, text := run(t, map[string]any{"session_id": "tb", "mcp_tools": []string{"fake.add"}, "code": "import forge_tools.fake as f\nprint(f.add(a=40, b=2)['sum'])"})
		if !o.Success || strings.TrimSpace(o.Stdout) != "42" {
			t.Fatalf("%+v\n%s", o, text)
		}
		// Later executes keep the grant; what was never granted stays refused.
		o, text = run(t, map[string]any{"session_id": "tb", "code": `import forge_tools
try:
    forge_tools.call("fake.image")
except forge_tools.ToolError as e:
    print(e.kind)
print(f.add(a=1, b=1)["sum"])`})
		if !o.Success || o.Stdout != "denied\n2\n" {
			t.Fatalf("%+v\n%s", o, text)
		}
		if res := s.Call(t, "destroy_session", map[string]any{"session_id": "tb"}, nil); res.IsError {
			t.Fatal(testenv.Text(res))
		}
		// A session started without tools has no tools directory, and
		// asking later says what to do.
		if o, text := run(t, map[string]any{"session_id": "plain", "code": `import os
print("FORGE_TOOLS_SOCKET" in os.environ)`}); !o.Success || o.Stdout != "False\n" {
			t.Fatalf("%+v\n%s", o, text)
		}
		if o, text := run(t, map[string]any{"session_id": "plain", "mcp_tools": []string{"fake.add"}, "code": "1"}); o.Success || !strings.Contains(text, "first call") {
			t.Fatalf("%+v\n%s", o, text)
		}
		s.Call(t, "destroy_session", map[string]any{"session_id": "plain"}, nil)
	})
	t.Run("tools resource", func(t *testing.T) {
		res, err := s.Session.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "mcp://forge/tools/available"})
		if err != nil {
			t.Fatal(err)
		}
		var a struct {
			Tools []struct {
				ID     string `json:"id"`
				Policy string `json:"policy"`
			} `json:"tools"`
		}
		if err := json.Unmarshal([]byte(res.Contents[0].Text), &a); err != nil {
			t.Fatal(err)
		}
		pol := map[string]string{}
		for _, tl := range a.Tools {
			pol[tl.ID] = tl.Policy
		}
		if pol["fake.add"] != "allow" || pol["fake.forbidden"] != "deny" || strings.Contains(res.Contents[0].Text, bridgeSecret) {
			t.Fatalf("%s", res.Contents[0].Text)
		}
		env, err := s.Session.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "mcp://forge/environment/info"})
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Bridge struct {
				Plugin  string `json:"plugin"`
				Servers map[string]struct {
					Status string `json:"status"`
					Tools  int    `json:"tools"`
				} `json:"servers"`
			} `json:"tool_bridge"`
		}
		if err := json.Unmarshal([]byte(env.Contents[0].Text), &info); err != nil {
			t.Fatal(err)
		}
		if info.Bridge.Plugin != "toolbridge" || info.Bridge.Servers["fake"].Status != "ok" || info.Bridge.Servers["fake"].Tools != 5 {
			t.Fatalf("tool_bridge in environment/info: %+v", info.Bridge)
		}
	})

	// Every grant ended with its run or session: nothing on the host.
	testenv.WaitFor(t, "grant directories removed", 10*time.Second, func() bool {
		entries, err := os.ReadDir(filepath.Join(s.Base, "tools"))
		return err == nil && len(entries) == 0
	})
	raw, err := os.ReadFile(s.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), bridgeSecret) {
		t.Fatal("the audit log holds the server's secret")
	}
	calls, refused := 0, 0
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == "bridge.call" {
			calls++
			if e.Details["outcome"] != "ok" && e.Details["rule"] != nil {
				refused++
			}
			if _, ok := e.Details["arguments"]; ok {
				t.Fatalf("arguments audited: %+v", e)
			}
		}
	}
	if calls < 12 || refused < 3 {
		t.Fatalf("%d bridged calls audited (%d refusals with a rule)", calls, refused)
	}
}

// A tool under "approve" asks the MCP client that ran the code, by
// elicitation, showing the tool and its arguments; the call proceeds only
// on accept. A client that cannot be asked gets a clear refusal.
func TestToolBridgeApproval(t *testing.T) {
	testenv.Require(t)
	bin := filepath.Join(t.TempDir(), "toolbridge-plugin")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/toolbridgeplugin").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cfgText := "[mcp_tools.fake]\ncommand = \"unused\"\napprove = [\"add\"]\n[bridge]\nplugin = \"toolbridge\"\n[plugins.toolbridge]\npath = \"" + bin + "\"\n"
	base := testenv.BaseDir(t)
	cfgPath := filepath.Join(base, "forge.toml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	var asked []string
	answer := "accept"
	client := mcp.NewClient(&mcp.Implementation{Name: "forge-e2e-approver", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = append(asked, r.Params.Message)
			return &mcp.ElicitResult{Action: answer, Content: map[string]any{}}, nil
		}})
	cmd := exec.Command(testenv.Binary(t), "--config", cfgPath, "serve")
	cmd.Env = append(os.Environ(), "FORGE_VOLUMES_BASE_PATH="+base, "FORGE_SECURITY_AUDIT_LOG="+filepath.Join(base, "audit.log"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Protocol 2025-11-25: a server may still ask while it serves a call.
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	code := `import forge_tools.fake as f
try:
    print(f.add(a=2, b=3)["sum"])
except Exception as e:
    print(e.kind, "|", e)`
	var o out
	res := testenv.Call(t, cs, "execute_python", map[string]any{"code": code, "mcp_tools": []string{"fake.add"}}, &o)
	if !o.Success || strings.TrimSpace(o.Stdout) != "5" {
		t.Fatalf("%+v\n%s", o, testenv.Text(res))
	}
	if len(asked) != 1 || !strings.Contains(asked[0], "fake.add") || !strings.Contains(asked[0], `"a": 2`) {
		t.Fatalf("asked %q", asked)
	}
	answer = "decline"
	o = out{}
	res = testenv.Call(t, cs, "execute_python", map[string]any{"code": code, "mcp_tools": []string{"fake.add"}}, &o)
	if !o.Success || !strings.HasPrefix(o.Stdout, "denied |") || !strings.Contains(o.Stdout, "declined") {
		t.Fatalf("%+v\n%s", o, testenv.Text(res))
	}

	// The default client (protocol 2026-07-28) cannot be asked during a call.
	s := testenv.StartServer(t, cfgText)
	o = out{}
	res = s.Call(t, "execute_python", map[string]any{"code": code, "mcp_tools": []string{"fake.add"}}, &o)
	if !o.Success || !strings.HasPrefix(o.Stdout, "denied |") || !strings.Contains(o.Stdout, "cannot be asked") {
		t.Fatalf("%+v\n%s", o, testenv.Text(res))
	}
}

// The round trip of a bridged call from sandbox code (socket, core policy,
// gRPC to the bridge plugin and back), median over 200 calls in one run.
func TestToolBridgeRoundTrip(t *testing.T) {
	s := startBridgeServer(t, 1000)
	var o out
	res := s.Call(t, "execute_python", map[string]any{"mcp_tools": []string{"fake.add"}, "code": `import time, statistics, forge_tools.fake as f
f.add(a=0, b=0)
d = []
for i in range(200):
    t = time.perf_counter()
    f.add(a=i, b=1)
    d.append(time.perf_counter() - t)
print("%.3f %.3f" % (statistics.median(d) * 1000, max(d) * 1000))`}, &o)
	if !o.Success {
		t.Fatalf("%+v\n%s", o, testenv.Text(res))
	}
	var median, worst float64
	if _, err := fmt.Sscan(o.Stdout, &median, &worst); err != nil {
		t.Fatalf("%q: %v", o.Stdout, err)
	}
	t.Logf("bridged call round trip: median %.3f ms, max %.3f ms over 200 calls", median, worst)
	if median > 50 {
		t.Fatalf("median round trip %.1f ms: far slower than a local socket and a gRPC call should be", median)
	}
}
