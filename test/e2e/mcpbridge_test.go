package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// realBridgeSecret is put into every configured server's env: it must reach
// the servers (edge.env shows it redacted) and nothing the sandbox, the
// client, the logs or the audit log can see.
const realBridgeSecret = "rEaL-bridge-s3cret-7f3a9c"

// npmMCPServer is the entry script of a pinned npm MCP server in
// test/mcpservers; without node or the package the test skips saying how to
// install them (scripts/test.sh and make bench do).
func npmMCPServer(t testing.TB, pkg string) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the real MCP servers of the tool bridge need it")
	}
	script = filepath.Join(testenv.RepoRoot(), "test", "mcpservers", "node_modules", "@modelcontextprotocol", pkg, "dist", "index.js")
	if _, err := os.Stat(script); err != nil {
		t.Skipf("@modelcontextprotocol/%s is not installed: run `npm ci` in test/mcpservers (scripts/test.sh does)", pkg)
	}
	return node, script
}

// startRealBridge starts mcp-forge with the real mcpbridge plugin from bin/
// and the pinned npm servers everything, memory and filesystem (on a
// temporary directory) plus the plugin's Go edge-case server.
func startRealBridge(t *testing.T) (s *testenv.Server, fsDir string) {
	t.Helper()
	testenv.Require(t)
	if _, err := os.Stat(filepath.Join(testenv.RepoRoot(), "bin", "mcp-forge-plugin-mcpbridge")); err != nil {
		t.Fatalf("bin/mcp-forge-plugin-mcpbridge is missing: run `make build` first: %v", err)
	}
	node, everything := npmMCPServer(t, "server-everything")
	_, memory := npmMCPServer(t, "server-memory")
	_, filesystem := npmMCPServer(t, "server-filesystem")
	edge := filepath.Join(t.TempDir(), "edgeserver")
	build := exec.Command("go", "build", "-o", edge, "./plugins/mcpbridge/testdata/edgeserver")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the edge server: %v\n%s", err, out)
	}
	fsDir = t.TempDir()
	if err := os.WriteFile(filepath.Join(fsDir, "hello.txt"), []byte("hello from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	memFile := filepath.Join(t.TempDir(), "memory.jsonl")
	s = testenv.StartServer(t, fmt.Sprintf(`
[mcp_tools.everything]
command = %q
args = [%q]
env = { FORGE_E2E_TOKEN = %q }
deny = ["toggle-*", "get_tiny_image"]

[mcp_tools.memory]
command = %q
args = [%q]
env = { MEMORY_FILE_PATH = %q, FORGE_E2E_TOKEN = %q }

[mcp_tools.filesystem]
command = %q
args = [%q, %q]

[mcp_tools.edge]
command = %q
env = { EDGE_TOKEN = %q }
call_timeout = 3

[bridge]
plugin = "mcpbridge"
call_timeout = 20
max_calls_per_run = 100
`, node, everything, realBridgeSecret, node, memory, memFile, realBridgeSecret, node, filesystem, fsDir, edge, realBridgeSecret))
	// The servers start in the background: wait until every one lists tools.
	testenv.WaitFor(t, "every MCP server lists its tools", 90*time.Second, func() bool {
		info := bridgeInfo(t, s)
		for _, n := range []string{"everything", "memory", "filesystem", "edge"} {
			if info.Servers[n].Status != "ok" {
				return false
			}
		}
		return info.Plugin == "mcpbridge"
	})
	return s, fsDir
}

type bridgeInfoT struct {
	Plugin  string `json:"plugin"`
	Servers map[string]struct {
		Status string `json:"status"`
		Tools  int    `json:"tools"`
	} `json:"servers"`
}

func bridgeInfo(t *testing.T, s *testenv.Server) bridgeInfoT {
	t.Helper()
	env, err := s.Session.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "mcp://forge/environment/info"})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Bridge bridgeInfoT `json:"tool_bridge"`
	}
	if err := json.Unmarshal([]byte(env.Contents[0].Text), &info); err != nil {
		t.Fatal(err)
	}
	return info.Bridge
}

