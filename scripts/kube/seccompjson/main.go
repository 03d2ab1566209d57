// Command seccompjson prints MCP-Forge's seccomp profile (the JSON the core
// gives Podman) on stdout, or with the argument gvisor its variant for
// sandboxes under gVisor, so scripts/kube-up.sh can install them as the
// kubelet's Localhost profiles when bin/mcp-forge (`mcp-forge
// seccomp-profile [gvisor]`) is not built.
package main

import (
	"fmt"
	"os"

	"github.com/mcp-forge/mcp-forge/core/seccomp"
)

func main() {
	p := seccomp.JSON()
	switch {
	case len(os.Args) == 2 && os.Args[1] == "gvisor":
		p = seccomp.GVisorJSON()
	case len(os.Args) > 1:
		fmt.Fprintf(os.Stderr, "seccompjson: unknown argument %q (only gvisor)\n", os.Args[1])
		os.Exit(2)
	}
	if _, err := os.Stdout.Write(p); err != nil {
		fmt.Fprintf(os.Stderr, "seccompjson: writing the profile to stdout: %v\n", err)
		os.Exit(1)
	}
}
