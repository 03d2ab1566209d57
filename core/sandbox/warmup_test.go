package sandbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// cpuRecorder records the quotas a manager sets live; err fails them.
type cpuRecorder struct {
	mu     sync.Mutex
	quotas []int64
	err    error
}

func (c *cpuRecorder) UpdateCPU(_ context.Context, _ string, q int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.quotas = append(c.quotas, q)
	return c.err
}

func (c *cpuRecorder) set() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.quotas...)
}

func (r *recorder) events(name string) []audit.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Entry
	for _, e := range r.entries {
		if e.Event == name {
			out = append(out, e)
		}
	}
	return out
}

func TestWarmUp(t *testing.T) {
	ctx := context.Background()
	const own = 50000 // the test policy's default and maximum
	allowance := warmUpQuota(own)
	cases := []struct {
		name      string
		updater   bool
		failing   bool
		warmUp    bool
		clampBy   string        // "": nobody clamps
		limit     time.Duration // the core's own clamp
		created   int64         // the quota the container is created with
		set       []int64       // quotas set live
		clampErr  bool
		removed   bool
		clampedBy string // the audit line's reason
		cpuGap    bool   // the runtime does not enforce CPU quotas (waived)
	}{
		{name: "clamped by its plugin", updater: true, warmUp: true, clampBy: "p", limit: time.Hour, created: allowance, set: []int64{own}},
		{name: "clamped by the core past the limit", updater: true, warmUp: true, limit: 20 * time.Millisecond, created: allowance, set: []int64{own}, clampedBy: "warm-up-limit"},
		{name: "a clamp that fails removes the container", updater: true, failing: true, warmUp: true, clampBy: "p", limit: time.Hour, created: allowance, set: []int64{own}, clampErr: true, removed: true},
		{name: "no warm-up asked: nothing to clamp", updater: true, clampBy: "p", limit: time.Hour, created: own},
		{name: "a runtime that cannot clamp gives no allowance", warmUp: true, clampBy: "p", limit: time.Hour, created: own},
		{name: "no allowance where CPU quotas are not enforced", updater: true, cpuGap: true, warmUp: true, clampBy: "p", limit: time.Hour, created: own},
		{name: "another plugin cannot clamp", updater: true, warmUp: true, clampBy: "other", limit: time.Hour, created: allowance, clampErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if allowance <= own {
				t.Skip("one core: no allowance beyond the quota")
			}
			old := warmUpLimit
			warmUpLimit = c.limit
			defer func() { warmUpLimit = old }()
			rt := &fakeRuntime{}
			var waive []runtime.Guarantee
			if c.cpuGap {
				rt.gaps = runtime.Report{}.With(runtime.Gap{Guarantee: runtime.CPU, Why: "rootless on cgroups v1"})
				waive = append(waive, runtime.CPU)
			}
			m, rec := newTestManager(t, rt, waive...)
			rec.mu = &sync.Mutex{}
			cpu := &cpuRecorder{}
			if c.failing {
				cpu.err = errors.New("cgroup busy")
			}
			if c.updater {
				m.cpu = cpu
			}
			in := intent(m)
			in.WarmUp = c.warmUp
			id, err := m.Create(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			if rt.spec.Limits.CPUQuota != c.created {
				t.Fatalf("created with quota %d, want %d", rt.spec.Limits.CPUQuota, c.created)
			}
			cr := rec.events(audit.ContainerCreate)
			if q := cr[len(cr)-1].Details["cpu_quota"]; q != int64(own) {
				t.Fatalf("the create's audit line says cpu_quota %v, want the limit %d", q, own)
			}
			if c.clampBy != "" {
				err = m.Clamp(ctx, c.clampBy, id)
				if (err != nil) != c.clampErr {
					t.Fatalf("clamp: %v", err)
				}
				// Clamping again changes nothing.
				_ = m.Clamp(ctx, c.clampBy, id)
			} else {
				time.Sleep(10 * c.limit)
			}
			if got := cpu.set(); len(got) != len(c.set) || (len(got) > 0 && got[0] != c.set[0]) {
				t.Fatalf("quotas set %v, want %v", got, c.set)
			}
			if cl := rec.events(audit.ContainerClamp); len(cl) != len(c.set) {
				t.Fatalf("%d clamp audit lines, want %d", len(cl), len(c.set))
			} else if len(cl) == 1 && (cl[0].Success == c.failing || cl[0].Details["cpu_quota"] != int64(own) || (c.clampedBy != "" && cl[0].Details["reason"] != c.clampedBy)) {
				t.Fatalf("clamp audited as %+v", cl[0])
			}
			if removed := rt.removes > 0; removed != c.removed {
				t.Fatalf("removed: %v, want %v", removed, c.removed)
			}
			if c.failing {
				// A runtime that refused one update gives no more allowances.
				if _, err := m.Create(ctx, in); err != nil || rt.spec.Limits.CPUQuota != own {
					t.Fatalf("after a failed clamp: created with quota %d (%v), want %d", rt.spec.Limits.CPUQuota, err, own)
				}
			}
		})
	}
}

// blockingCPU holds every update until released.
type blockingCPU struct {
	cpuRecorder
	release chan struct{}
}

func (b *blockingCPU) UpdateCPU(ctx context.Context, id string, q int64) error {
	<-b.release
	return b.cpuRecorder.UpdateCPU(ctx, id, q)
}

// A Clamp while the core's own clamp is under way waits for it: it never
// answers that the limits hold before they do.
func TestClampWaitsForAClampUnderWay(t *testing.T) {
	if warmUpQuota(50000) <= 50000 {
		t.Skip("one core: no allowance beyond the quota")
	}
	old := warmUpLimit
	warmUpLimit = time.Millisecond
	defer func() { warmUpLimit = old }()
	rt := &fakeRuntime{}
	m, rec := newTestManager(t, rt)
	rec.mu = &sync.Mutex{}
	cpu := &blockingCPU{release: make(chan struct{})}
	m.cpu = cpu
	in := intent(m)
	in.WarmUp = true
	id, err := m.Create(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the timer's clamp is under way, held
	answered := make(chan error, 1)
	go func() { answered <- m.Clamp(context.Background(), "p", id) }()
	select {
	case err := <-answered:
		t.Fatalf("Clamp answered %v while the update was still under way", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(cpu.release)
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	if got := cpu.set(); len(got) != 1 {
		t.Fatalf("updates %v: want one", got)
	}
}
