// Command mcp-forge-plugin-python is the stateless Python backend: a fresh
// sandbox container for every run.
package main

import "github.com/mcp-forge/mcp-forge/sdk/plugin"

func main() { plugin.ServeBackend(Info, New) }