// Issue 12 end to end: sandbox code calls the tools of real npm MCP servers
// through the real bridge plugin, under the core's policy, budget and
// timeouts, and no server secret leaks.
func TestRealMCPBridge(t *testing.T) {
	testenv.Parallel(t)
	s, fsDir := startRealBridge(t)
	py := func(t *testing.T, args map[string]any) (out, string) {
		t.Helper()
		var o out
		res := s.Call(t, "execute_python", args, &o)
		return o, testenv.Text(res)
	}

	t.Run("stateless python adds", func(t *testing.T) {
		o, text := py(t, map[string]any{"mcp_tools": []string{"everything.get_sum"}, "code": `from forge_tools import everything
print(everything.get_sum(a=20, b=22))`})
		if !o.Success || !strings.Contains(o.Stdout, "The sum of 20 and 22 is 42") {
			t.Fatalf("%+v\n%s", o, text)
		}
	})
	t.Run("session sees memory state", func(t *testing.T) {
		o, text := py(t, map[string]any{"session_id": "mem", "mcp_tools": []string{"memory"}, "code": `from forge_tools import memory
memory.create_entities(entities=[{"name": "forge", "entityType": "project", "observations": ["runs code in sandboxes"]}])
print("created")`})
		if !o.Success || strings.TrimSpace(o.Stdout) != "created" {
			t.Fatalf("%+v\n%s", o, text)
		}
		o, text = py(t, map[string]any{"session_id": "mem", "code": `g = memory.read_graph()
print([e["name"] for e in g["entities"]], g["entities"][0]["observations"])`})
		if !o.Success || strings.TrimSpace(o.Stdout) != "['forge'] ['runs code in sandboxes']" {
			t.Fatalf("%+v\n%s", o, text)
		}
		if res := s.Call(t, "destroy_session", map[string]any{"session_id": "mem"}, nil); res.IsError {
			t.Fatal(testenv.Text(res))
		}
	})
	t.Run("R adds", func(t *testing.T) {
		var o out
		res := s.Call(t, "execute_r", map[string]any{"mcp_tools": []string{"everything.get_sum"}, "code": `cat(everything$get_sum(a = 1, b = 2))`}, &o)
		if !o.Success || !strings.Contains(o.Stdout, "The sum of 1 and 2 is 3") {
			t.Fatalf("%+v\n%s", o, testenv.Text(res))
		}
	})
	t.Run("filesystem on a temporary directory", func(t *testing.T) {
		o, text := py(t, map[string]any{"mcp_tools": []string{"filesystem.read_text_file", "filesystem.write_file"}, "code": fmt.Sprintf(`from forge_tools import filesystem
filesystem.write_file(path=%q, content="written by sandbox code")
print(filesystem.read_text_file(path=%q))`, filepath.Join(fsDir, "new.txt"), filepath.Join(fsDir, "hello.txt"))})
		if !o.Success || !strings.Contains(o.Stdout, "hello from the host") {
			t.Fatalf("%+v\n%s", o, text)
		}
		// The server wrote on the host, in its directory only.
		if b, err := os.ReadFile(filepath.Join(fsDir, "new.txt")); err != nil || string(b) != "written by sandbox code" {
			t.Fatalf("new.txt: %q, %v", b, err)
		}
		o, text = py(t, map[string]any{"mcp_tools": []string{"filesystem.read_text_file"}, "code": `from forge_tools import filesystem
import forge_tools
try:
    filesystem.read_text_file(path="/etc/hostname")
except forge_tools.ToolError as e:
    print(e.kind, "|", e)`})
		if !o.Success || !strings.HasPrefix(o.Stdout, "tool |") || !strings.Contains(o.Stdout, "denied") {
			t.Fatalf("%+v\n%s", o, text)
		}
	})
	t.Run("denied tool refused in the sandbox", func(t *testing.T) {
		// Granting the server grants what the policy does not deny; calling a
		// denied tool by id is an exception naming the reason. deny lists
		// both the server's own name (toggle-*) and the mapped one.
		o, text := py(t, map[string]any{"mcp_tools": []string{"everything"}, "code": `import forge_tools
for tool in ["everything.toggle_simulated_logging", "everything.get_tiny_image"]:
    try:
        forge_tools.call(tool)
        print("called", tool)
    except forge_tools.ToolDenied as e:
        print(type(e).__name__, e.kind, "|", e)`})
		lines := strings.Split(strings.TrimSpace(o.Stdout), "\n")
		if !o.Success || len(lines) != 2 {
			t.Fatalf("%+v\n%s", o, text)
		}
		for _, l := range lines {
			if !strings.HasPrefix(l, "ToolDenied denied |") || !strings.Contains(l, "denied by policy: mcp_tools.everything.deny (") || strings.Contains(l, "name it in mcp_tools") {
				t.Errorf("line %q\n%+v", l, o)
			}
		}
		// Asking for it by name is refused before the run.
		o, text = py(t, map[string]any{"code": "1", "mcp_tools": []string{"everything.toggle_simulated_logging"}})
		if o.Error == nil || !strings.Contains(o.Error.Message, "denied by policy: mcp_tools.everything.deny (") {
			t.Fatalf("%+v\n%s", o, text)
		}
	})
	t.Run("hanging tool times out", func(t *testing.T) {
		o, text := py(t, map[string]any{"mcp_tools": []string{"edge.hang", "edge.pid"}, "code": `import time
from forge_tools import edge
import forge_tools
t = time.time()
try:
    edge.hang()
except forge_tools.ToolTimeout as e:
    print(e.kind, "%.2f" % (time.time() - t))
print(edge.pid().isdigit())`})
		var kind, alive string
		var took float64
		if _, err := fmt.Sscan(o.Stdout, &kind, &took, &alive); err != nil || !o.Success || kind != "timeout" || alive != "True" {
			t.Fatalf("%v: %+v\n%s", err, o, text)
		}
		// mcp_tools.edge.call_timeout = 3 (not bridge.call_timeout = 20);
		// the upper bound leaves room for a loaded machine.
		if took < 2.9 || took > 10 {
			t.Fatalf("edge.hang ended after %.2f s, want the per-call timeout of 3 s", took)
		}
	})
	t.Run("crashed server reported and restarted", func(t *testing.T) {
		o, text := py(t, map[string]any{"mcp_tools": []string{"edge.crash", "edge.pid"}, "code": `from forge_tools import edge
import forge_tools
before = edge.pid()
try:
    edge.crash()
except forge_tools.BridgeError as e:
    print(type(e).__name__, "|", e)
after = edge.pid()
print(before != after, after.isdigit())`})
		lines := strings.Split(strings.TrimSpace(o.Stdout), "\n")
		if !o.Success || len(lines) != 2 || !strings.Contains(lines[0], "stopped during the call of crash") || lines[1] != "True True" {
			t.Fatalf("%+v\n%s", o, text)
		}
	})
	t.Run("50 calls in a loop", func(t *testing.T) {
		o, text := py(t, map[string]any{"mcp_tools": []string{"everything.get_sum"}, "code": `from forge_tools import everything
ok = sum(1 for i in range(50) if everything.get_sum(a=i, b=1).endswith("is %d." % (i + 1)))
print(ok)`})
		if !o.Success || strings.TrimSpace(o.Stdout) != "50" {
			t.Fatalf("%+v\n%s", o, text)
		}
	})
	t.Run("secret stays in the bridge", func(t *testing.T) {
		o, text := py(t, map[string]any{"mcp_tools": []string{"edge.env", "edge.leaky", "everything.get_env"}, "code": `import os, subprocess
from forge_tools import edge, everything
print("\n".join(edge.env()["env"]))
print(everything.get_env())
print(edge.leaky.__doc__)
print(dict(os.environ))
print("files with it:", subprocess.run(["grep", "-rl", "s3cret", "/forge/tools"], capture_output=True, text=True).stdout.split())`})
		if !o.Success || !strings.Contains(o.Stdout, "EDGE_TOKEN=[redacted]") || !strings.Contains(o.Stdout, "files with it: []") {
			t.Fatalf("%+v\n%s", o, text)
		}
		if strings.Contains(text, realBridgeSecret) || strings.Contains(o.Stdout, realBridgeSecret) {
			t.Fatalf("the secret reached the sandbox or the tool result:\n%s", o.Stdout)
		}
	})
	t.Run("tools resource lists them", func(t *testing.T) {
		res, err := s.Session.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "mcp://forge/tools/available"})
		if err != nil {
			t.Fatal(err)
		}
		raw := res.Contents[0].Text
		var a struct {
			Tools []struct {
				ID           string         `json:"id"`
				OriginalName string         `json:"original_name"`
				Policy       string         `json:"policy"`
				InputSchema  map[string]any `json:"input_schema"`
			} `json:"tools"`
		}
		if err := json.Unmarshal([]byte(raw), &a); err != nil {
			t.Fatal(err)
		}
		pol := map[string]string{}
		for _, tl := range a.Tools {
			pol[tl.ID] = tl.Policy
			if tl.ID == "everything.get_sum" && tl.OriginalName != "get-sum" {
				t.Errorf("everything.get_sum: original_name %q, want get-sum", tl.OriginalName)
			}
		}
		want := map[string]string{"everything.get_sum": "allow", "everything.toggle_simulated_logging": "deny", "everything.get_tiny_image": "deny",
			"memory.read_graph": "allow", "filesystem.read_text_file": "allow", "edge.hang": "allow"}
		for id, p := range want {
			if pol[id] != p {
				t.Errorf("%s: policy %q, want %q", id, pol[id], p)
			}
		}
		if strings.Contains(raw, realBridgeSecret) {
			t.Error("the tools resource holds the secret")
		}
		if t.Failed() {
			t.Logf("%s", raw)
		}
	})

	// Nothing the client, the logs or the audit log see holds the secret.
	logs, _ := filepath.Glob(filepath.Join(s.Base, "forge-*.log"))
	if len(logs) == 0 {
		t.Fatal("no server log found to check for the secret")
	}
	for _, f := range append(logs, s.AuditLog) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), realBridgeSecret) {
			t.Errorf("%s holds the server's secret", filepath.Base(f))
		}
	}
	calls := 0
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == "bridge.call" {
			calls++
			if _, ok := e.Details["arguments"]; ok {
				t.Fatalf("arguments audited: %+v", e)
			}
		}
	}
	if calls < 60 {
		t.Errorf("%d bridged calls audited, want >= 60", calls)
	}
}

