// Command mcp-forge-plugin-mcpbridge is the MCP tool bridge: it connects to
// the MCP servers the operator configures, lists and calls their tools for
// the core, and generates the Python and R functions sandbox code calls
// them with.
package main

import "github.com/mcp-forge/mcp-forge/sdk/plugin"

// Info identifies this plugin; its version moves independently of the core.
var Info = plugin.Info{Name: "mcpbridge", Version: "0.1.0", Description: "other MCP servers' tools as Python and R functions in the sandbox", Config: Config{}}

func main() {
	plugin.ServeBridge(Info, New)
	// The core ended the plugin: end every server it started.
	closeAll()
}
