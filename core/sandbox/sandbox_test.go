package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
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
	info      runtime.Info
	gaps      runtime.Report // what Guarantees answers
	created   int
	exit      int
	waitErr   error
	image     *runtime.ImageInfo // what every name resolves to; default: the name itself, ID "img1"
	spec      runtime.Spec       // the last spec created
	verdict   runtime.OOMVerdict
	createErr error
	removeErr error
	removes   int
	mu        sync.Mutex
}

func (f *fakeRuntime) Info(context.Context) (runtime.Info, error) { return f.info, nil }
func (f *fakeRuntime) Guarantees(context.Context) (runtime.Report, error) {
	return f.gaps, nil
}
func (f *fakeRuntime) Create(_ context.Context, s runtime.Spec) (string, error) {
	if f.createErr != nil {
		return "", f.createErr
	}
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
func (f *fakeRuntime) Start(context.Context, string) error { return nil }
func (f *fakeRuntime) OOMKilled(context.Context, string) (runtime.OOMVerdict, error) {
	return f.verdict, nil
}
func (f *fakeRuntime) Wait(context.Context, string, time.Duration) (int, error) {
	return f.exit, f.waitErr
}
func (f *fakeRuntime) Remove(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removes++
	return f.removeErr
}

func (f *fakeRuntime) setRemoveErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removeErr = err
}

type recorder struct {
	entries []audit.Entry
	mu      *sync.Mutex // set by tests that record from the retrier
}

func (r *recorder) Record(e audit.Entry) {
	if r.mu != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
	}
	r.entries = append(r.entries, e)
}

// newTestManager is a manager over rt whose policy waives waive.
func newTestManager(t *testing.T, rt runtime.Runtime, waive ...runtime.Guarantee) (*Manager, *recorder) {
	return newIsolatedManager(t, rt, "", waive...)
}

// newIsolatedManager is newTestManager under security.isolation iso.
func newIsolatedManager(t *testing.T, rt runtime.Runtime, iso string, waive ...runtime.Guarantee) (*Manager, *recorder) {
	dir := t.TempDir()
	profile, err := seccomp.Install(dir)
	if err != nil {
		t.Fatal(err)
	}
	pol := policy.New(policy.Settings{
		AllowedImages: []string{"mcp-forge/python:*"}, User: "1000:1000", UserNS: "private", UserNSStart: 2147483647,
		BasePath: "/b", TmpfsMax: 1 << 20, Seccomp: profile, SeccompGVisor: seccomp.GVisorPath(dir), Isolation: iso,
		Defaults: runtime.Limits{MemoryBytes: 64 << 20, CPUQuota: 50000, Pids: 10, NoFile: 100, Timeout: time.Second},
		Max:      runtime.Limits{MemoryBytes: 64 << 20, CPUQuota: 50000, Pids: 10, NoFile: 100, Timeout: time.Minute},
		Waived:   waivers(waive...),
	}, nil)
	rec := &recorder{}
	return New(rt, pol, rec, hclog.NewNullLogger(), Options{Instance: "t"}), rec
}

func intent(m *Manager) policy.Intent {
	return policy.Intent{Image: "mcp-forge/python:3.11", Limits: m.Policy().Settings().Defaults, Plugin: "p"}
}

func TestWaitMapsOOMAndTimeout(t *testing.T) {
	rt := &fakeRuntime{exit: 137, verdict: runtime.OOMKill}
	m, _ := newTestManager(t, rt)
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
	m, rec := newTestManager(t, rt)
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
	m, _ := newTestManager(t, rt)
	old := time.Now().Add(-time.Hour)
	rt.list = []runtime.Container{
		{ID: "oneshot", Created: old, Labels: map[string]string{runtime.LabelServer: m.server, runtime.LabelOneShot: "true"}},
		{ID: "session", Created: old, Labels: map[string]string{runtime.LabelServer: m.server}},
		{ID: "young", Created: time.Now(), Labels: map[string]string{runtime.LabelServer: m.server, runtime.LabelOneShot: "true"}},
		{ID: "other-server", Created: old, Labels: map[string]string{runtime.LabelServer: "1-1", runtime.LabelOneShot: "true"}},
	}
	for _, c := range rt.list {
		m.tracked.Add(c.ID, "p")
	}
	if n, err := m.RemoveOlderThan(context.Background(), 10*time.Minute); err != nil || n != 1 || len(rt.removed) != 1 || rt.removed[0] != "oneshot" {
		t.Fatalf("removed %v (%d, %v)", rt.removed, n, err)
	}
}

