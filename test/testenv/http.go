package testenv

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/tenant"
)

// HTTPServer is a real `mcp-forge serve --http 127.0.0.1:0` subprocess.
type HTTPServer struct {
	URL      string // the MCP endpoint
	Addr     string // host:port of the MCP listener
	Admin    string // host:port of /healthz, /readyz, /metrics
	Cmd      *exec.Cmd
	Base     string
	AuditLog string
	LogFile  string
	done     chan error
}

// TenantKeys makes one API key per name and returns the [tenants] TOML
// (hashes only, as an operator writes it) and the keys.
func TenantKeys(t testing.TB, names ...string) (string, map[string]string) {
	t.Helper()
	var b strings.Builder
	keys := map[string]string{}
	for _, n := range names {
		k, h, err := tenant.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		keys[n] = k
		b.WriteString("[tenants." + n + "]\napi_key_sha256 = [\"" + h + "\"]\n")
	}
	return b.String(), keys
}

var listening = regexp.MustCompile(`listening on (\S+) \(admin (\S+)\)`)

// StartHTTP writes a config (extra TOML), starts the server on a free
// loopback port and waits until it listens.
func StartHTTP(t testing.TB, extra string, env ...string) *HTTPServer {
	t.Helper()
	Require(t)
	return StartHTTPAt(t, BaseDir(t), extra, env...)
}

// StartHTTPAt starts the server on a given base path: a second server on a
// stopped one's base path is that server restarted.
func StartHTTPAt(t testing.TB, base, extra string, env ...string) *HTTPServer {
	t.Helper()
	Require(t)
	bin := Binary(t)
	cfg := filepath.Join(base, "forge.toml")
	if err := os.WriteFile(cfg, []byte(Lean(t, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &HTTPServer{Base: base, AuditLog: filepath.Join(base, "audit.log"), done: make(chan error, 1)}
	logf, err := os.CreateTemp(base, "server-*.log") // a restarted server's log apart from the first's
	if err != nil {
		t.Fatal(err)
	}
	s.LogFile = logf.Name()
	s.Cmd = exec.Command(bin, "serve", "--http", "127.0.0.1:0", "--config", cfg)
	s.Cmd.Env = append(append(append(os.Environ(), "FORGE_VOLUMES_BASE_PATH="+base, "FORGE_SECURITY_AUDIT_LOG="+s.AuditLog), runtimeEnv(t)...), env...)
	s.Cmd.Stderr, s.Cmd.Stdout = logf, logf
	if err := s.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.Cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		s.Stop(t)
		if t.Failed() {
			log, _ := os.ReadFile(s.LogFile)
			t.Logf("server log:\n%s", tail(string(log), 60))
		}
	})
	WaitFor(t, "the server to listen", 90*time.Second, func() bool {
		b, _ := os.ReadFile(s.LogFile)
		if m := listening.FindStringSubmatch(string(b)); m != nil {
			s.Addr, s.Admin = m[1], m[2]
			return true
		}
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("server exited before listening: %v\n%s", err, b)
		default:
		}
		return false
	})
	s.URL = "http://" + s.Addr + "/mcp"
	return s
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Stop sends SIGTERM and waits for the exit; it returns the exit error.
func (s *HTTPServer) Stop(t testing.TB) error {
	if s.Cmd.ProcessState != nil {
		return nil
	}
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		return err
	case <-time.After(2 * time.Minute):
		_ = s.Cmd.Process.Kill()
		t.Errorf("server did not exit within 2 minutes of SIGTERM")
		return <-s.done
	}
}

// Exited reports the exit once the process ended.
func (s *HTTPServer) Exited(timeout time.Duration) (error, bool) {
	select {
	case err := <-s.done:
		s.done <- err
		return err, true
	case <-time.After(timeout):
		return nil, false
	}
}

// Bearer adds an Authorization header to every request.
type Bearer struct {
	Key  string
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.Key != "" {
		r.Header.Set("Authorization", "Bearer "+b.Key)
	}
	base := b.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// Connect is a go-sdk client over streamable HTTP with key as its bearer
// token ("" for none).
func (s *HTTPServer) Connect(t testing.TB, key string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: &http.Client{Transport: Bearer{Key: key}}, DisableStandaloneSSE: true, MaxRetries: -1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "forge-http-e2e", Version: "1"}, opts).Connect(ctx, tr, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

// MustConnect is Connect that fails the test on error.
func (s *HTTPServer) MustConnect(t testing.TB, key string) *mcp.ClientSession {
	t.Helper()
	cs, err := s.Connect(t, key, nil)
	if err != nil {
		t.Fatalf("connect over HTTP: %v", err)
	}
	return cs
}

// Get fetches a path of the admin listener with an optional key.
func (s *HTTPServer) Get(t testing.TB, path, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.Admin+path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
