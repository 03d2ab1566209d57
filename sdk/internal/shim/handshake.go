package shim

import (
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// APIVersions are the plugin API versions this SDK speaks, oldest first.
var APIVersions = []int{1}

// Handshake keeps a plugin binary from being run by mistake and rejects
// non-forge plugins. ProtocolVersion is unused: versions are negotiated
// through VersionedPlugins.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "MCP_FORGE_PLUGIN",
	MagicCookieValue: "5f0c9a0e-forge-plugin-v1",
}

// BackendPluginSet is the versioned plugin set for a backend. With a nil
// factory it is the core's (client) side.
func BackendPluginSet(info Info, factory backend.Factory) map[int]goplugin.PluginSet {
	out := map[int]goplugin.PluginSet{}
	for _, v := range APIVersions {
		info.APIVersions = APIVersions
		out[v] = goplugin.PluginSet{"backend": &BackendPlugin{Info: info, Factory: factory}}
	}
	return out
}
