// Command mcp-forge is the MCP-Forge server and its operator commands.
package main

import (
	"os"

	"github.com/mcp-forge/mcp-forge/core/workspace"
)

func main() {
	// Not a command: the server's own helper, run under `podman unshare`
	// to read a file the sandbox made private (core/workspace/unshare.go).
	if len(os.Args) > 1 && os.Args[1] == workspace.OpenHelper {
		os.Exit(workspace.RunOpenHelper(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:]))
}
