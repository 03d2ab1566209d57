// Command seccompjson prints MCP-Forge's seccomp profile (the JSON the core
// gives Podman) on stdout, so scripts/kube-up.sh can install the same profile
// as the kubelet's Localhost profile until `mcp-forge seccomp-profile` exists.
package main

import (
	"fmt"
	"os"

	"github.com/mcp-forge/mcp-forge/core/seccomp"
)

func main() {
	if _, err := os.Stdout.Write(seccomp.JSON()); err != nil {
		fmt.Fprintf(os.Stderr, "seccompjson: writing the profile to stdout: %v\n", err)
		os.Exit(1)
	}
}
