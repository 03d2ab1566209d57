// Command mcp-forge-plugin-uv is the uv environment builder: it resolves
// Python packages to a hashed lock with `uv pip compile` (wheels only) and
// installs the lock into a layer tree under the core's work directory, or
// does the same with pip when no uv is available.
package main

import "github.com/mcp-forge/mcp-forge/sdk/plugin"

func main() { plugin.ServeBuilder(Info, New) }
