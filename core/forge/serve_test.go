package forge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/forge/commands"
	"github.com/mcp-forge/mcp-forge/core/httpserver"
)

// quiet sends the server's log to a file of the test.
func quiet(t *testing.T, tb *testbed) {
	tb.cfg.Server.LogFile = filepath.Join(t.TempDir(), "logs", "forge.log")
}

// Serve on stdio answers an MCP client, and releases everything when its
// context ends.
func TestServeStdio(t *testing.T) {
	t.Parallel()
	tb := newTestbed(t)
	quiet(t, tb)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serve(ctx, tb.cfg, Options{MCPIn: inR, MCPOut: outW}, tb.parts) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.ListResources(ctx, nil)
	if err != nil || len(res.Resources) == 0 {
		t.Fatalf("resources %v, %v", res, err)
	}
	cancel()
	inW.Close()
	outR.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
	tb.released(t)
	if b, err := os.ReadFile(tb.cfg.Server.LogFile); err != nil || !strings.Contains(string(b), "serving MCP on stdio") {
		t.Errorf("log file %q, %v", b, err)
	}
}

// A serve that cannot start its watchdog starts nothing else.
func TestServeNeedsTheWatchdog(t *testing.T) {
	t.Parallel()
	tb := newTestbed(t)
	quiet(t, tb)
	tb.parts.watchdog = func(string, hclog.Logger) (watchdogHandle, error) { return nil, errors.New("no fork today") }
	for name, o := range map[string]Options{
		"stdio": {MCPIn: strings.NewReader(""), MCPOut: io.Discard},
		// HTTP served without one: a SIGKILLed HTTP server left its
		// sandboxes running (found by the red team).
		"http": {HTTPAddr: "127.0.0.1:0", Stderr: io.Discard},
	} {
		err := serve(context.Background(), tb.cfg, o, tb.parts)
		if err == nil || !strings.Contains(err.Error(), "no fork today") || tb.audit != nil {
			t.Fatalf("%s: serve = %v (audit opened: %v)", name, err, tb.audit != nil)
		}
	}
}

