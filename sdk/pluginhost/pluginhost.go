// Package pluginhost is the core's side of the plugin contract: it launches
// plugin binaries with hashicorp/go-plugin, negotiates the API version,
// checks what a plugin reports, and hands it the host services. Plugin
// authors import sdk/plugin instead; nothing of go-plugin leaks there.
package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/shim"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// Described is what a plugin reports about itself.
type Described struct {
	Type        plugin.Type
	Name        string
	Version     string
	Description string
	APIVersions []int
	// Config is the schema of [plugins.NAME.config]; nil: none declared
	// (a v1 plugin), the table is not checked.
	Config *configschema.Schema
}

// Client is the core's handle on one running plugin process.
type Client struct {
	gp       *goplugin.Client
	api      int
	backend  *shim.BackendClient
	builder  *shim.BuilderClient
	bridge   *shim.BridgeClient
	lifeline *os.File // held open while the plugin may live (see sdk/plugin's parent watch)
	fds      *shim.FDSender
}

// Options adjust a launch.
type Options struct {
	// SHA256 pins the binary (hex). A plugin runs with the core's user and
	// is handed host services; pinning makes a binary replaced on disk after
	// it was configured (or verified) fail to start instead of inheriting
	// that trust. go-plugin checks it just before exec. "": not pinned.
	SHA256 string
	// MaxMessage is the gRPC message limit of the plugin's connections, both
	// sides (plugin.MessageLimit of the execution limits); 0: the default.
	MaxMessage int
	// Dir is the directory the plugin process starts in; "": the core's
	// own. A builder works in it (builder.WorkDir): the core creates it
	// (mode 0700) and keeps it between starts.
	Dir string
	// V1Builder is what a builder of API v1 is told in request fields v2
	// has not (its work directory is Dir whatever WorkDir says).
	V1Builder V1BuilderPaths
}

// V1BuilderPaths are the host paths a builder of API v1 expects in its
// requests: environment_builder.uv_cache_path and find_links.
type V1BuilderPaths = shim.V1BuilderPaths

// Handshake is the go-plugin handshake every forge plugin answers.
var Handshake = shim.Handshake

// BackendPluginSet is the versioned go-plugin set of a backend (factory nil:
// the core's client side). For tests that serve plugins by hand.
func BackendPluginSet(info plugin.Info, factory backend.Factory) map[int]goplugin.PluginSet {
	return shim.BackendPluginSet(shimInfo(info), factory, 0)
}

func shimInfo(info plugin.Info) shim.Info { return shimInfoAs(info, plugin.TypeBackend) }

func shimInfoAs(info plugin.Info, typ plugin.Type) shim.Info {
	s, _ := info.Schema()
	return shim.Info{Type: string(typ), Name: info.Name, Version: info.Version, Description: info.Description, Config: s}
}

// ServeConfig is the configuration a plugin process serves with, for tests
// that serve a backend in-process (go-plugin's test mode) and Attach to it.
func ServeConfig(info plugin.Info, factory backend.Factory, maxMessage int) *goplugin.ServeConfig {
	return shim.ServeConfig(shimInfo(info), factory, maxMessage)
}

// ServeBuilderConfig is ServeConfig for a builder.
func ServeBuilderConfig(info plugin.Info, factory builder.Factory, maxMessage int) *goplugin.ServeConfig {
	return shim.ServeBuilderConfig(shimInfoAs(info, plugin.TypeBuilder), factory, maxMessage)
}

// ServeBridgeConfig is ServeConfig for a bridge.
func ServeBridgeConfig(info plugin.Info, factory bridge.Factory, maxMessage int) *goplugin.ServeConfig {
	return shim.ServeBridgeConfig(shimInfoAs(info, plugin.TypeBridge), factory, maxMessage)
}

