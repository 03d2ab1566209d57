package forge

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/runtimetest"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

const image = "mcp-forge/python:3.11"

// fakeRuntime is the scripted runtime with the image calls custom
// environments make (none here builds one).
type fakeRuntime struct{ *runtimetest.Runtime }

func (fakeRuntime) BuildLayer(context.Context, runtime.LayerBuild) (string, error) {
	return "", errors.New("no builds here")
}
func (fakeRuntime) Tag(context.Context, string, string) error { return errors.New("no builds here") }
func (fakeRuntime) Images(context.Context, map[string]string) ([]runtime.ImageInfo, error) {
	return nil, nil
}
func (fakeRuntime) RemoveImage(context.Context, string) error { return nil }

// fakeQuota records what it provisioned, released and whether it was
// closed.
type fakeQuota struct {
	mu          sync.Mutex
	provisioned []string
	released    []string
	closed      bool
	notEnforced bool // a host that cannot bound workspaces
}

func (q *fakeQuota) Provision(path string, _ int64, _, _ int) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.provisioned = append(q.provisioned, path)
	return os.MkdirAll(path, 0o700)
}

func (q *fakeQuota) Release(path string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.released = append(q.released, path)
	return nil
}

func (q *fakeQuota) Enforced() bool      { return !q.notEnforced }
func (q *fakeQuota) Sweep() (int, error) { return 0, nil }
func (q *fakeQuota) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	return nil
}

type noWatchdog struct{}

func (noWatchdog) Stop(time.Duration) error { return nil }

// testbed is a configuration on a fresh base path with parts that record
// what they were asked.
type testbed struct {
	cfg   config.Config
	rt    *runtimetest.Runtime
	quota *fakeQuota
	audit *audit.Logger // the log New opened
	parts parts
}

func newTestbed(t *testing.T) *testbed {
	t.Helper()
	base := t.TempDir()
	cfg := config.Default()
	cfg.Volumes.BasePath = base
	cfg.Security.AuditLog = filepath.Join(base, "audit.log")
	cfg.Server.PluginDir = t.TempDir() // no plugins
	cfg.EnvironmentBuilder.Enabled = false
	tb := &testbed{cfg: cfg, rt: runtimetest.New(runtime.ImageInfo{Names: []string{image}}), quota: &fakeQuota{}}
	tb.parts = parts{
		runtime: func(config.Config, hclog.Logger) (Runtime, error) { return fakeRuntime{tb.rt}, nil },
		quota:   func(config.Config, hclog.Logger) (quota, error) { return tb.quota, nil },
		audit: func(cfg config.Config) (*audit.Logger, error) {
			al, err := machine.audit(cfg)
			tb.audit = al
			return al, err
		},
		loadPlugins: machine.loadPlugins,
		watchdog:    func(string, hclog.Logger) (watchdogHandle, error) { return noWatchdog{}, nil },
		inspect:     machine.inspect,
		// As serve builds it, watchdog first (TestLifetimeBoundNeedsTheWatchdog
		// builds one without).
		bound: true,
	}
	return tb
}

// warmPool is a plugin start that does what a warm pool does: a plugin
// creates a container, with its workspace, through its host services.
func (tb *testbed) warmPool(t *testing.T) {
	tb.parts.loadPlugins = func(ctx context.Context, m *plugins.Manager, hostFor plugins.HostFactory) []error {
		c, err := hostFor("warm").Sandbox().Create(ctx, host.Intent{Image: image, Command: []string{"sleep", "60"}, SessionID: "pool-1",
			Mounts: []host.Mount{{Target: "/work"}}, WorkDir: "/work"})
		if err != nil {
			t.Errorf("the warm pool could not create its container: %v", err)
		} else if len(tb.rt.Live()) != 1 {
			t.Errorf("container %s: live containers %v", c.ID, tb.rt.Live())
		}
		return m.LoadAll(ctx)
	}
}

// released checks that everything New held is released: the containers,
// the workspaces (through the quota), the quota state and the audit log.
func (tb *testbed) released(t *testing.T) {
	t.Helper()
	if live := tb.rt.Live(); len(live) != 0 {
		t.Errorf("containers left: %v", live)
	}
	tb.quota.mu.Lock()
	provisioned, released, closed := slices.Clone(tb.quota.provisioned), slices.Clone(tb.quota.released), tb.quota.closed
	tb.quota.mu.Unlock()
	slices.Sort(provisioned)
	slices.Sort(released)
	if d := cmp.Diff(provisioned, released); d != "" {
		t.Errorf("workspaces provisioned (-) but not released (+):\n%s", d)
	}
	if !closed {
		t.Error("the quota state was not closed")
	}
	if tb.audit == nil {
		t.Fatal("no audit log was opened")
	}
	if err := tb.audit.Write(audit.Entry{Event: "test.after_close"}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("the audit log is still open (write: %v)", err)
	}
}

