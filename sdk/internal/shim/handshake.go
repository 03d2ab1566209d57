package shim

import (
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

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

// BackendPluginSet is the versioned plugin set for a backend whose
// connections carry messages up to maxMessage bytes (0: DefaultMaxMessage).
// With a nil factory it is the core's (client) side.
func BackendPluginSet(info Info, factory backend.Factory, maxMessage int) map[int]goplugin.PluginSet {
	out := map[int]goplugin.PluginSet{}
	for _, v := range APIVersions {
		info.APIVersions = APIVersions
		out[v] = goplugin.PluginSet{"backend": &BackendPlugin{Info: info, Factory: factory, MaxMessage: maxMessage}}
	}
	return out
}

// ServeConfig is how a backend is served, in its own process or in-process
// for tests: gRPC only, every message within maxMessage bytes and every
// string valid UTF-8.
func ServeConfig(info Info, factory backend.Factory, maxMessage int) *goplugin.ServeConfig {
	maxMessage = MaxMessageOr(maxMessage)
	opts := ServerOptions(maxMessage)
	return &goplugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: BackendPluginSet(info, factory, maxMessage),
		GRPCServer: func(o []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(o, opts...)...)
		},
	}
}

// ClientConfig is the core's go-plugin configuration for a backend whose
// connections carry messages up to maxMessage bytes.
func ClientConfig(maxMessage int) *goplugin.ClientConfig {
	maxMessage = MaxMessageOr(maxMessage)
	return &goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: BackendPluginSet(Info{}, nil, maxMessage),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		GRPCDialOptions:  DialOptions(maxMessage),
		Managed:          false,
	}
}

// MaxMessageOr is n, or DefaultMaxMessage when n is not positive.
func MaxMessageOr(n int) int {
	if n > 0 {
		return n
	}
	return DefaultMaxMessage
}