// Launch starts the plugin binary at path, negotiates the API version and
// returns a handle. The plugin's log lines are re-emitted on logger. The
// plugin gets none of the core's environment (SkipHostEnv: no socket paths,
// tokens or FORGE_* secrets leak into a semi-trusted process), and the
// gRPC connection is mutually authenticated with per-launch certificates
// (AutoMTLS), so another local process cannot talk to either side.
func Launch(path string, logger hclog.Logger, opts Options) (*Client, error) {
	maxMessage := shim.MaxMessageOr(opts.MaxMessage)
	// The plugin watches fd 3: when this process dies, the kernel closes our
	// end and the plugin exits, so no plugin outlives a killed core.
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start plugin %s: lifeline pipe: %w", path, err)
	}
	// A relative path would be looked up from Dir once the process starts
	// there, not from where the core (and Verify) found it.
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	// Fd 4 is the plugin's end of its own fd channel, over which its Dials
	// get local sockets instead of a relay; each plugin has its own, and no
	// other child of the core inherits either end (both close-on-exec).
	fds, fdPlugin, err := shim.NewFDChannel()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		return nil, fmt.Errorf("start plugin %s: %w", path, err)
	}
	cmd := exec.Command(path)
	cmd.Dir = opts.Dir
	cmd.ExtraFiles = []*os.File{lifeR, fdPlugin}
	// SkipHostEnv: only these reach the plugin, never the core's environment.
	cmd.Env = []string{plugin.ParentFDEnv + "=3", shim.FDChannelEnv + "=4", plugin.MaxMessageEnv + "=" + strconv.Itoa(maxMessage)}
	closeOwn := func() { lifeW.Close(); fds.Close() }
	cfg := shim.ClientConfig(maxMessage)
	cfg.Cmd, cfg.Logger, cfg.SkipHostEnv, cfg.AutoMTLS = cmd, logger, true, true
	if opts.SHA256 != "" {
		sum, err := hex.DecodeString(opts.SHA256)
		if err != nil || len(sum) != sha256.Size {
			lifeR.Close()
			fdPlugin.Close()
			closeOwn()
			return nil, fmt.Errorf("plugin %s: pinned sha256 %q is not 64 hex digits", path, opts.SHA256)
		}
		cfg.SecureConfig = &goplugin.SecureConfig{Checksum: sum, Hash: sha256.New()}
	}
	gp := goplugin.NewClient(cfg)
	rpc, err := gp.Client()
	lifeR.Close() // the plugin has its copies
	fdPlugin.Close()
	if err != nil {
		closeOwn()
		gp.Kill()
		if strings.Contains(strings.ToLower(err.Error()), "incompatible api version") {
			return nil, fmt.Errorf("plugin %s is incompatible: %v; this core speaks plugin API versions %v (upgrade whichever side is older)", path, err, shim.CoreAPIVersions)
		}
		if strings.Contains(err.Error(), "checksums did not match") {
			return nil, fmt.Errorf("plugin %s: its sha256 does not match the pinned one; refusing to run it (rebuild, or update sha256 in [plugins.NAME]): %w", path, err)
		}
		return nil, fmt.Errorf("start plugin %s: %w", path, err)
	}
	c, err := dispense(gp, rpc)
	if err != nil {
		closeOwn()
		gp.Kill()
		return nil, fmt.Errorf("plugin %s: %w", path, err)
	}
	c.lifeline, c.fds = lifeW, fds
	c.setFDChannel(fds)
	v1 := opts.V1Builder
	v1.WorkDir = opts.Dir
	c.builder.UseV1Paths(v1)
	return c, nil
}

// ParseReattach reads plugin.ReattachEnv's value: plugin name → where a
// plugin in debug mode listens (the line plugin.DebugFlag prints).
func ParseReattach(v string) (map[string]plugin.Reattach, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var m map[string]plugin.Reattach
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return nil, fmt.Errorf("%s is not the JSON object a plugin in debug mode prints: %w", plugin.ReattachEnv, err)
	}
	for name, r := range m {
		if r.Protocol != string(goplugin.ProtocolGRPC) || r.Address == "" || (r.Network != "unix" && r.Network != "tcp") || r.ProtocolVersion <= 0 {
			return nil, fmt.Errorf("%s: plugin %s: want protocol grpc, a protocol_version, network unix or tcp and an address; got %+v", plugin.ReattachEnv, name, r)
		}
	}
	return m, nil
}