// hostileSecret is the hostile server's HOSTILE_TOKEN: characters encoders
// treat specially around a distinctive ASCII core (hostileCore) that
// sdktest.Leaks looks for in every decoding.
const (
	hostileSecret = `Hö$tile/S3cretCore+ "quoted" & 😀 ∑ end`
	hostileCore   = "S3cretCore"
)

// Issue 20 item 6 end to end: a bridged Python MCP server echoes its env
// JSON-escaped (\u00f6, surrogate pairs, upper case, \/, nested),
// URL-encoded (%22, +, %20, lower-case hex), as HTML, base64 (std and URL,
// every alignment, MIME lines) and hex. Sandbox code prints what its tools
// return; no decoding of the sandbox's output, the client's result, the
// audit log or the server logs gives the secret back.
func TestHostileBridgedServer(t *testing.T) {
	testenv.Require(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the hostile MCP server is a Python script")
	}
	if _, err := os.Stat(filepath.Join(testenv.RepoRoot(), "bin", "mcp-forge-plugin-mcpbridge")); err != nil {
		t.Fatalf("bin/mcp-forge-plugin-mcpbridge is missing: run `make build` first: %v", err)
	}
	script := filepath.Join(testenv.RepoRoot(), "plugins", "mcpbridge", "testdata", "hostileserver.py")
	s := testenv.StartServer(t, fmt.Sprintf(`
[mcp_tools.hostile]
command = %q
args = [%q]
env = { HOSTILE_TOKEN = %q }

[bridge]
plugin = "mcpbridge"
call_timeout = 20
`, py, script, hostileSecret))
	testenv.WaitFor(t, "the hostile server lists its tools", 60*time.Second, func() bool {
		return bridgeInfo(t, s).Servers["hostile"].Status == "ok"
	})
	var o out
	res := s.Call(t, "execute_python", map[string]any{"mcp_tools": []string{"hostile"}, "code": `import json, forge_tools
from forge_tools import hostile
r = hostile.dump()
print("RESULT", json.dumps(r, ensure_ascii=False))
print("REPR", repr(r))
print("TEXT", hostile.dump_text())
try:
    hostile.dump_error()
except forge_tools.ToolError as e:
    print("ERROR", e.kind, str(e))`}, &o)
	client := testenv.Text(res)
	if raw, err := json.Marshal(res.StructuredContent); err == nil {
		client += string(raw)
	}
	if !o.Success || !strings.Contains(o.Stdout, "RESULT {") || !strings.Contains(o.Stdout, "TEXT json: ") || !strings.Contains(o.Stdout, "ERROR tool ") {
		t.Fatalf("%+v\n%s", o, client)
	}
	if n := strings.Count(o.Stdout, "[redacted]"); n < 40 {
		t.Errorf("only %d redactions: did the server echo its secret?\n%s", n, o.Stdout)
	}
	for what, text := range map[string]string{"the sandbox's output": o.Stdout, "the client's result": client} {
		if leaks := sdktest.Leaks(text, hostileCore); len(leaks) > 0 || strings.Contains(text, "Hö$tile") {
			t.Errorf("%s gives the secret back (%s):\n%s", what, strings.Join(leaks, "; "), text)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(s.Base, "forge-*.log"))
	for _, f := range append(logs, s.AuditLog) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if leaks := sdktest.Leaks(string(raw), hostileCore); len(leaks) > 0 {
			t.Errorf("%s gives the secret back: %s", filepath.Base(f), strings.Join(leaks, "; "))
		}
	}
}
