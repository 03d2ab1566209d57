// Command mcp-forge is the MCP-Forge server and its operator commands.
package main

import (
	"os"

	"github.com/mcp-forge/mcp-forge/core/forge"
)

func main() {
	// Not a command: the server's own helper, run under `podman unshare`
	// (forge.Helper).
	if status, ok := forge.Helper(os.Args[1:]); ok {
		os.Exit(status)
	}
	os.Exit(run(os.Args[1:]))
}