// Reattached connects to a plugin running in debug mode (plugin.DebugFlag)
// where r says; the core neither starts it nor checks its binary.
func Reattached(r plugin.Reattach, maxMessage int, logger hclog.Logger) (*Client, error) {
	var addr net.Addr
	var err error
	if r.Network == "unix" {
		addr, err = net.ResolveUnixAddr("unix", r.Address)
	} else {
		addr, err = net.ResolveTCPAddr("tcp", r.Address)
	}
	if err != nil {
		return nil, fmt.Errorf("reattach plugin at %s %s: %w", r.Network, r.Address, err)
	}
	return Attach(&goplugin.ReattachConfig{Protocol: goplugin.Protocol(r.Protocol), ProtocolVersion: r.ProtocolVersion, Addr: addr, Pid: r.Pid, Test: true}, maxMessage, logger)
}

// Attach connects to a plugin served in this process (go-plugin's test
// mode, with ServeConfig); it has no process or lifeline of its own.
func Attach(rc *goplugin.ReattachConfig, maxMessage int, logger hclog.Logger) (*Client, error) {
	cfg := shim.ClientConfig(maxMessage)
	cfg.Reattach, cfg.Logger = rc, logger
	// A reattached client negotiates nothing: it speaks the served version.
	cfg.Plugins = cfg.VersionedPlugins[rc.ProtocolVersion]
	gp := goplugin.NewClient(cfg)
	rpc, err := gp.Client()
	if err != nil {
		gp.Kill()
		return nil, fmt.Errorf("attach plugin: %w", err)
	}
	c, err := dispense(gp, rpc)
	if err != nil {
		gp.Kill()
		return nil, fmt.Errorf("attach plugin: %w", err)
	}
	return c, nil
}

// dispense makes the client of every plugin type over the one connection:
// which type the plugin is, it says itself (Describe); a client is only a
// wrapper until it is called, and the Plugin service is common to all.
func dispense(gp *goplugin.Client, rpc goplugin.ClientProtocol) (*Client, error) {
	c := &Client{gp: gp, api: gp.NegotiatedVersion()}
	for _, typ := range []plugin.Type{plugin.TypeBackend, plugin.TypeBuilder, plugin.TypeBridge} {
		raw, err := shim.Dispense(rpc, string(typ))
		if err != nil {
			return nil, err
		}
		switch v := raw.(type) {
		case *shim.BackendClient:
			c.backend = v
		case *shim.BuilderClient:
			c.builder = v
		case *shim.BridgeClient:
			c.bridge = v
		}
	}
	return c, nil
}

// setFDChannel hands fds to whichever plugin types the plugin serves.
func (c *Client) setFDChannel(fds *shim.FDSender) {
	if c.backend != nil {
		c.backend.SetFDChannel(fds)
	}
	if c.builder != nil {
		c.builder.SetFDChannel(fds)
	}
	if c.bridge != nil {
		c.bridge.SetFDChannel(fds)
	}
}

// Describe asks the plugin who it is and checks the answer: a semver
// version, and the negotiated API version among those it lists.
func (c *Client) Describe(ctx context.Context) (Described, error) {
	i, err := c.backend.Info(ctx)
	if err != nil {
		return Described{}, err
	}
	d := Described{Type: plugin.Type(i.Type), Name: i.Name, Version: i.Version, Description: i.Description, APIVersions: i.APIVersions, Config: i.Config}
	return d, Check(d, c.api)
}

