package mcpserver

import "github.com/mcp-forge/mcp-forge/core/engine/assembly"

// The engine with its parts serves every interface the MCP layer defines.
var _ Engine = (*assembly.Core)(nil)