// Exit 137 is OOM only when the runtime says the kernel OOM-killed; a plain
// SIGKILL is named as such, with the memory limit as a possible cause only
// when the runtime cannot tell.
func TestExit137IsOOMOnlyWhenTheKernelSaysSo(t *testing.T) {
	for _, c := range []struct {
		verdict runtime.OOMVerdict
		oom     bool
		want    string
		absent  string
	}{
		{runtime.OOMKill, true, "out of memory", "signal 9"},
		{runtime.NoOOMKill, false, "killed by signal 9 (SIGKILL)", "memory"},
		{runtime.OOMUnknown, false, "killed by signal 9 (SIGKILL); if the code uses a lot of memory this may have been the 64m memory limit", "out of memory"},
	} {
		t.Run(c.verdict.String(), func(t *testing.T) {
			rt := &fakeRuntime{exit: 137, verdict: c.verdict}
			m, _ := newTestManager(t, rt)
			id, _ := m.Create(context.Background(), intent(m))
			_, err := m.Wait(context.Background(), "p", id, 0)
			var oom *OOMError
			var killed *KilledError
			if errors.As(err, &oom) != c.oom || !c.oom && !errors.As(err, &killed) {
				t.Fatalf("verdict %v: got %T %v", c.verdict, err, err)
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), c.absent) {
				t.Errorf("message %q", err)
			}
			if got := m.ExitError(id, 137).Error(); got != err.Error() {
				t.Errorf("ExitError %q differs from Wait's %q", got, err)
			}
			if got := m.ExitError(id, 3).Error(); !strings.Contains(got, "code 3") {
				t.Errorf("exit 3: %q", got)
			}
		})
	}
}

// A kernel backend removes a dead kernel's container, then closes the
// session and asks again: that is not a violation.
func TestRemovingAnAlreadyRemovedContainerIsNoViolation(t *testing.T) {
	rt := &fakeRuntime{}
	m, rec := newTestManager(t, rt)
	id, _ := m.Create(context.Background(), intent(m))
	if err := m.Remove(context.Background(), "p", id); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(context.Background(), "p", id); err != nil {
		t.Fatalf("second remove by the owner: %v", err)
	}
	if err := m.Remove(context.Background(), "", id); err != nil {
		t.Fatalf("second remove by the core: %v", err)
	}
	for _, e := range rec.entries {
		if e.Event == audit.SecurityViolation {
			t.Fatalf("false alarm: %+v", e)
		}
	}
	var gone *RemovedError
	if err := m.Signal(context.Background(), "p", id, "KILL"); !errors.As(err, &gone) {
		t.Errorf("signal to a removed container: %v", err)
	}
	// Another plugin is still refused, and that is still a violation.
	if err := m.Remove(context.Background(), "other", id); err == nil {
		t.Fatal("another plugin removed a removed container of p's")
	}
	if last := rec.entries[len(rec.entries)-1]; last.Event != audit.SecurityViolation || last.Severity != audit.Critical {
		t.Fatalf("not audited as a violation: %+v", last)
	}
	if rt.removes != 1 {
		t.Errorf("runtime asked to remove %d times", rt.removes)
	}
}

// A removal that fails (Podman down) is retried until it succeeds, and the
// success is audited.
func TestFailedRemovalIsRetried(t *testing.T) {
	rt := &fakeRuntime{removeErr: errors.New("cannot connect to Podman")}
	m, rec := newTestManager(t, rt)
	defer m.Shutdown(context.Background())
	var mu sync.Mutex
	rec.mu = &mu
	id, _ := m.Create(context.Background(), intent(m))
	if err := m.Remove(context.Background(), "p", id); err == nil {
		t.Fatal("want the runtime's error")
	}
	if p := m.Pending(); len(p) != 1 {
		t.Fatalf("pending %v", p)
	}
	rt.setRemoveErr(nil)
	deadline := time.Now().Add(5 * time.Second)
	for len(m.Pending()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if p := m.Pending(); len(p) != 0 {
		t.Fatalf("still pending after 5 s: %v", p)
	}
	mu.Lock()
	last := rec.entries[len(rec.entries)-1]
	mu.Unlock()
	if last.Event != audit.ContainerRemove || !last.Success || last.Details["retried"] != true {
		t.Fatalf("retried removal not audited: %+v", last)
	}
	if err := m.Remove(context.Background(), "p", id); err != nil {
		t.Fatalf("owner's later remove: %v", err)
	}
}

type failingLog struct {
	recorder
	err error
}

func (f *failingLog) Write(e audit.Entry) error {
	if f.err != nil {
		return f.err
	}
	f.Record(e)
	return nil
}
func (f *failingLog) Check() error { return nil } // a full disk shows only on a write

// If the audit log cannot be written, nothing is created or started: the
// container whose record failed is removed again.
func TestUnauditedExecutionRefused(t *testing.T) {
	rt := &fakeRuntime{}
	m, _ := newTestManager(t, rt)
	log := &failingLog{err: errors.New("no space left on device")}
	m.audit = log
	_, err := m.Create(context.Background(), intent(m))
	var ae *AuditError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "audit log cannot be written") || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("want an audit refusal, got %v", err)
	}
	if rt.created != 1 || rt.removes != 1 || len(m.tracked.IDs()) != 0 {
		t.Fatalf("created %d, removed %d, tracked %v", rt.created, rt.removes, m.tracked.IDs())
	}
	log.err = nil
	id, err := m.Create(context.Background(), intent(m))
	if err != nil {
		t.Fatalf("after the log recovered: %v", err)
	}
	log.err = errors.New("read-only file system")
	if err := m.Start(context.Background(), "p", id); !errors.As(err, &ae) || rt.removes != 2 {
		t.Fatalf("unaudited start: %v (removes %d)", err, rt.removes)
	}
}