// Check validates what a plugin reported, given the negotiated API version.
func Check(d Described, api int) error {
	if _, err := semver.Parse(d.Version); err != nil {
		return fmt.Errorf("plugin %s reports version %q, which is not semver (MAJOR.MINOR.PATCH): %v", d.Name, d.Version, err)
	}
	if !slices.Contains(d.APIVersions, api) {
		return fmt.Errorf("plugin %s lists API versions %v but the handshake negotiated %d", d.Name, d.APIVersions, api)
	}
	return nil
}

// ExpectType refuses a plugin whose reported type is not one of want: a
// core launches a plugin for one purpose, and a plugin of another type
// answers none of that purpose's calls.
//
// This is where the type a plugin reports (a string on the wire) is
// checked: one that no SDK knows is refused by name.
func ExpectType(d Described, want ...plugin.Type) error {
	if slices.Contains(want, d.Type) {
		return nil
	}
	switch d.Type {
	case plugin.TypeBackend, plugin.TypeBuilder, plugin.TypeBridge:
		names := make([]string, len(want))
		for i, w := range want {
			names[i] = string(w)
		}
		return fmt.Errorf("plugin %s is of type %q, which is not used by this core yet (it loads %s plugins); remove it from plugin_dir or [plugins]", d.Name, d.Type, strings.Join(names, ", "))
	}
	return fmt.Errorf("plugin %s reports type %q, which no MCP-Forge SDK knows (types: %s, %s, %s)", d.Name, d.Type, plugin.TypeBackend, plugin.TypeBuilder, plugin.TypeBridge)
}

// APIVersion is the negotiated plugin API version.
func (c *Client) APIVersion() int { return c.api }

// Configure gives the plugin its host services and configuration (JSON
// of [plugins.NAME.config]), and the negotiated API version, which the
// plugin checks.
func (c *Client) Configure(ctx context.Context, h host.Host, cfg []byte) error {
	return c.ConfigureWith(ctx, h, cfg, nil)
}

// ConfigureWith is Configure with the core's own settings for the plugin
// (JSON object), sent apart from the operator's keys (merged under them for
// a v1 plugin).
func (c *Client) ConfigureWith(ctx context.Context, h host.Host, cfg, core []byte) error {
	return c.backend.Configure(ctx, h, cfg, core, c.api)
}

// Backend is the plugin as a backend.Backend (a backend.SessionBackend when
// the plugin is stateful: check Capabilities).
func (c *Client) Backend() backend.Backend { return c.backend }

// Builder is the plugin as a builder.Builder (check Describe's Type first:
// a plugin of another type answers its calls with Unimplemented).
func (c *Client) Builder() builder.Builder { return c.builder }

// Bridge is the plugin as a bridge.Bridge (check Describe's Type first).
func (c *Client) Bridge() bridge.Bridge { return c.bridge }

// Exited reports whether the plugin process has ended.
func (c *Client) Exited() bool { return c.gp.Exited() }

// Pid is the plugin's process id (0 if unknown).
func (c *Client) Pid() int {
	if rc := c.gp.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Shutdown asks the plugin to release what it holds (its
// backend.Shutdowner) within ctx's deadline, before Kill. A v1 plugin has
// no such call: nil at once.
func (c *Client) Shutdown(ctx context.Context, reason string) error {
	if c.api < 2 {
		return nil
	}
	return c.backend.Shutdown(ctx, reason)
}

// Kill ends the plugin process.
func (c *Client) Kill() {
	c.gp.Kill()
	if c.lifeline != nil {
		c.lifeline.Close()
	}
	if c.fds != nil {
		c.fds.Close()
	}
}

// IsUnavailable reports an error that means the plugin process is gone.
func IsUnavailable(err error) bool { return shim.IsUnavailable(err) }

// ObserveCalls has every call the core makes to its plugins observed by f,
// which returns the context to call with and the call's end (the core's
// spans of plugin calls: the trace context of the returned context is what
// the plugin continues). nil stops it.
func ObserveCalls(f func(ctx context.Context, method string) (context.Context, func(error))) {
	shim.ObserveCalls(f)
}
