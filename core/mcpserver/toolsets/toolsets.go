// Package toolsets is what the MCP face's tools are made of, as
// github-mcp-server makes its own: each tool is one typed constructor
// returning its definition and its handler (New), tools are grouped with
// their resources into toolsets (the subpackages: execution, sessions,
// notebooks, files, jobs, environments) that core/mcpserver assembles, and
// every handler answers with the shared results (Failure, Unavailable,
// core/toolcall's Text) rather than results assembled by hand.
package toolsets

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// Tool is one tool: its definition and its typed handler, registered with
// the argument checks of add.
type Tool struct {
	Def      *mcp.Tool
	register func(*mcp.Server)
}

// New is a tool from its definition and typed handler. An input or output
// schema the definition leaves nil is inferred from In or Out (Schema); a
// tool whose schema says more (limits of the configuration) sets its own.
func New[In, Out any](def *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) Tool {
	if def.InputSchema == nil {
		def.InputSchema = Schema[In]()
	}
	if def.OutputSchema == nil {
		def.OutputSchema = Schema[Out]()
	}
	return Tool{Def: def, register: func(srv *mcp.Server) { add(srv, def, h) }}
}

// Resource is a fixed resource and its handler.
type Resource struct {
	Def     *mcp.Resource
	Handler mcp.ResourceHandler
}

// Template is a resource template and its handler.
type Template struct {
	Def     *mcp.ResourceTemplate
	Handler mcp.ResourceHandler
}

// Toolset is a group of tools with the resources that show what they
// act on.
type Toolset struct {
	Name      string
	Tools     []Tool
	Resources []Resource
	Templates []Template
	// Start, when set, runs once the toolset is registered, with the
	// server (to send it notifications).
	Start func(*mcp.Server)
}

// Register adds the toolset's tools and resources to srv.
func (t Toolset) Register(srv *mcp.Server) {
	for _, tool := range t.Tools {
		tool.register(srv)
	}
	for _, r := range t.Resources {
		srv.AddResource(r.Def, r.Handler)
	}
	for _, r := range t.Templates {
		srv.AddResourceTemplate(r.Def, r.Handler)
	}
	if t.Start != nil {
		t.Start(srv)
	}
}

// Env is what every toolset's constructor takes: the configuration, and
// who a request's connection is.
type Env struct {
	Cfg config.Config
	// Conn names the caller that owns sessions, checkpoints and jobs: the
	// connection, or over HTTP the tenant.
	Conn func(*mcp.ServerSession) string
	// Client names the owner of custom environments: the tenant over
	// HTTP, over stdio the one user of the process.
	Client func(*mcp.ServerSession) string
}
