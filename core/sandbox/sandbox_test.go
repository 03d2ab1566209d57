package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/seccomp"
)

// fakeRuntime records calls; it stands in for Podman in logic tests only.
type fakeRuntime struct {
	runtime.Runtime
	info    runtime.Info
	created int
	exit    int
	waitErr error
	image   *runtime.ImageInfo // what every name resolves to; default: the name itself, ID "img1"
	spec    runtime.Spec       // the last spec created
}

func (f *fakeRuntime) Info(context.Context) (runtime.Info, error) { return f.info, nil }
func (f *fakeRuntime) Create(_ context.Context, s runtime.Spec) (string, error) {
	f.created++
	f.spec = s
	return "c" + strings.Repeat("0", 11), nil
}
func (f *fakeRuntime) Image(_ context.Context, name string) (runtime.ImageInfo, bool, error) {
	if f.image != nil {
		return *f.image, true, nil
	}
	return runtime.ImageInfo{ID: "img1", Names: []string{"localhost/" + name}}, true, nil
}
func (f *fakeRuntime) Wait(context.Context, string, time.Duration) (int, error) {
	return f.exit, f.waitErr
}
func (f *fakeRuntime) Remove(context.Context, string) error { return nil }

type recorder struct{ entries []audit.Entry }

func (r *recorder) Record(e audit.Entry) { r.entries = append(r.entries, e) }

func newTestManager(t *testing.T, rt runtime.Runtime, enforce bool) (*Manager, *recorder) {
	profile, err := seccomp.Install(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pol := policy.New(policy.Settings{
		AllowedImages: []string{"mcp-forge/python:*"}, User: "1000:1000", UserNS: "private", UserNSStart: 2147483647,
		BasePath: "/b", TmpfsMax: 1 << 20, Seccomp: profile,
		Defaults: runtime.Limits{MemoryBytes: 64 << 20, CPUQuota: 50000, Pids: 10, NoFile: 100, Timeout: time.Second},
		Max:      runtime.Limits{MemoryBytes: 64 << 20, CPUQuota: 50000, Pids: 10, NoFile: 100, Timeout: time.Minute},
	}, nil)
	rec := &recorder{}
	return New(rt, pol, rec, hclog.NewNullLogger(), Options{Instance: "t", EnforceResourceLimits: enforce}), rec
}

func intent(m *Manager) policy.Intent {
	return policy.Intent{Image: "mcp-forge/python:3.11", Limits: m.Policy().Settings().Defaults, Owner: "p"}
}

// Rootless Podman on cgroups v1 cannot enforce limits: refuse, unless the
// operator turned enforcement off.
func TestUnenforceableLimitsFailClosed(t *testing.T) {
	rt := &fakeRuntime{info: runtime.Info{Rootless: true, CgroupsV2: false}}
	m, _ := newTestManager(t, rt, true)
	_, err := m.Create(context.Background(), intent(m))
	if err == nil || !strings.Contains(err.Error(), "cannot be enforced") || rt.created != 0 {
		t.Fatalf("want refusal before create, got %v (created %d)", err, rt.created)
	}
	m, _ = newTestManager(t, rt, false)
	if _, err := m.Create(context.Background(), intent(m)); err != nil || rt.created != 1 {
		t.Fatalf("enforcement off: %v", err)
	}
	rt2 := &fakeRuntime{info: runtime.Info{Rootless: true, CgroupsV2: true}}
	m, _ = newTestManager(t, rt2, true)
	if _, err := m.Create(context.Background(), intent(m)); err != nil {
		t.Fatalf("rootless on cgroups v2 enforces limits: %v", err)
	}
}

func TestWaitMapsOOMAndTimeout(t *testing.T) {
	rt := &fakeRuntime{exit: 137}
	m, _ := newTestManager(t, rt, true)
	id, _ := m.Create(context.Background(), intent(m))
	var oom *OOMError
	if _, err := m.Wait(context.Background(), "p", id, 0); !errors.As(err, &oom) || !strings.Contains(err.Error(), "64m") {
		t.Fatalf("want OOM naming 64m, got %v", err)
	}
	rt.exit, rt.waitErr = -1, runtime.ErrTimeout
	var te *TimeoutError
	if _, err := m.Wait(context.Background(), "p", id, 0); !errors.As(err, &te) || te.Limit != time.Second {
		t.Fatalf("want timeout at the container's 1s limit, got %v", err)
	}
}

func TestOwnershipAudited(t *testing.T) {
	rt := &fakeRuntime{}
	m, rec := newTestManager(t, rt, true)
	id, _ := m.Create(context.Background(), intent(m))
	if err := m.Remove(context.Background(), "other-plugin", id); err == nil {
		t.Fatal("another plugin removed the container")
	}
	last := rec.entries[len(rec.entries)-1]
	if last.Event != audit.SecurityViolation || last.Severity != audit.Critical {
		t.Fatalf("not audited as critical: %+v", last)
	}
	if err := m.Remove(context.Background(), "p", id); err != nil {
		t.Fatal(err)
	}
}

type listingRuntime struct {
	fakeRuntime
	list    []runtime.Container
	removed []string
}

func (l *listingRuntime) List(context.Context, map[string]string) ([]runtime.Container, error) {
	return l.list, nil
}
func (l *listingRuntime) Remove(_ context.Context, id string) error {
	l.removed = append(l.removed, id)
	return nil
}

// The stale-container sweep never touches a long-lived session's container.
func TestSweepSparesSessions(t *testing.T) {
	rt := &listingRuntime{}
	m, _ := newTestManager(t, rt, true)
	old := time.Now().Add(-time.Hour)
	rt.list = []runtime.Container{
		{ID: "oneshot", Created: old, Labels: map[string]string{LabelServer: m.server, runtime.LabelOneShot: "true"}},
		{ID: "session", Created: old, Labels: map[string]string{LabelServer: m.server}},
		{ID: "young", Created: time.Now(), Labels: map[string]string{LabelServer: m.server, runtime.LabelOneShot: "true"}},
		{ID: "other-server", Created: old, Labels: map[string]string{LabelServer: "1-1", runtime.LabelOneShot: "true"}},
	}
	for _, c := range rt.list {
		m.tracked.Add(c.ID, "p")
	}
	if n, err := m.RemoveOlderThan(context.Background(), 10*time.Minute); err != nil || n != 1 || len(rt.removed) != 1 || rt.removed[0] != "oneshot" {
		t.Fatalf("removed %v (%d, %v)", rt.removed, n, err)
	}
}
