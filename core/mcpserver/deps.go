package mcpserver

import (
	"context"

	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets"
	envtools "github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/environments"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/execution"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/files"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/jobs"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/notebooks"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/sessions"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// What the MCP layer needs of the core: each toolset names what its tools
// use (execution.Executor, sessions.Sessions, files.Files,
// sessions.Checkpoints, notebooks.Notebooks, jobs.Jobs); the server adds
// the inventory its resources describe. The engine is all of them
// (deps_test.go checks it); a test, or a server whose sessions live
// elsewhere, can give each its own.

// Inventory is what the resources describe of what is loaded: the plugins,
// their warm pools and the tool bridge.
type Inventory interface {
	PluginStatuses() []plugins.Status
	WarmPool(ctx context.Context, st plugins.Status) *backend.WarmPool
	Tools() (*toolbridge.Service, string)
}

// Engine is every part of the core the MCP layer uses.
type Engine interface {
	execution.Executor
	execution.Starter
	sessions.Sessions
	sessions.Checkpoints
	files.Files
	notebooks.Notebooks
	jobs.Jobs
	Inventory
	// RefuseArguments audits a call whose arguments did not match its tool's schema.
	RefuseArguments(client, tool, msg string)
}

// The tools' outputs and the resources under the names this package has
// always given them (tests and clients decode answers into them).
type (
	ErrorInfo               = toolsets.ErrorInfo
	ExecuteOutput           = execution.Output
	SessionView             = sessions.View
	SessionOutput           = sessions.SessionOutput
	DestroyOutput           = sessions.DestroyOutput
	SessionsOutput          = sessions.SessionsOutput
	CheckpointOutput        = sessions.CheckpointOutput
	FileOutput              = files.FileOutput
	ListOutput              = files.ListOutput
	ForkOutput              = notebooks.ForkOutput
	NotebookOutput          = notebooks.NotebookOutput
	HistoryCell             = notebooks.HistoryCell
	BuildEnvironmentOutput  = envtools.BuildEnvironmentOutput
	ListEnvironmentsOutput  = envtools.ListEnvironmentsOutput
	DeleteEnvironmentOutput = envtools.DeleteEnvironmentOutput
	PackageVersion          = envtools.PackageVersion
)

// Resources the server serves, by the names its users know.
const (
	EnvironmentURI  = toolsets.EnvironmentURI
	EnvironmentsURI = toolsets.EnvironmentsURI
	ToolsURI        = toolsets.ToolsURI
)

// sessionStarts counts how one backend's kernels were started: taken warm
// from its pool or started cold, and how long the last of each took.
type sessionStarts struct {
	Warm       int     `json:"warm_starts"`
	Cold       int     `json:"cold_starts"`
	LastWarmMS float64 `json:"last_warm_start_ms,omitempty"`
	LastColdMS float64 `json:"last_cold_start_ms,omitempty"`
}

func startStats(m map[string]session.Starts) map[string]sessionStarts {
	out := make(map[string]sessionStarts, len(m))
	for k, v := range m {
		out[k] = sessionStarts(v)
	}
	return out
}
