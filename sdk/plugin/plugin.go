// Package plugin is what a plugin author imports to serve a backend, a
// builder or a bridge to the MCP-Forge core; a plugin's main is one call:
//
//	func main() { plugin.ServeBackend(info, mybackend.New) }
//	func main() { plugin.ServeBuilder(info, mybuilder.New) }
//	func main() { plugin.ServeBridge(info, mybridge.New) }
//
// The transport (hashicorp/go-plugin over gRPC) stays out of this package's
// API. The core's side, launching plugins, is sdk/pluginhost.
package plugin

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/configschema"
	"github.com/mcp-forge/mcp-forge/sdk/internal/shim"
)

// Type is what a plugin serves: a backend, a builder or a bridge.
type Type string

// Plugin types.
const (
	TypeBackend Type = "backend"
	TypeBuilder Type = "builder"
	TypeBridge  Type = "bridge"
)

// APIVersion is the newest plugin API this SDK speaks.
const APIVersion = 2

// APIVersions lists the plugin API versions a plugin built with this SDK
// serves (the core also serves plugins of API 1; see docs/plugins.md).
var APIVersions = append([]int(nil), shim.APIVersions...)

// Info describes a plugin. Version is the plugin's own semver (MAJOR.MINOR.PATCH,
// optionally -pre and +build), independent of the core's; the core refuses
// to load a plugin whose version is not semver.
type Info struct {
	Name        string
	Version     string
	Description string
	// Config is the struct the plugin decodes its configuration into (a
	// zero value, e.g. mybackend.Config{}): its json keys are the keys
	// [plugins.NAME.config] may hold, and the core refuses any other, or a
	// value of another type, at start-up and in `mcp-forge config check`.
	// Fields the core sets (output limits, container defaults) are tagged
	// `forge:"core"`. Nil: the plugin accepts no key. See sdk/configschema.
	Config any
}

// Schema is the schema of the plugin's configuration table (Config).
func (i Info) Schema() (*configschema.Schema, error) {
	if i.Config == nil {
		return &configschema.Schema{}, nil
	}
	s, err := configschema.FromStruct(i.Config)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: Info.Config: %w", i.Name, err)
	}
	return s, nil
}

// Validate checks what the core checks at load.
func (i Info) Validate() error {
	if i.Name == "" {
		return fmt.Errorf("plugin info: Name is empty")
	}
	if _, err := semver.Parse(i.Version); err != nil {
		return fmt.Errorf("plugin %s: version %q is not semver (MAJOR.MINOR.PATCH, e.g. 0.1.0): %v", i.Name, i.Version, err)
	}
	_, err := i.Schema()
	return err
}

// BinaryPrefix is how plugin executables are named: mcp-forge-plugin-<name>.
const BinaryPrefix = "mcp-forge-plugin-"

func (i Info) shim() shim.Info { return i.shimAs(TypeBackend) }

// shimAs is i as the shims carry it; serve validates i first (an invalid
// Config has no schema).
func (i Info) shimAs(typ Type) shim.Info {
	s, _ := i.Schema()
	return shim.Info{Type: string(typ), Name: i.Name, Version: i.Version, Description: i.Description, APIVersions: APIVersions, Config: s}
}

// ServeBackend serves a backend plugin; it returns only when the core ends
// the plugin, and the plugin exits when the core process dies. Logs go to
// stderr as JSON for the core to re-emit. opts adjust it (WithLogger,
// WithDebug; DebugFlag on the command line needs none).
func ServeBackend(info Info, factory backend.Factory, opts ...Option) {
	serve(info, opts, func(max int) *goplugin.ServeConfig { return shim.ServeConfig(info.shim(), factory, max) })
}

// ServeBuilder serves a builder plugin, as ServeBackend a backend.
func ServeBuilder(info Info, factory builder.Factory, opts ...Option) {
	serve(info, opts, func(max int) *goplugin.ServeConfig {
		return shim.ServeBuilderConfig(info.shimAs(TypeBuilder), factory, max)
	})
}

// ServeBridge serves a bridge plugin, as ServeBackend a backend.
func ServeBridge(info Info, factory bridge.Factory, opts ...Option) {
	serve(info, opts, func(max int) *goplugin.ServeConfig {
		return shim.ServeBridgeConfig(info.shimAs(TypeBridge), factory, max)
	})
}

func serve(info Info, opts []Option, config func(maxMessage int) *goplugin.ServeConfig) {
	o := collectOptions(opts)
	if err := info.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := o.logger
	if log == nil {
		log = Logger(info.Name)
	}
	if o.debug {
		// Started by hand: no parent to watch, no handshake to answer.
		cfg := config(DefaultMaxMessage)
		cfg.Logger = log
		if err := serveDebug(info.Name, cfg, o); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if os.Getenv(shim.Handshake.MagicCookieKey) == "" {
		fmt.Fprintf(os.Stderr, "%s %s is an MCP-Forge plugin: the mcp-forge server starts it (or run it with %s and give the core the line it prints).\n", info.Name, info.Version, DebugFlag)
		os.Exit(2)
	}
	watchParent(log, func() { os.Exit(3) })
	if msg := versionMismatch(info.Name, os.Getenv("PLUGIN_PROTOCOL_VERSIONS")); msg != "" {
		// go-plugin answers anyway with this plugin's version, which the
		// core then refuses; this line says why on the core's log.
		log.Error(msg)
	}
	cfg := config(maxMessageFromEnv(log))
	cfg.Logger = log
	goplugin.Serve(cfg)
}

// versionMismatch is what to tell the operator when the core offers
// (go-plugin's PLUGIN_PROTOCOL_VERSIONS, "1,2") no API version this plugin
// serves; "" when they share one or the core names none.
func versionMismatch(name, offered string) string {
	if offered == "" {
		return ""
	}
	for _, v := range strings.Split(offered, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && slices.Contains(APIVersions, n) {
			return ""
		}
	}
	return fmt.Sprintf("plugin %s speaks plugin API version(s) %v, and this MCP-Forge core offers only %s: upgrade MCP-Forge to a release serving API %d, or use a build of the plugin made with an SDK of API %s",
		name, APIVersions, offered, APIVersion, offered)
}

// Logger is a plugin's logger: JSON on stderr, which the core re-emits.
func Logger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Trace, Output: os.Stderr, JSONFormat: true})
}
