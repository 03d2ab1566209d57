package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

func everythingConfig(t testing.TB, env map[string]string) ServerConfig {
	return ServerConfig{Command: nodePath(t), Args: []string{npmServer(t, "server-everything")}, Env: env}
}

// The conformance suite, against the bridge itself, in-process over gRPC,
// and as the built binary launched the way the core launches plugins.
func TestConformance(t *testing.T) {
	servers := map[string]ServerConfig{"everything": everythingConfig(t, nil), "edge": edgeConfig(nil)}
	cfg := mustJSON(t, Config{Servers: servers, CallTimeout: "20s"})
	cases := sdktest.BridgeCases{
		Call:  &bridge.CallRequest{Server: "everything", Tool: "echo", Arguments: json.RawMessage(`{"message":"conformance"}`)},
		Grant: []string{"everything.get_sum", "edge.t_1st"},
	}
	t.Run("direct", func(t *testing.T) { sdktest.RunBridge(t, newTestBridge(t, servers, "20s"), cases) })
	// The name mapping crosses the plugin boundary (proto original_name).
	originalName := func(t *testing.T, br bridge.Bridge) {
		tools, err := br.ListTools(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if tl, _ := findTool(tools, "everything", "get_sum"); tl.OriginalName != "get-sum" {
			t.Fatalf("get_sum's original name over gRPC: %q", tl.OriginalName)
		}
	}
	t.Run("grpc", func(t *testing.T) {
		br := sdktest.ServeBridge(t, Info, New, sdktest.NewLocalHost(t.TempDir()), cfg)
		sdktest.RunBridge(t, br, cases)
		originalName(t, br)
	})
	t.Run("binary", func(t *testing.T) {
		br := sdktest.LaunchBridge(t, pluginBin, sdktest.NewLocalHost(t.TempDir()), cfg)
		sdktest.RunBridge(t, br, cases)
		originalName(t, br)
	})
}

func TestEverythingServer(t *testing.T) {
	const secret = "s3cr3t-token-value-4711"
	b := newTestBridge(t, map[string]ServerConfig{"everything": everythingConfig(t, map[string]string{"FORGE_TEST_SECRET": secret})}, "20s")
	tools, err := b.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sum, ok := findTool(tools, "everything", "get_sum")
	if !ok || sum.OriginalName != "get-sum" {
		t.Fatalf("get-sum is not listed as get_sum with its original name: %+v (tools: %s)", sum, toolNames(tools))
	}
	if echo, _ := findTool(tools, "everything", "echo"); echo.OriginalName != "" {
		t.Errorf("echo is an identifier, yet reported as renamed from %q", echo.OriginalName)
	}

	t.Run("echo", func(t *testing.T) {
		if r := call(t, b, "everything", "echo", map[string]any{"message": "hello bridge"}); r.IsError || !strings.Contains(r.Text, "hello bridge") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("add", func(t *testing.T) {
		if r := call(t, b, "everything", "get_sum", map[string]any{"a": 20, "b": 22}); r.IsError || !strings.Contains(r.Text, "42") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("structured", func(t *testing.T) {
		r := call(t, b, "everything", "get_structured_content", map[string]any{"location": "Chicago"})
		var v map[string]any
		if r.IsError || json.Unmarshal(r.Structured, &v) != nil || v["temperature"] == nil {
			t.Fatalf("want structured content with a temperature: %+v (%s)", r, r.Structured)
		}
	})
	t.Run("image", func(t *testing.T) {
		r := call(t, b, "everything", "get_tiny_image", map[string]any{})
		if r.IsError || len(r.Images) != 1 || r.Images[0].MIMEType != "image/png" || !bytes.HasPrefix(r.Images[0].Data, []byte("\x89PNG")) || !strings.HasSuffix(r.Images[0].Name, ".png") {
			t.Fatalf("want one decoded PNG: %+v", r)
		}
	})
	t.Run("tool-error", func(t *testing.T) {
		r := call(t, b, "everything", "get_sum", map[string]any{"a": "not a number", "b": 1})
		if !r.IsError || r.Message == "" {
			t.Fatalf("bad arguments: want an error result with a message, got %+v", r)
		}
	})
	t.Run("long-running-with-progress", func(t *testing.T) {
		if r := call(t, b, "everything", "trigger_long_running_operation", map[string]any{"duration": 1, "steps": 2}); r.IsError {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("secret-never-in-a-result", func(t *testing.T) {
		r := call(t, b, "everything", "get_env", map[string]any{})
		all := r.Text + string(r.Structured) + r.Message
		if !strings.Contains(all, "FORGE_TEST_SECRET") {
			t.Fatalf("get-env does not show the configured variable (is the env passed?): %s", all)
		}
		if strings.Contains(all, secret) {
			t.Fatalf("the secret is in a tool result: %s", all)
		}
	})
}

func TestMemoryServerKeepsState(t *testing.T) {
	dir := t.TempDir()
	b := newTestBridge(t, map[string]ServerConfig{"memory": {Command: nodePath(t), Args: []string{npmServer(t, "server-memory")},
		Env: map[string]string{"MEMORY_FILE_PATH": filepath.Join(dir, "memory.jsonl")}}}, "20s")
	r := call(t, b, "memory", "create_entities", map[string]any{"entities": []any{map[string]any{"name": "forge", "entityType": "project", "observations": []string{"bridges MCP tools"}}}})
	if r.IsError {
		t.Fatalf("create: %+v", r)
	}
	r = call(t, b, "memory", "read_graph", map[string]any{})
	if r.IsError || !strings.Contains(r.Text+string(r.Structured), "bridges MCP tools") {
		t.Fatalf("the second call does not see the first's entity: %+v", r)
	}
}

func TestFilesystemServer(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := newTestBridge(t, map[string]ServerConfig{"fs": {Command: nodePath(t), Args: []string{npmServer(t, "server-filesystem"), dir}}}, "20s")
	p := filepath.Join(dir, "note.txt")
	if r := call(t, b, "fs", "write_file", map[string]any{"path": p, "content": "written through the bridge"}); r.IsError {
		t.Fatalf("write: %+v", r)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "written through the bridge" {
		t.Fatalf("file: %q %v", got, err)
	}
	if r := call(t, b, "fs", "read_text_file", map[string]any{"path": p}); r.IsError || !strings.Contains(r.Text+string(r.Structured), "written through the bridge") {
		t.Fatalf("read: %+v", r)
	}
	if r := call(t, b, "fs", "read_text_file", map[string]any{"path": "/etc/passwd"}); !r.IsError {
		t.Fatalf("a path outside the allowed directory was read: %+v", r)
	}
}

func TestEdgeCases(t *testing.T) {
	const secret = "edge-secret-value-0815"
	b := newTestBridge(t, map[string]ServerConfig{"edge": edgeConfig(map[string]string{"EDGE_TOKEN": secret, "LANG": "C.UTF-8"})}, "5s")

	t.Run("names-mapped-and-reported", func(t *testing.T) {
		tools, err := b.ListTools(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"get_user": "", "get_user_2": "get-user", "class_": "class", "t_1st": "1st", "a_b": "a.b"}
		for name, orig := range want {
			tl, ok := findTool(tools, "edge", name)
			if !ok || tl.OriginalName != orig {
				t.Errorf("tool %s: want original %q, got %+v (tools: %s)", name, orig, tl, toolNames(tools))
				continue
			}
			// Each mapped name reaches the server's own tool.
			r := call(t, b, "edge", name, nil)
			wantText := orig
			if wantText == "" {
				wantText = name
			}
			if r.IsError || r.Text != wantText {
				t.Errorf("call %s: want the tool %q, got %+v", name, wantText, r)
			}
		}
	})

	t.Run("exact-env", func(t *testing.T) {
		r := call(t, b, "edge", "env", nil)
		var got struct{ Env []string }
		if err := json.Unmarshal(r.Structured, &got); err != nil {
			t.Fatalf("%v: %+v", err, r)
		}
		var names []string
		for _, kv := range got.Env {
			names = append(names, strings.SplitN(kv, "=", 2)[0])
		}
		sort.Strings(names)
		if strings.Join(names, " ") != "EDGE_TOKEN HOME LANG PATH" {
			t.Fatalf("the server's env has %v; want exactly the configured EDGE_TOKEN, LANG plus PATH and HOME", names)
		}
		if strings.Contains(r.Text+string(r.Structured), secret) {
			t.Fatalf("the secret is in a result: %s", r.Structured)
		}
		if !strings.Contains(string(r.Structured), "EDGE_TOKEN=[redacted]") {
			t.Fatalf("want the secret redacted: %s", r.Structured)
		}
	})

	t.Run("secret-not-in-listing", func(t *testing.T) {
		tools, err := b.ListTools(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		tl, ok := findTool(tools, "edge", "leaky")
		if !ok || tl.Description != "token [redacted]" || !strings.Contains(string(tl.InputSchema), `"token [redacted]"`) || !json.Valid(tl.InputSchema) {
			t.Fatalf("want the secret redacted from description and schema: %+v (%s)", tl, tl.InputSchema)
		}
	})

	t.Run("secret-not-in-error", func(t *testing.T) {
		r := call(t, b, "edge", "fail_env", map[string]any{"name": "EDGE_TOKEN"})
		if !r.IsError || strings.Contains(r.Message, secret) || !strings.Contains(r.Message, "failed with") {
			t.Fatalf("want an error result without the secret: %+v", r)
		}
	})

	t.Run("hang-times-out", func(t *testing.T) {
		start := time.Now()
		res, err := b.CallTool(context.Background(), bridge.CallRequest{Server: "edge", Tool: "hang", Arguments: json.RawMessage(`{}`), Timeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.Contains(res.Message, "timed out after 300ms") {
			t.Fatalf("want a timeout result: %+v", res)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("the timeout took %s", d)
		}
		// The server is still usable.
		if r := call(t, b, "edge", "get_user", nil); r.IsError {
			t.Fatalf("after a timeout: %+v", r)
		}
	})

	t.Run("5MB-result", func(t *testing.T) {
		r := call(t, b, "edge", "big", map[string]any{"n": 5 << 20})
		if r.IsError || len(r.Text) != 5<<20 {
			t.Fatalf("want 5 MB of text, got %d bytes (%s)", len(r.Text), r.Message)
		}
	})

	t.Run("crash-reported-and-restarted", func(t *testing.T) {
		pid1 := call(t, b, "edge", "pid", nil).Text
		r := call(t, b, "edge", "crash", nil)
		if !r.IsError || !strings.Contains(r.Message, "stopped") || !strings.Contains(r.Message, "next call starts it again") {
			t.Fatalf("want a result saying the server stopped: %+v", r)
		}
		r = call(t, b, "edge", "pid", nil)
		if r.IsError || r.Text == pid1 || r.Text == "" {
			t.Fatalf("want a new server process after the crash (old pid %s): %+v", pid1, r)
		}
		if pid, _ := strconv.Atoi(pid1); pid > 0 {
			eventually(t, 5*time.Second, "the crashed server is reaped", func() bool { _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); return err != nil })
		}
	})

	t.Run("list-changed", func(t *testing.T) {
		if r := call(t, b, "edge", "add_tool", map[string]any{"name": "late-tool"}); r.IsError {
			t.Fatal(r.Message)
		}
		var tl bridge.Tool
		eventually(t, 5*time.Second, "the added tool is listed", func() bool {
			tools, err := b.ListTools(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var ok bool
			tl, ok = findTool(tools, "edge", "late_tool")
			return ok
		})
		if tl.OriginalName != "late-tool" {
			t.Fatalf("%+v", tl)
		}
		if r := call(t, b, "edge", "late_tool", nil); r.IsError || r.Text != "added late-tool" {
			t.Fatalf("%+v", r)
		}
	})

	t.Run("unknown-tool", func(t *testing.T) {
		r := call(t, b, "edge", "nope", nil)
		if !r.IsError || !strings.Contains(r.Message, `no tool "nope"`) || !strings.Contains(r.Message, "get_user") {
			t.Fatalf("%+v", r)
		}
	})
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The core's output limits: a result over max_output_bytes is an error
// saying so, an image over max_image_bytes is left out with a note.
func TestOutputLimits(t *testing.T) {
	cfg := mustJSON(t, Config{Servers: map[string]ServerConfig{"edge": edgeConfig(nil), "everything": everythingConfig(t, nil)}, MaxOutputBytes: 1 << 20, MaxImageBytes: 10})
	b, err := newBridge(cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if r := call(t, b, "edge", "big", map[string]any{"n": 1 << 20}); r.IsError {
		t.Fatalf("1 MiB is within the limit: %s", r.Message)
	}
	if r := call(t, b, "edge", "big", map[string]any{"n": 1<<20 + 1}); !r.IsError || !strings.Contains(r.Message, "over execution.max_output (1048576 bytes)") {
		t.Fatalf("%+v", r.Message)
	}
	r := call(t, b, "everything", "get_tiny_image", nil)
	if r.IsError || len(r.Images) != 0 || !strings.Contains(r.Text, "left out: over execution.max_image_size (10 bytes)") {
		t.Fatalf("%+v", r)
	}
}

// A server that cannot start is reported on its own; the others work.
func TestBrokenServerIsPerServer(t *testing.T) {
	const secret = "broken-secret-9999"
	var logs lockedBuf
	cfg := mustJSON(t, Config{Servers: map[string]ServerConfig{
		"edge":   edgeConfig(nil),
		"broken": {Command: "/bin/sh", Args: []string{"-c", "echo token is $TOKEN >&2; exit 3"}, Env: map[string]string{"TOKEN": secret}},
		"absent": {Command: "no-such-mcp-server-binary"},
	}, CallTimeout: "5s"})
	b, err := newBridge(cfg, hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	defer func() {
		if l := logs.String(); strings.Contains(l, secret) || !strings.Contains(l, "token is [redacted]") {
			t.Errorf("want the server's stderr in the log, redacted:\n%s", l)
		}
	}()
	tools, err := b.ListTools(context.Background())
	if err != nil {
		t.Fatalf("one broken server fails the listing: %v", err)
	}
	if _, ok := findTool(tools, "edge", "get_user"); !ok {
		t.Fatalf("edge's tools are missing: %s", toolNames(tools))
	}
	r := call(t, b, "broken", "x", nil)
	if !r.IsError || !strings.Contains(r.Message, "MCP server broken is down") || strings.Contains(r.Message, secret) || !strings.Contains(r.Message, "token is [redacted]") {
		t.Fatalf("want a down report with the server's stderr, redacted: %+v", r)
	}
	r = call(t, b, "absent", "x", nil)
	if !r.IsError || !strings.Contains(r.Message, "not on the server's PATH") {
		t.Fatalf("%+v", r)
	}
	h := b.Health()
	if h["edge"] != "ok" || h["broken"] == "ok" || strings.Contains(h["broken"], secret) {
		t.Fatalf("health: %v", h)
	}
}
