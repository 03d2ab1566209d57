// Command mcp-forge-plugin-jupyter is the stateful Python backend: one
// ipykernel in one container per session.
package main

import (
	"github.com/mcp-forge/mcp-forge/sdk/kernel"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

func main() { plugin.ServeBackend(Info, kernel.New(Spec)) }
