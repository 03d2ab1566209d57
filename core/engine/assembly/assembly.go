// Package assembly puts the engine and its parts together into the one
// core the MCP layer serves (core/mcpserver's Engine): the sessions' files,
// their checkpoints and histories, the background jobs and the sessions
// shared with other replicas, each built on the engine and given to it
// where its own paths need them; and it sweeps them all (Reaper) and
// reports the plugins' warm pools (WarmPool).
package assembly

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/background"
	"github.com/mcp-forge/mcp-forge/core/engine/checkpoints"
	"github.com/mcp-forge/mcp-forge/core/engine/files"
	"github.com/mcp-forge/mcp-forge/core/engine/handover"
	"github.com/mcp-forge/mcp-forge/core/engine/history"
	"github.com/mcp-forge/mcp-forge/core/periodic"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// Core is the engine with its parts.
type Core struct {
	*engine.Engine
	*files.Files
	*checkpoints.Keeper
	*background.Runner
	*handover.Replicas
	*history.Reader
	cfg     config.Config
	plugins engine.Plugins
}

// New builds the engine (engine.New: an error is a configuration the
// server must not start with) and its parts.
func New(cfg config.Config, pol *policy.Policy, pm engine.Plugins, ws *workspace.Manager, rec audit.Recorder, log hclog.Logger) (*Core, error) {
	eng, err := engine.New(cfg, pol, pm, ws, rec, log)
	if err != nil {
		return nil, err
	}
	jobs, err := background.New(cfg, eng, rec)
	if err != nil {
		return nil, err
	}
	f := files.New(cfg, eng, ws, rec)
	rs := handover.New(eng, ws, rec, log)
	c := checkpoints.New(cfg, eng, f, rs, ws, rec, log)
	eng.SetFiles(f)
	eng.SetCheckpoints(c)
	eng.SetJobs(jobs)
	eng.SetReplicas(rs)
	return &Core{Engine: eng, Files: f, Keeper: c, Runner: jobs, Replicas: rs, Reader: history.New(cfg, eng, rec), cfg: cfg, plugins: pm}, nil
}

// WarmPool asks a loaded backend for its warm pool now (Stats: live, unlike
// the capabilities its status holds). Nil if it keeps none, has no live
// figures or does not answer within a second.
func (c *Core) WarmPool(ctx context.Context, st plugins.Status) *backend.WarmPool {
	if st.Type != plugin.TypeBackend || st.Error != "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	b, err := c.plugins.Backend(ctx, st.Name)
	if err != nil {
		return nil
	}
	sr, ok := b.(backend.StatsReporter)
	if !ok {
		return nil
	}
	s, err := sr.Stats(ctx)
	if err != nil {
		return nil
	}
	return s.WarmPool
}

// Reaper suspends and removes idle sessions, expires checkpoints and
// forgets old jobs every sessions.cleanup_interval until ctx ends.
func (c *Core) Reaper(ctx context.Context) {
	c.ExpireCheckpoints(time.Now()) // a restart after a long stop finds expired ones
	periodic.Every(ctx, time.Duration(c.cfg.Sessions.CleanupInterval)*time.Second, func(ctx context.Context) bool {
		c.SuspendIdle(ctx) // before an idle session would be removed
		c.ReapIdle(ctx)
		c.ExpireCheckpoints(time.Now())
		c.Sweep()
		return true
	})
}
