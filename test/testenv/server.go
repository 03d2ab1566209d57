package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// RepoRoot is the repository root (where bin/ is built).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Binary is the built server; tests fail (not skip) without it under
// FORGE_E2E, and skip outside it (they would start servers).
func Binary(t testing.TB) string {
	t.Helper()
	skipUnlessE2E(t)
	p := filepath.Join(RepoRoot(), "bin", "mcp-forge")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run `make build` first (make test does)", p)
	}
	return p
}

// Server is a real `mcp-forge serve` subprocess with a go-sdk client session.
type Server struct {
	Session  *mcp.ClientSession
	Cmd      *exec.Cmd
	Base     string
	AuditLog string
	Config   string
}

// StartServer writes a config (extra TOML appended to the test's base
// settings), starts `mcp-forge serve` and connects a go-sdk client.
func StartServer(t testing.TB, extra string) *Server {
	t.Helper()
	Require(t)
	return StartServerAt(t, BaseDir(t), extra)
}

// StartServerAt starts a server on a given base path (servers may share one).
func StartServerAt(t testing.TB, base, extra string) *Server {
	t.Helper()
	Require(t)
	return StartServerBinary(t, Binary(t), base, extra)
}

// StartServerBinary starts the server binary bin (with the plugins beside
// it), another build than this tree's: a baseline measured in the same run.
func StartServerBinary(t testing.TB, bin, base, extra string) *Server {
	t.Helper()
	Require(t)
	return startServer(t, bin, base, extra, runtimeEnv(t))
}

// StartServerEnv is StartServer with environment overrides after the
// runtime's own (FORGE_* settings that beat both the test's TOML and the
// cluster's, such as a seccomp profile of KubeConfigEnv's forge.toml).
func StartServerEnv(t testing.TB, extra string, env ...string) *Server {
	t.Helper()
	Require(t)
	return startServer(t, Binary(t), BaseDir(t), extra, append(runtimeEnv(t), env...))
}

// StartServerClient is StartServer with a client of the given options (a
// progress handler, say).
func StartServerClient(t testing.TB, extra string, opts *mcp.ClientOptions) *Server {
	t.Helper()
	Require(t)
	return startServerClient(t, Binary(t), BaseDir(t), extra, runtimeEnv(t), opts)
}

// StartServerOn starts a server whose sandboxes run on Kubernetes (kube,
// which needs KubeConfigEnv) or Podman, whatever this run's default: the
// benchmarks measure both in one run.
func StartServerOn(t testing.TB, kube bool, extra string) *Server {
	t.Helper()
	skipUnlessE2E(t)
	var env []string
	if kube {
		if !Kube() {
			t.Skip("the Kubernetes column needs " + KubeConfigEnv + " (`make kube-up` prints the config)")
		}
		env = runtimeEnv(t)
	}
	return startServer(t, Binary(t), BaseDir(t), extra, env)
}

func startServer(t testing.TB, bin, base, extra string, rtEnv []string) *Server {
	t.Helper()
	return startServerClient(t, bin, base, extra, rtEnv, nil)
}

func startServerClient(t testing.TB, bin, base, extra string, rtEnv []string, opts *mcp.ClientOptions) *Server {
	t.Helper()
	cfg, err := os.CreateTemp(base, "forge-*.toml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Close()
	if err := os.WriteFile(cfg.Name(), []byte(Lean(t, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg.Name(), "serve")
	// The test's own base path and audit log come from the environment, so
	// extra may open any table.
	cmd.Env = append(append(os.Environ(), "FORGE_VOLUMES_BASE_PATH="+base, "FORGE_SECURITY_AUDIT_LOG="+filepath.Join(base, "audit.log")), rtEnv...)
	logName := strings.TrimSuffix(cfg.Name(), ".toml") + ".log"
	logf, _ := os.Create(logName)
	cmd.Stderr = logf
	client := mcp.NewClient(&mcp.Implementation{Name: "forge-e2e", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		log, _ := os.ReadFile(logName)
		t.Fatalf("connect to mcp-forge serve: %v\nserver log:\n%s", err, log)
	}
	s := &Server{Session: sess, Cmd: cmd, Base: base, AuditLog: filepath.Join(base, "audit.log"), Config: cfg.Name()}
	t.Cleanup(func() {
		sess.Close()
		logf.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logName)
			t.Logf("server log:\n%s", log)
		}
	})
	return s
}

// Call invokes a tool and decodes its structured content into out.
func (s *Server) Call(t testing.TB, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	return Call(t, s.Session, tool, args, out)
}

// Call invokes a tool on any client session and decodes its structured content.
func Call(t testing.TB, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", tool, err)
	}
	if out != nil && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("decode structured content %s: %v", b, err)
		}
	}
	return res
}

// Text joins a result's text content.
func Text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// ChildPids lists the direct children of pid.
func ChildPids(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var child int
		if _, err := fmt.Sscan(e.Name(), &child); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		var ppid int
		if len(f) > 1 {
			fmt.Sscan(f[1], &ppid)
		}
		if ppid == pid {
			out = append(out, child)
		}
	}
	return out
}
