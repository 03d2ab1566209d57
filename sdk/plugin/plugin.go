// Package plugin connects plugins and the MCP-Forge core with
// hashicorp/go-plugin over gRPC. A plugin's main is one call:
//
//	func main() { plugin.ServeBackend(info, mybackend.New) }
package plugin

import (
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/internal/shim"
)

// Plugin types.
const (
	TypeBackend = "backend"
	TypeBuilder = "builder"
	TypeBridge  = "bridge"
)

// APIVersion is the newest plugin API this SDK speaks; APIVersions all of them.
const APIVersion = 1

// APIVersions lists every plugin API version this SDK can serve or consume.
var APIVersions = []int{1}

// Handshake keeps a plugin binary from being run by mistake and rejects
// non-forge plugins.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  APIVersion,
	MagicCookieKey:   "MCP_FORGE_PLUGIN",
	MagicCookieValue: "5f0c9a0e-forge-plugin-v1",
}

// Info describes a plugin. Version is the plugin's own semver, independent
// of the core's.
type Info struct {
	Name        string
	Version     string
	Description string
}

// BinaryPrefix is how plugin executables are named: mcp-forge-plugin-<name>.
const BinaryPrefix = "mcp-forge-plugin-"

// ServeBackend serves a backend plugin; it returns only when the core ends
// the plugin, and the plugin exits when the core process dies. Logs go to
// stderr as JSON for the core to re-emit.
func ServeBackend(info Info, factory backend.Factory) {
	if os.Getenv(Handshake.MagicCookieKey) == "" {
		fmt.Fprintf(os.Stderr, "%s %s is an MCP-Forge plugin: the mcp-forge server starts it; it is not run by hand.\n", info.Name, info.Version)
		os.Exit(2)
	}
	log := Logger(info.Name)
	watchParent(log, func() { os.Exit(3) })
	cfg := ServeConfig(info, factory, maxMessageFromEnv(log))
	cfg.Logger = log
	goplugin.Serve(cfg)
}

// ServeConfig is how ServeBackend serves a backend (sdktest serves the same
// configuration in-process): gRPC only, every message within maxMessage
// bytes, every string valid UTF-8.
func ServeConfig(info Info, factory backend.Factory, maxMessage int) *goplugin.ServeConfig {
	opts := shim.ServerOptions(maxMessageOr(maxMessage))
	return &goplugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: backendPluginSet(info, factory, maxMessage),
		GRPCServer: func(o []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(o, opts...)...)
		},
	}
}

// Logger is a plugin's logger: JSON on stderr, which the core re-emits.
func Logger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Trace, Output: os.Stderr, JSONFormat: true})
}

// BackendPluginSet is the versioned plugin set for a backend. With a nil
// factory it is the core's (client) side.
func BackendPluginSet(info Info, factory backend.Factory) map[int]goplugin.PluginSet {
	return backendPluginSet(info, factory, 0)
}

func backendPluginSet(info Info, factory backend.Factory, maxMessage int) map[int]goplugin.PluginSet {
	out := map[int]goplugin.PluginSet{}
	for _, v := range APIVersions {
		out[v] = goplugin.PluginSet{TypeBackend: &shim.BackendPlugin{
			Info:       shim.Info{Type: TypeBackend, Name: info.Name, Version: info.Version, Description: info.Description, APIVersions: APIVersions},
			Factory:    factory,
			MaxMessage: maxMessageOr(maxMessage),
		}}
	}
	return out
}
