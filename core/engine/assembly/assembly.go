// Package assembly puts the engine and its parts together into the one
// core the MCP layer serves (core/mcpserver's Engine): the sessions' files,
// their checkpoints, the background jobs and the sessions shared with other
// replicas, each built on the engine and given to it where its own paths
// need them.
package assembly

import (
	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/background"
	"github.com/mcp-forge/mcp-forge/core/engine/checkpoints"
	"github.com/mcp-forge/mcp-forge/core/engine/files"
	"github.com/mcp-forge/mcp-forge/core/engine/handover"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// Core is the engine with its parts.
type Core struct {
	*engine.Engine
	*files.Files
	*checkpoints.Keeper
	*background.Runner
	*handover.Replicas
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
	c := checkpoints.New(cfg, eng, f, ws, rec, log)
	rs := handover.New(eng, ws, rec, log)
	eng.SetFiles(f)
	eng.SetCheckpoints(c)
	eng.SetJobs(jobs)
	eng.SetReplicas(rs)
	return &Core{Engine: eng, Files: f, Keeper: c, Runner: jobs, Replicas: rs}, nil
}