// Environment names and values never reach the audit log, even when the
// runtime echoes them in an error; a NUL in a value is refused up front.
func TestEnvironmentNeverAudited(t *testing.T) {
	rt := &fakeRuntime{createErr: errors.New(`runc: "PLANTED_NAME_1=PLANTED-VALUE-1": OCI runtime error`)}
	m, rec := newTestManager(t, rt)
	in := intent(m)
	in.Env = map[string]string{"PLANTED_NAME_1": "PLANTED-VALUE-1"}
	if _, err := m.Create(context.Background(), in); err == nil {
		t.Fatal("want the runtime's error")
	}
	in.Env = map[string]string{"PLANTED_NAME_2": "PLANTED-VALUE-2\x00tail"}
	_, err := m.Create(context.Background(), in)
	var le *policy.LimitError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "NUL") || strings.Contains(err.Error(), "PLANTED-VALUE") {
		t.Fatalf("NUL value: %v", err)
	}
	for _, e := range rec.entries {
		b, _ := json.Marshal(e)
		if strings.Contains(string(b), "PLANTED") {
			t.Errorf("audit entry holds an environment name or value: %s", b)
		}
	}
	if rt.created != 0 {
		t.Errorf("created %d", rt.created)
	}
}

// slowCreate holds Create until released, like a Podman create under load.
type slowCreate struct {
	fakeRuntime
	entered, release chan struct{}
}

func (s *slowCreate) Create(ctx context.Context, sp runtime.Spec) (string, error) {
	close(s.entered)
	<-s.release
	id, err := s.fakeRuntime.Create(ctx, sp)
	if ctx.Err() != nil {
		return "", ctx.Err() // Podman made it; the cut request never says
	}
	return id, err
}

// A create under way when the server shuts down (a warm pool's refill) is
// waited for and its container removed; a create asked for afterwards is
// refused. Before, the final sweep ran past it and the container stayed.
func TestShutdownWaitsForCreatesUnderWay(t *testing.T) {
	rt := &slowCreate{entered: make(chan struct{}), release: make(chan struct{})}
	m, _ := newTestManager(t, rt)
	created := make(chan error, 1)
	go func() { _, err := m.Create(context.Background(), intent(m)); created <- err }()
	<-rt.entered
	shut := make(chan struct{})
	go func() { m.Shutdown(context.Background()); close(shut) }()
	select {
	case <-shut:
		t.Fatal("Shutdown returned while a create was under way")
	case <-time.After(50 * time.Millisecond):
	}
	close(rt.release)
	<-shut
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if rt.removes != 1 || len(m.tracked.IDs()) != 0 {
		t.Fatalf("the container created during shutdown stayed: removes=%d tracked=%v", rt.removes, m.tracked.IDs())
	}
	if _, err := m.Create(context.Background(), intent(m)); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("create after shutdown: %v", err)
	}
}

// A create whose caller gives up while Podman is making the container
// (a plugin killed mid-refill) still learns its id, and removes it: cut
// short, the container was made but never tracked, and outlived the server.
func TestCanceledCreateLeavesNoContainer(t *testing.T) {
	rt := &slowCreate{entered: make(chan struct{}), release: make(chan struct{})}
	m, _ := newTestManager(t, rt)
	ctx, cancel := context.WithCancel(context.Background())
	created := make(chan error, 1)
	go func() { _, err := m.Create(ctx, intent(m)); created <- err }()
	<-rt.entered
	cancel()
	close(rt.release)
	if err := <-created; !errors.Is(err, context.Canceled) {
		t.Fatalf("create after its caller gave up: %v", err)
	}
	if rt.created != 1 || rt.removes != 1 || len(m.tracked.IDs()) != 0 {
		t.Fatalf("created %d, removed %d, tracked %v", rt.created, rt.removes, m.tracked.IDs())
	}
}
