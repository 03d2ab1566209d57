package sandbox

import (
	"context"
	"time"

	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// RunResult is a finished one-shot container.
type RunResult struct {
	ExitCode int
	runtime.Output
	Duration time.Duration
}

// Run creates, starts and waits for a one-shot container, collects its
// output and always removes it. A timeout or OOM comes back as the error with
// whatever output was produced before it.
func (m *Manager) Run(ctx context.Context, in policy.Intent, maxOutput int64) (RunResult, error) {
	start := time.Now()
	id, err := m.Create(ctx, in)
	if err != nil {
		return RunResult{}, err
	}
	defer func() {
		// Remove even when ctx is cancelled: never leave a container behind.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := m.Remove(rctx, in.Plugin, id); err != nil {
			m.log.Warn("remove after run failed", "id", id, "error", err)
		}
	}()
	if err := m.Start(ctx, in.Plugin, id); err != nil {
		return RunResult{}, err
	}
	code, werr := m.Wait(ctx, in.Plugin, id, in.Limits.Timeout)
	res := RunResult{ExitCode: code, Duration: time.Since(start)}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if out, err := m.Logs(lctx, in.Plugin, id, maxOutput); err == nil {
		res.Output = out
	} else if werr == nil {
		werr = err
	}
	return res, werr
}
