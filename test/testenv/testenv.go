// Package testenv gives end-to-end tests a real Podman-backed core. Under
// FORGE_E2E=1 (what `make test` sets) a missing Podman is a failure, not a
// skip, so CI can never pass without running these tests.
package testenv

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes"
	"github.com/mcp-forge/mcp-forge/core/runtime/podman"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/seccomp"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
)

// Require skips outside FORGE_E2E=1 and fails when Podman is unreachable.
func Require(t testing.TB) {
	t.Helper()
	skipUnlessE2E(t)
	// Generous: a busy 2-core machine can take seconds to answer.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if Kube() {
		requireKube(ctx, t)
		return
	}
	if _, err := podman.New("").Info(ctx); err != nil {
		t.Fatalf("Podman is required for end-to-end tests: %v", err)
	}
}

// Core is a sandbox manager over real Podman with a private base path and
// audit log.
type Core struct {
	Config   config.Config
	Manager  *sandbox.Manager
	Audit    *audit.Logger
	AuditLog string
	Base     string
}

// skipUnlessE2E keeps the unit tier (make test-unit) off the host: what
// needs a base path, the server binary or Podman is end-to-end.
func skipUnlessE2E(t testing.TB) {
	t.Helper()
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("end-to-end test: set FORGE_E2E=1 (make test does)")
	}
}

// BaseDir returns a short base path (unix socket paths are limited to 107
// bytes, and t.TempDir paths are long). Outside FORGE_E2E=1 it skips: a test
// that takes one goes on to mount, start servers or create containers.
func BaseDir(t testing.TB) string {
	t.Helper()
	Require(t) // a base path is for servers and containers: the end-to-end tier only
	d, err := os.MkdirTemp("/var/tmp", "forge-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Runs after the cleanups of the servers started on d. The watchdog
		// of one killed at the end (the SDK kills a server slow to stop)
		// cleans up after it: give it the time its sweep takes.
		// A watchdog still sweeping writes its audit line into d: removed
		// before it ends, d would be made again and left behind.
		for deadline := time.Now().Add(30 * time.Second); (len(Leftovers(d)) > 0 || len(watchdogsOf(d)) > 0) && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		checkLeftovers(t, d)
		os.RemoveAll(d)
	})
	return d
}

// NewCore builds a core over real Podman; mutate adjusts the configuration.
func NewCore(t testing.TB, mutate func(*config.Config), opts ...func(*sandbox.Options)) *Core {
	t.Helper()
	Require(t)
	base := BaseDir(t)
	cfg := config.Default()
	cfg.Volumes.BasePath = base
	cfg.Security.AuditLog = filepath.Join(base, "audit.log")
	if Kube() {
		applyKube(t, &cfg)
	}
	if GVisor() {
		cfg.Security.Isolation = runtime.IsolationGVisor
	}
	if mutate != nil {
		mutate(&cfg)
	}
	if errs := config.Validate(cfg); len(errs) > 0 {
		t.Fatal(errs)
	}
	al, err := audit.Open(cfg.Security.AuditLog, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	if _, err := seccomp.Install(cfg.Volumes.BasePath); err != nil {
		t.Fatal(err)
	}
	ps := policy.FromConfig(cfg)
	ps.ToolGrantTarget = bridge.SandboxDir
	pol := policy.New(ps, filepath.EvalSymlinks)
	o := sandbox.Options{Instance: "test-" + filepath.Base(base)}
	for _, f := range opts {
		f(&o)
	}
	// The agent make build leaves in bin/, as the server finds it beside its plugins.
	pc := podman.New(cfg.Server.PodmanSocket).WithAgent(filepath.Join(RepoRoot(), "bin", agent.Binary)).WithGVisor(cfg.Security.Runsc, cfg.Volumes.BasePath, "/run/mcp-forge/runsc", "none")
	var rt sandbox.Engine = pc
	o.Inside, o.Snapshots = pc, pc // a gVisor sandbox's sockets, from inside; its snapshots
	if Kube() {
		var k *kubernetes.Client
		rt, k = kubeEngine(t, cfg)
		o.Remote = k
	}
	m := sandbox.New(rt, pol, al, hclog.NewNullLogger(), o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return &Core{Config: cfg, Manager: m, Audit: al, AuditLog: cfg.Security.AuditLog, Base: base}
}

// Parallel runs t beside another end-to-end test (go test's -parallel, the
// cores of the machine: two on CI) once the package's serial tests are
// done. For a long test that mostly waits on its sandboxes and whose
// servers share nothing with another test's (each has its own base path,
// and finds its containers by its instance or server label): a sequential
// test/e2e left one of CI's two cores idle for about half an hour. Tests
// that time the server, fill warm pools, count host processes or restart
// Podman stay serial. The gVisor and Kubernetes legs run their tests
// serially: they already run side by side (scripts/test.sh).
func Parallel(t *testing.T) {
	t.Helper()
	if GVisor() || Kube() {
		return
	}
	t.Parallel()
}

// watchdogsOf lists the /proc cmdline files of watchdogs of servers on base
// path dir (`mcp-forge --config dir/forge-*.toml watchdog ID`).
func watchdogsOf(dir string) []string {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte("\x00"+dir+"/")) && bytes.Contains(b, []byte("\x00watchdog\x00")) {
			out = append(out, p)
		}
	}
	return out
}