// Serve over HTTP: the listening line, the MCP endpoint, /healthz and
// /readyz through the core's checks, then a clean stop that releases
// everything.
func TestServeHTTP(t *testing.T) {
	t.Parallel()
	tb := newTestbed(t)
	quiet(t, tb)
	tb.warmPool(t)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serve(ctx, tb.cfg, Options{HTTPAddr: "127.0.0.1:0", Stderr: pw}, tb.parts) }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	m := regexp.MustCompile(`^mcp-forge: listening on (\S+) \(admin (\S+)\)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("listening line %q", line)
	}
	base := "http://" + m[1]
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		Ready  bool
		Checks []httpserver.Check
	}
	json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	want := []httpserver.Check{
		{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
		{Name: "guarantees", OK: true, Detail: "every guarantee enforced", Age: "0s"},
		{Name: "plugins", Detail: "loaded: "},
	}
	if d := cmp.Diff(want, ready.Checks); d != "" || resp.StatusCode != http.StatusServiceUnavailable || ready.Ready {
		t.Errorf("readyz %d ready=%v, checks (-want +got):\n%s", resp.StatusCode, ready.Ready, d)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + httpserver.Path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A tool call goes through the tenants' middleware.
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_sessions", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Fatalf("list_sessions: %v %v", res, err)
	}
	cs.Close()
	// The metrics count the tenant's sessions through the core.
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `mcp_forge_sessions_live{tenant="local"} 0`) || !strings.Contains(string(b), `tool="list_sessions"`) {
		t.Errorf("metrics:\n%s", b)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
	tb.released(t)
}

// An unauthenticated public bind is refused before anything starts.
func TestServeHTTPRefusesAPublicBindWithoutAuth(t *testing.T) {
	t.Parallel()
	tb := newTestbed(t)
	quiet(t, tb)
	err := serve(context.Background(), tb.cfg, Options{HTTPAddr: "0.0.0.0:0"}, tb.parts)
	if err == nil || !strings.Contains(err.Error(), "refusing to serve 0.0.0.0:0 without authentication") || tb.audit != nil {
		t.Fatalf("serve = %v (audit opened: %v)", err, tb.audit != nil)
	}
}

// The audit log goes to standard output only where standard output is
// not MCP: with --http or server.transport = "http", never over stdio.
func TestServeAuditStdout(t *testing.T) {
	t.Parallel()
	tb := newTestbed(t)
	quiet(t, tb)
	cfg := tb.cfg
	cfg.Security.AuditStdout = true
	err := serve(context.Background(), cfg, Options{MCPIn: strings.NewReader(""), MCPOut: io.Discard}, tb.parts)
	if err == nil || !strings.Contains(err.Error(), "security.audit_stdout: standard output carries MCP over stdio") || tb.audit != nil {
		t.Fatalf("over stdio: %v (audit opened: %v)", err, tb.audit != nil)
	}
	// --http is HTTP too: past that check (to the bind check here).
	err = serve(context.Background(), cfg, Options{HTTPAddr: "0.0.0.0:0"}, tb.parts)
	if err == nil || !strings.Contains(err.Error(), "refusing to serve 0.0.0.0:0") {
		t.Fatalf("with --http: %v", err)
	}
}

func TestHTTPAddress(t *testing.T) {
	t.Parallel()
	httpCfg := config.Default()
	httpCfg.Server.Transport, httpCfg.Server.Host, httpCfg.Server.Port = "http", "::1", 3001
	cases := []struct {
		name, flag string
		cfg        config.Config
		addr       string
		ok         bool
	}{
		{"stdio", "", config.Default(), "", false},
		{"flag", "127.0.0.1:9", config.Default(), "127.0.0.1:9", true},
		{"transport", "", httpCfg, "[::1]:3001", true},
		{"flag over transport", ":7", httpCfg, ":7", true},
	}
	for _, c := range cases {
		addr, ok := HTTPAddress(c.cfg, c.flag)
		if addr != c.addr || ok != c.ok {
			t.Errorf("%s: %q %v, want %q %v", c.name, addr, ok, c.addr, c.ok)
		}
	}
}

func TestNewLogger(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Server.LogFile = filepath.Join(t.TempDir(), "a", "b.log")
	cfg.Server.LogFormat = "json"
	log, closeLog, err := NewLogger(cfg)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "k", "v")
	closeLog()
	b, _ := os.ReadFile(cfg.Server.LogFile)
	var line map[string]any
	if err := json.Unmarshal(b, &line); err != nil || line["@message"] != "hello" || line["k"] != "v" {
		t.Errorf("log %q: %v", b, err)
	}
	cfg.Server.LogFile = filepath.Join(cfg.Server.LogFile, "under-a-file.log")
	if _, _, err := NewLogger(cfg); err == nil {
		t.Error("a log file under a file was accepted")
	}
}

func TestMCPJSON(t *testing.T) {
	t.Parallel()
	var got struct {
		MCPServers map[string]struct {
			Command string
			Args    []string
		}
	}
	for path, wantArgs := range map[string][]string{"": {"serve"}, "/etc/forge.toml": {"--config", "/etc/forge.toml", "serve"}} {
		if err := json.Unmarshal([]byte(MCPJSON(path)), &got); err != nil {
			t.Fatal(err)
		}
		e := got.MCPServers["mcp-forge"]
		if d := cmp.Diff(wantArgs, e.Args); d != "" || !filepath.IsAbs(e.Command) {
			t.Errorf("%q: command %q, args (-want +got):\n%s", path, e.Command, d)
		}
	}
}

// The commands over a host with no plugins: each says so and fails.
func TestCommandsWithoutPlugins(t *testing.T) {
	t.Parallel()
	tb := newTestbed(t)
	cases := []struct {
		name string
		run  func(o Options) error
		want []string
	}{
		{"doctor", func(o Options) error { return commands.Doctor(context.Background(), tb.parts.core(tb.cfg, o), o.io()) },
			[]string{"ok    config           f.toml", "no plugins in " + tb.cfg.Server.PluginDir, "version 5.0.0"}},
		{"doctor http", func(o Options) error {
			o.HTTPAddr = "0.0.0.0:3000"
			return commands.Doctor(context.Background(), tb.parts.core(tb.cfg, o), o.io())
		}, []string{"0.0.0.0:3000: no authentication"}},
		{"images", func(o Options) error {
			return commands.ListImages(context.Background(), tb.parts.core(tb.cfg, o), o.io())
		},
			[]string{"no plugins found in " + tb.cfg.Server.PluginDir}},
		{"plugins", func(o Options) error { return ListPlugins(context.Background(), tb.cfg, o) },
			[]string{"no plugins found in " + tb.cfg.Server.PluginDir}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := c.run(Options{ConfigPath: "f.toml", Stdout: &out})
			if !errors.Is(err, ErrFailed) {
				t.Errorf("error %v, want ErrFailed", err)
			}
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output does not contain %q:\n%s", w, out.String())
				}
			}
		})
	}
}
