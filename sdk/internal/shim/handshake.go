package shim

import (
	"fmt"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
)

// APIVersions are the plugin API versions a plugin built with this SDK
// serves, oldest first.
var APIVersions = []int{2}

// CoreAPIVersions are the versions the core's side speaks: v1 plugins are
// served through the v2 code by mapping service names (v1.go).
var CoreAPIVersions = []int{1, 2}

// Handshake keeps a plugin binary from being run by mistake and rejects
// non-forge plugins. ProtocolVersion is unused: versions are negotiated
// through VersionedPlugins.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "MCP_FORGE_PLUGIN",
	MagicCookieValue: "5f0c9a0e-forge-plugin-v1",
}

// Plugin set keys: a plugin serves the one of its type; the core's client
// set holds all three, and dispenses the one the plugin's Info names.
const (
	keyBackend = "backend"
	keyBuilder = "builder"
	keyBridge  = "bridge"
)

// versioned puts one plugin under its key for every API version.
func versioned(key string, p goplugin.Plugin) map[int]goplugin.PluginSet {
	out := map[int]goplugin.PluginSet{}
	for _, v := range APIVersions {
		out[v] = goplugin.PluginSet{key: p}
	}
	return out
}

// BackendPluginSet is the versioned plugin set for a backend whose
// connections carry messages up to maxMessage bytes (0: DefaultMaxMessage).
// With a nil factory it is the core's (client) side.
func BackendPluginSet(info Info, factory backend.Factory, maxMessage int) map[int]goplugin.PluginSet {
	info.APIVersions = APIVersions
	return versioned(keyBackend, &BackendPlugin{Info: info, Factory: factory, MaxMessage: maxMessage})
}

// BuilderPluginSet is BackendPluginSet for a builder.
func BuilderPluginSet(info Info, factory builder.Factory, maxMessage int) map[int]goplugin.PluginSet {
	info.APIVersions = APIVersions
	return versioned(keyBuilder, &BuilderPlugin{Info: info, Factory: factory, MaxMessage: maxMessage})
}

// BridgePluginSet is BackendPluginSet for a bridge.
func BridgePluginSet(info Info, factory bridge.Factory, maxMessage int) map[int]goplugin.PluginSet {
	info.APIVersions = APIVersions
	return versioned(keyBridge, &BridgePlugin{Info: info, Factory: factory, MaxMessage: maxMessage})
}

// ClientPluginSet is the core's side: a client for every plugin type (a
// gRPC client is only a wrapper of the connection until it is called).
func ClientPluginSet(maxMessage int) map[int]goplugin.PluginSet {
	out := map[int]goplugin.PluginSet{}
	for _, v := range CoreAPIVersions {
		out[v] = goplugin.PluginSet{
			keyBackend: &BackendPlugin{MaxMessage: maxMessage, API: v},
			keyBuilder: &BuilderPlugin{MaxMessage: maxMessage, API: v},
			keyBridge:  &BridgePlugin{MaxMessage: maxMessage, API: v},
		}
	}
	return out
}

// ServeConfig is how a backend is served, in its own process or in-process
// for tests: gRPC only, every message within maxMessage bytes and every
// string valid UTF-8.
func ServeConfig(info Info, factory backend.Factory, maxMessage int) *goplugin.ServeConfig {
	maxMessage = MaxMessageOr(maxMessage)
	return serveConfig(BackendPluginSet(info, factory, maxMessage), maxMessage)
}

// ServeBuilderConfig is ServeConfig for a builder.
func ServeBuilderConfig(info Info, factory builder.Factory, maxMessage int) *goplugin.ServeConfig {
	maxMessage = MaxMessageOr(maxMessage)
	return serveConfig(BuilderPluginSet(info, factory, maxMessage), maxMessage)
}

// ServeBridgeConfig is ServeConfig for a bridge.
func ServeBridgeConfig(info Info, factory bridge.Factory, maxMessage int) *goplugin.ServeConfig {
	maxMessage = MaxMessageOr(maxMessage)
	return serveConfig(BridgePluginSet(info, factory, maxMessage), maxMessage)
}

func serveConfig(set map[int]goplugin.PluginSet, maxMessage int) *goplugin.ServeConfig {
	// Take the inherited fd channel now, before the plugin may start any
	// child process: from here on it is held close-on-exec.
	processFDChannel()
	opts := ServerOptions(maxMessage)
	return &goplugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: set,
		GRPCServer: func(o []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(o, opts...)...)
		},
	}
}

// ClientConfig is the core's go-plugin configuration for a plugin of any
// type whose connections carry messages up to maxMessage bytes.
func ClientConfig(maxMessage int) *goplugin.ClientConfig {
	maxMessage = MaxMessageOr(maxMessage)
	return &goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: ClientPluginSet(maxMessage),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		GRPCDialOptions:  DialOptions(maxMessage),
		Managed:          false,
	}
}

// Dispense returns the core-side client of a plugin type from a go-plugin
// connection: *BackendClient, *BuilderClient or *BridgeClient.
func Dispense(rpc goplugin.ClientProtocol, typ string) (any, error) {
	switch typ {
	case keyBackend, keyBuilder, keyBridge:
		return rpc.Dispense(typ)
	}
	return nil, fmt.Errorf("plugin type %q is unknown (this SDK knows %q, %q and %q)", typ, keyBackend, keyBuilder, keyBridge)
}

// MaxMessageOr is n, or DefaultMaxMessage when n is not positive.
func MaxMessageOr(n int) int {
	if n > 0 {
		return n
	}
	return DefaultMaxMessage
}
