// Package bridge is the interface a bridge plugin implements: it exposes MCP
// tools to code in the sandbox, lists them, calls them, and generates
// wrapper code for the tools a session was granted. Serve one with
// plugin.ServeBridge; protobuf never appears in your code.
package bridge

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Tool is an MCP tool the bridge can call.
type Tool struct {
	Server       string
	Name         string
	Description  string
	InputSchema  json.RawMessage // a JSON Schema object
	OutputSchema json.RawMessage // nil: none declared
	// OriginalName is the server's own name of the tool when Name is not it:
	// a bridge maps a name that is not an identifier in Python and R, or
	// that collides, to one (get-user → get_user) and reports it here so
	// that no tool is silently renamed. "": Name is the server's name.
	OriginalName string
}

// ID is how a tool is named in grants and generated code: "server.tool".
func (t Tool) ID() string { return t.Server + "." + t.Name }

// CallRequest is one call of a tool.
type CallRequest struct {
	Server    string
	Tool      string
	Arguments json.RawMessage
	Timeout   time.Duration // 0: the bridge's default
}

// CallResult is a tool's answer. A failure of the tool (unknown tool, bad
// arguments, the tool's own error) is a result with IsError and Message,
// not a Go error: Go errors are for failures of the bridge or the host.
type CallResult struct {
	Structured json.RawMessage // nil: none
	Text       string
	Images     []backend.Image
	IsError    bool
	Message    string
}

// GenerateRequest asks for wrapper code.
type GenerateRequest struct {
	Language string   // "python" or "r"
	Tools    []string // granted tools, as "server.tool"
}

// Bridge bridges MCP tools into the sandbox.
//
// Generate returns files (path relative to the wrapper directory →
// content) that call each granted tool by its ID ("server.tool", which
// therefore appears in them) and mention no tool that was not granted; a
// grant naming an unknown tool, or an unsupported language, is an error.
type Bridge interface {
	ListTools(ctx context.Context) ([]Tool, error)
	CallTool(ctx context.Context, req CallRequest) (CallResult, error)
	Generate(ctx context.Context, req GenerateRequest) (map[string][]byte, error)
}

// Factory builds a bridge once the host services are connected.
type Factory func(h host.Host, cfg backend.Config) (Bridge, error)
