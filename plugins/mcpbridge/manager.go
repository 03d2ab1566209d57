package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/sdk/bridge"
)

// defaultPath is the PATH of a stdio server whose env does not set one: the
// plugin's own environment never reaches a server.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// manager holds one client per configured MCP server.
type manager struct {
	cfg     *parsedConfig
	log     hclog.Logger
	red     redactor
	servers map[string]*server
	closed  atomic.Bool
}

func newManager(cfg *parsedConfig, log hclog.Logger) *manager {
	m := &manager{cfg: cfg, log: log, red: newRedactor(cfg.secrets()), servers: map[string]*server{}}
	for _, name := range cfg.Names {
		m.servers[name] = &server{m: m, name: name, cfg: cfg.Servers[name]}
	}
	return m
}

// server is one MCP server's client. A session is started on first use and
// again after the previous one ended (the server exited or the connection
// broke), so a crashed server is restarted by the next call.
type server struct {
	m    *manager
	name string
	cfg  ServerConfig

	mu      sync.Mutex
	sess    *mcp.ClientSession
	done    chan struct{} // closed when sess has ended
	gen     uint64
	stderr  *tailBuffer
	tools   []bridge.Tool     // mapped names, sorted
	orig    map[string]string // mapped name → the server's name
	lastErr string            // redacted: why the last session failed or ended
	stale   atomic.Bool       // tools/list_changed arrived since the last listing
}

// errClosed: the plugin is shutting down.
var errClosed = errors.New("the bridge is shutting down")

// connectLocked starts a session. s.mu is held.
func (s *server) connectLocked(ctx context.Context) error {
	if s.m.closed.Load() {
		return errClosed
	}
	s.gen++
	gen := s.gen
	client := mcp.NewClient(&mcp.Implementation{Name: "mcp-forge-bridge", Version: Info.Version}, &mcp.ClientOptions{
		// No roots: a bridged server sees no host paths from us.
		Capabilities: &mcp.ClientCapabilities{},
		// Only a flag: the handler runs on the session's reader, which a
		// blocking lock here could stall while a listing waits for it.
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { s.stale.Store(true) },
	})
	var t mcp.Transport
	if s.cfg.Command != "" {
		cmd, tail, err := s.command()
		if err != nil {
			return err
		}
		s.stderr = tail
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}
	} else {
		t = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, MaxRetries: 1,
			HTTPClient: &http.Client{Transport: headerTransport{headers: s.cfg.Headers, base: http.DefaultTransport}}}
	}
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("could not start: %s", s.m.red.String(err.Error())+s.stderrNote())
	}
	s.sess, s.done = cs, make(chan struct{})
	done := s.done
	go func() {
		err := cs.Wait()
		close(done)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.gen == gen && s.sess == cs {
			s.sess = nil
			reason := "the connection ended"
			if err != nil && !errors.Is(err, io.EOF) {
				reason = err.Error()
			}
			s.lastErr = s.m.red.String(reason) + s.stderrNote()
			s.m.log.Warn("MCP server ended; the next call starts it again", "server", s.name, "reason", s.lastErr)
		}
	}()
	s.stale.Store(true)
	return nil
}

// command builds a stdio server's process: exactly the env the config
// names, plus PATH and HOME when it names none; the binary is looked up on
// that PATH, not the plugin's.
func (s *server) command() (*exec.Cmd, *tailBuffer, error) {
	env := map[string]string{"PATH": defaultPath, "HOME": os.TempDir()}
	for k, v := range s.cfg.Env {
		env[k] = v
	}
	path := s.cfg.Command
	if !strings.Contains(path, "/") {
		found := ""
		for _, dir := range filepath.SplitList(env["PATH"]) {
			p := filepath.Join(dir, path)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				found = p
				break
			}
		}
		if found == "" {
			return nil, nil, fmt.Errorf("could not start: command %q is not on the server's PATH (%s): give its absolute path or set PATH in its env", s.cfg.Command, env["PATH"])
		}
		path = found
	}
	cmd := exec.Command(path, s.cfg.Args...)
	cmd.Env = make([]string, 0, len(env))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	sort.Strings(cmd.Env)
	cmd.Dir = os.TempDir()
	tail := &tailBuffer{max: 4 << 10}
	cmd.Stderr = tail
	// The server dies with the plugin even when the plugin is killed
	// (a clean exit closes every session first; see manager.Close).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, tail, nil
}

