// Command mcp-forge-agent runs in MCP-Forge's sandbox pods: see
// core/runtime/agent. Build it static (CGO_ENABLED=0).
package main

import (
	"os"

	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
)

func main() { os.Exit(agent.Main(os.Args[1:])) }
