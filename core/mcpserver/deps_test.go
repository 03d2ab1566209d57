package mcpserver

import "github.com/mcp-forge/mcp-forge/core/engine"

// The engine serves every interface the MCP layer defines.
var _ Engine = (*engine.Engine)(nil)