// A start that fails late (the routing does not fit the plugins) releases
// every part the earlier steps took, as Close would: the warm pool's
// container and workspace, the quota state, the audit log.
func TestFailedStartReleasesEverything(t *testing.T) {
	t.Parallel()
	tb := newTestbed(t)
	tb.warmPool(t)
	tb.cfg.Execution.DefaultBackend = map[string]string{"python": "missing"}
	f, err := build(context.Background(), tb.cfg, hclog.NewNullLogger(), tb.parts)
	if err == nil || !strings.Contains(err.Error(), `execution.default_backend.python = "missing": no such plugin`) {
		t.Fatalf("build = %v, %v; want the routing error", f, err)
	}
	if len(tb.quota.provisioned) != 1 {
		t.Fatalf("the warm pool provisioned %v: the test would prove nothing", tb.quota.provisioned)
	}
	tb.released(t)
}

// Each early step that fails releases the steps before it.
func TestEarlyFailuresReleaseWhatWasTaken(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		spoil func(*testbed)
		want  string
		audit bool // the audit log was opened (and must be closed)
	}{
		{"audit log", func(tb *testbed) { tb.cfg.Security.AuditLog = filepath.Join(tb.cfg.Volumes.BasePath, "no", "\x00") }, "security.audit_log", false},
		{"quota", func(tb *testbed) {
			tb.parts.quota = func(config.Config, hclog.Logger) (quota, error) { return nil, errors.New("no loop devices") }
		}, "volumes: no loop devices", true},
		{"base path", func(tb *testbed) {
			os.WriteFile(filepath.Join(tb.cfg.Volumes.BasePath, "sessions"), nil, 0o600) // a file where the directory goes
		}, "volumes.base_path", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tb := newTestbed(t)
			c.spoil(tb)
			_, err := build(context.Background(), tb.cfg, hclog.NewNullLogger(), tb.parts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("build: %v, want an error containing %q", err, c.want)
			}
			if c.audit {
				if err := tb.audit.Write(audit.Entry{Event: "x"}); err == nil {
					t.Error("the audit log is still open")
				}
			}
		})
	}
}

// A core that started and is closed releases the same, and Close twice is
// harmless.
func TestCloseReleasesEverything(t *testing.T) {
	t.Parallel()
	tb := newTestbed(t)
	tb.warmPool(t)
	f, err := build(context.Background(), tb.cfg, hclog.NewNullLogger(), tb.parts)
	if err != nil {
		t.Fatal(err)
	}
	if f.Tools != nil || f.Environments != nil {
		t.Errorf("tools %v, environments %v without a bridge or a builder", f.Tools, f.Environments)
	}
	f.Close()
	tb.released(t)
	f.Close()
}

// The undo stack runs last first, once, and a failing step does not stop
// the others.
func TestUndoStackOrder(t *testing.T) {
	t.Parallel()
	var u undoStack
	var got []string
	for _, n := range []string{"a", "b", "c"} {
		u.push(n, func(context.Context) error {
			got = append(got, n)
			if n == "b" {
				return errors.New("b failed")
			}
			return nil
		})
	}
	u.run(hclog.NewNullLogger())
	u.run(hclog.NewNullLogger())
	if d := cmp.Diff([]string{"c", "b", "a"}, got); d != "" {
		t.Errorf("undo order (-want +got):\n%s", d)
	}
}

// The lifetime bound is the watchdog's: a core built without one (not by
// serve) lacks it, so its sandboxes are refused unless it is waived; the
// workspace quota is the quota's.
func TestHostGaps(t *testing.T) {
	for _, c := range []struct {
		name     string
		bound    bool
		enforced bool
		missing  []runtime.Guarantee
	}{
		{"served, quota", true, true, nil},
		{"no watchdog", false, true, []runtime.Guarantee{runtime.LifetimeBound}},
		{"no quota", true, false, []runtime.Guarantee{runtime.WorkspaceQuota}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := newTestbed(t)
			tb.parts.bound = c.bound
			tb.quota.notEnforced = !c.enforced
			f, err := build(context.Background(), tb.cfg, hclog.NewNullLogger(), tb.parts)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			rep, err := f.runtime.Guarantees(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var got []runtime.Guarantee
			for _, g := range rep.Gaps {
				got = append(got, g.Guarantee)
			}
			if !slices.Equal(got, c.missing) {
				t.Fatalf("gaps %v, want %v", got, c.missing)
			}
		})
	}
}
