package sandbox

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// CPUUpdater changes a running container's CPU quota in place (Options.CPU).
// Without one, warm-up containers have their limits from the start.
type CPUUpdater interface {
	UpdateCPU(ctx context.Context, id string, quota int64) error
}

// warmUpLimit is how long a warm-up container keeps its allowance at most
// (host.WarmUpLimit): a plugin that never clamps is clamped by the core.
var warmUpLimit = 30 * time.Second

// warmUp is a container created with a warm-up allowance: the quota it is
// held to once clamped, the timer that clamps it anyway, and the clamp's
// outcome, which every caller of Clamp waits for and gets.
type warmUp struct {
	plugin string
	quota  int64
	timer  *time.Timer
	once   sync.Once
	done   chan struct{}
	err    error
}

// warmUpQuota is the allowance a warm-up gets: the host's cores (at most
// ten, the policy's ceiling), never less than the container's own quota.
func warmUpQuota(own int64) int64 {
	q := min(int64(goruntime.NumCPU())*100000, 1_000_000)
	return max(q, own)
}

// allowWarmUp raises spec's CPU quota for a warm-up, when the runtime can
// lower it again and enforces CPU quotas at all (not waived); it returns
// the quota the container is to be held to, or 0 when it gets no
// allowance. A gVisor sandbox gets none: runsc lowers the host cgroup's
// quota, but the Sentry's own cgroupfs keeps the one it was created with,
// so the code would read a limit it is not held to.
func (m *Manager) allowWarmUp(spec *runtime.Spec, waived []runtime.Gap) int64 {
	if m.cpu == nil || m.noWarmUp.Load() || spec.Limits.CPUQuota <= 0 || spec.Isolation == runtime.IsolationGVisor ||
		slices.ContainsFunc(waived, func(g runtime.Gap) bool { return g.Guarantee == runtime.CPU }) {
		return 0
	}
	own := spec.Limits.CPUQuota
	if q := warmUpQuota(own); q > own {
		spec.Limits.CPUQuota = q
		return own
	}
	return 0
}

// startWarmUp tracks a created warm-up container until it is removed.
func (m *Manager) startWarmUp(plugin, id string, quota int64) {
	w := &warmUp{plugin: plugin, quota: quota, done: make(chan struct{})}
	m.mu.Lock()
	m.warm[id] = w
	w.timer = time.AfterFunc(warmUpLimit, func() {
		m.mu.Lock()
		closing := m.closing
		m.mu.Unlock()
		if closing {
			return // Shutdown removes every container
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.clamp(ctx, id, "warm-up-limit"); err != nil {
			m.log.Warn("clamping a warm-up container past its limit failed; it was removed", "id", short(id), "error", err)
		}
	})
	m.mu.Unlock()
}

// Clamp holds a warm-up container of plugin's to its limits (host.Sandbox
// Clamp). A container without a warm-up allowance needs nothing; one being
// clamped is waited for. If the runtime cannot lower the quota the
// container is removed, and every Clamp of it fails: nothing may run in it
// beyond its limits.
func (m *Manager) Clamp(ctx context.Context, plugin, id string) error {
	if err := m.check(plugin, id, "clamp"); err != nil {
		return err
	}
	return m.clamp(ctx, id, "")
}

func (m *Manager) clamp(ctx context.Context, id, why string) error {
	m.mu.Lock()
	w := m.warm[id]
	m.mu.Unlock()
	if w == nil {
		return nil
	}
	w.once.Do(func() {
		defer close(w.done)
		w.timer.Stop()
		err := m.cpu.UpdateCPU(ctx, id, w.quota)
		extra := map[string]any{"cpu_quota": w.quota}
		if why != "" {
			extra["reason"] = why
		}
		if aerr := audit.Must(m.audit, m.entry(audit.ContainerClamp, w.plugin, id, err, extra)); aerr != nil && err == nil {
			err = &AuditError{Err: aerr}
		}
		if err != nil {
			if ctx.Err() == nil {
				// A runtime that refuses live updates refuses them all:
				// later containers get their limits from the start.
				m.noWarmUp.Store(true)
			}
			w.err = fmt.Errorf("the container could not be held to its CPU limit (%d), so it was removed: %w", w.quota, err)
			_ = m.Remove(context.WithoutCancel(ctx), w.plugin, id)
		}
	})
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dropWarmUpLocked forgets a removed container's warm-up.
func (m *Manager) dropWarmUpLocked(id string) {
	if w := m.warm[id]; w != nil {
		w.timer.Stop()
		delete(m.warm, id)
	}
}

// stopWarmUps stops the clamp timers (Shutdown removes the containers).
func (m *Manager) stopWarmUps() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.warm {
		w.timer.Stop()
	}
}
