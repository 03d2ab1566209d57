package hostsvc

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/runtimetest"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/seccomp"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

const image = "mcp-forge/python:3.11"

// rec is an audit log in memory; failing makes it a log that cannot be
// written (audit.Writer), as a full disk would.
type rec struct {
	mu      sync.Mutex
	e       []audit.Entry
	failing error
}

func (r *rec) Record(e audit.Entry) { r.mu.Lock(); r.e = append(r.e, e); r.mu.Unlock() }

func (r *rec) Write(e audit.Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing != nil {
		return r.failing
	}
	r.e = append(r.e, e)
	return nil
}

func (r *rec) Check() error { r.mu.Lock(); defer r.mu.Unlock(); return r.failing }

func (r *rec) fail(err error) { r.mu.Lock(); r.failing = err; r.mu.Unlock() }

// find returns the entries of event, in order.
func (r *rec) find(event string) []audit.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Entry
	for _, e := range r.e {
		if e.Event == event {
			out = append(out, e)
		}
	}
	return out
}

// rig is the core's host services over the fake runtime: the real sandbox
// manager and policy, workspaces in a temporary directory.
type rig struct {
	base string
	rt   *runtimetest.Runtime
	m    *sandbox.Manager
	ws   *workspace.Manager
	rec  *rec
	h    *Host // plugin "python"
}

// newRig builds a rig; quota > 0 turns the workspace quota on (without a
// filesystem per workspace: watched by walking, as on a plain host).
func newRig(t *testing.T, quota int64) *rig {
	t.Helper()
	// Short: a tool grant's socket lives under the base (107-byte limit).
	base, err := os.MkdirTemp("", "hs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	profile, err := seccomp.Install(base)
	if err != nil {
		t.Fatal(err)
	}
	pol := policy.New(policy.Settings{
		AllowedImages: []string{"mcp-forge/python:*"}, User: "1000:1000", UserNS: "private", UserNSStart: 2147483647,
		BasePath: base, TmpfsMax: 1 << 20, Seccomp: profile, SeccompGVisor: profile, ToolGrantTarget: bridge.SandboxDir,
		Defaults: runtime.Limits{MemoryBytes: 64 << 20, CPUQuota: 50000, Pids: 10, NoFile: 100, Timeout: time.Minute},
		Max:      runtime.Limits{MemoryBytes: 256 << 20, CPUQuota: 100000, Pids: 100, NoFile: 100, Timeout: 10 * time.Minute},
	}, nil)
	r := &rig{base: base, rec: &rec{}, rt: runtimetest.New(runtime.ImageInfo{Names: []string{image}})}
	r.m = sandbox.New(r.rt, pol, r.rec, hclog.NewNullLogger(), sandbox.Options{Instance: "t"})
	t.Cleanup(func() { r.m.Shutdown(context.Background()) })
	r.ws = workspace.New(base, r.m.ServerTag(), quota, nil)
	r.h = r.plugin("python")
	return r
}

// plugin is the host services of another plugin over the same sandbox.
func (r *rig) plugin(owner string) *Host { return New(owner, r.m, r.rec, r.ws) }

func intent(cmd ...string) host.Intent {
	return host.Intent{Image: image, Command: cmd, WorkDir: "/forge/work", Mounts: []host.Mount{{Subdir: "work", Target: "/forge/work"}}}
}

// start creates and starts a container of r.h.
func (r *rig) start(t *testing.T, in host.Intent) host.Container {
	t.Helper()
	c, err := r.h.Create(context.Background(), in)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := r.h.Start(context.Background(), c.ID); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return c
}

func kindOf(err error) host.Kind {
	var he *host.Error
	if errors.As(err, &he) {
		return he.Kind
	}
	if err != nil {
		return "(not a host.Error)"
	}
	return ""
}

// entries lists the rig's workspace directories.
func (r *rig) entries(t *testing.T) []string {
	t.Helper()
	list, _ := os.ReadDir(r.ws.Root()) // none, or not a directory: nothing left
	var names []string
	for _, e := range list {
		names = append(names, e.Name())
	}
	return names
}