func (s *server) stderrNote() string {
	if s.stderr == nil {
		return ""
	}
	t := strings.TrimSpace(s.stderr.String())
	if t == "" {
		return ""
	}
	return "; its last stderr: " + s.m.red.String(t)
}

// session returns a live session, starting one if needed, with its tools
// listed afresh when they changed.
func (s *server) session(ctx context.Context) (*mcp.ClientSession, chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil {
		if err := s.connectLocked(ctx); err != nil {
			s.lastErr = err.Error()
			return nil, nil, err
		}
	}
	if s.stale.Swap(false) {
		if err := s.listLocked(ctx); err != nil {
			s.stale.Store(true)
			return nil, nil, err
		}
	}
	return s.sess, s.done, nil
}

// listLocked lists every page of the server's tools and maps their names.
func (s *server) listLocked(ctx context.Context) error {
	var raw []*mcp.Tool
	for t, err := range s.sess.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("listing tools: %s", s.m.red.String(err.Error()))
		}
		raw = append(raw, t)
	}
	names := make([]string, len(raw))
	for i, t := range raw {
		names[i] = t.Name
	}
	mapped := mapNames(names, "t_", nil)
	tools := make([]bridge.Tool, 0, len(raw))
	orig := make(map[string]string, len(raw))
	seen := map[string]bool{}
	for _, t := range raw {
		if seen[t.Name] {
			s.m.log.Warn("MCP server lists a tool twice; the first is kept", "server", s.name, "tool", t.Name)
			continue
		}
		seen[t.Name] = true
		// Descriptions and schemas reach the sandbox in generated code: they
		// pass the redactor too ("[redacted]" keeps JSON valid).
		bt := bridge.Tool{Server: s.name, Name: mapped[t.Name], Description: s.m.red.String(t.Description)}
		if bt.Name != t.Name {
			bt.OriginalName = t.Name
		}
		bt.InputSchema = json.RawMessage(s.m.red.JSON(schemaJSON(t.InputSchema, true)))
		if t.OutputSchema != nil {
			if o := schemaJSON(t.OutputSchema, false); o != nil {
				bt.OutputSchema = json.RawMessage(s.m.red.JSON(o))
			}
		}
		tools = append(tools, bt)
		orig[bt.Name] = t.Name
	}
	sort.Slice(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
	s.tools, s.orig = tools, orig
	return nil
}

// schemaJSON is a tool schema as a JSON object; a missing or non-object
// input schema becomes {"type": "object"} (MCP requires one).
func schemaJSON(v any, input bool) json.RawMessage {
	b, err := json.Marshal(v)
	var obj map[string]any
	if err != nil || json.Unmarshal(b, &obj) != nil || obj == nil {
		if input {
			return json.RawMessage(`{"type":"object"}`)
		}
		return nil
	}
	if input && obj["type"] == nil {
		obj["type"] = "object"
		b, _ = json.Marshal(obj)
	}
	return b
}

// listTools is the server's tools, starting it if needed.
func (s *server) listTools(ctx context.Context) ([]bridge.Tool, error) {
	if _, _, err := s.session(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bridge.Tool(nil), s.tools...), nil
}

// health is "ok" or why the server is not up.
func (s *server) health() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess != nil {
		return "ok"
	}
	if s.lastErr != "" {
		return s.lastErr
	}
	return "not started"
}

// dropSession ends sess if it is still the current one (after it failed).
func (s *server) dropSession(sess *mcp.ClientSession, reason string) {
	s.mu.Lock()
	if s.sess == sess {
		s.sess = nil
		s.lastErr = reason
	} else {
		sess = nil
	}
	s.mu.Unlock()
	if sess != nil {
		_ = sess.Close()
	}
}

// Close ends every session: stdin closed, then SIGTERM, then SIGKILL.
func (m *manager) Close() {
	m.closed.Store(true)
	var wg sync.WaitGroup
	for _, s := range m.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.mu.Lock()
			sess := s.sess
			s.sess = nil
			s.mu.Unlock()
			if sess != nil {
				_ = sess.Close()
			}
		}()
	}
	wg.Wait()
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// tailBuffer keeps the last max bytes written (a server's stderr).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
