// A plugin that speaks only plugin API version 3, which this core does not:
// the core must refuse it with both sides' versions in the message.
package main

import (
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/mcp-forge/mcp-forge/sdk/plugin"
	"github.com/mcp-forge/mcp-forge/sdk/pluginhost"
)

func main() {
	set := pluginhost.BackendPluginSet(plugin.Info{Name: "future", Version: "9.0.0"}, nil)
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  pluginhost.Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{3: set[plugin.APIVersion]},
		GRPCServer:       goplugin.DefaultGRPCServer,
	})
}
