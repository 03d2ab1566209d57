package plugin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/shim"
)

// Described is what a plugin reports about itself.
type Described struct {
	Type        string
	Name        string
	Version     string
	Description string
	APIVersions []int
}

// Client is the core's handle on one running plugin process.
type Client struct {
	gp       *goplugin.Client
	api      int
	backend  *shim.BackendClient
	lifeline *os.File // held open while the plugin may live; see parent.go
}

// LaunchOption adjusts Launch.
type LaunchOption func(*launchOptions)

type launchOptions struct{ maxMessage int }

// WithMaxMessage sets the gRPC message limit of the plugin's connections,
// both sides (see MessageLimit); the default is DefaultMaxMessage.
func WithMaxMessage(n int) LaunchOption { return func(o *launchOptions) { o.maxMessage = n } }

// ClientConfig is the core's go-plugin configuration for a backend plugin
// whose connections carry messages up to maxMessage bytes (sdktest attaches
// with the same configuration).
func ClientConfig(maxMessage int) *goplugin.ClientConfig {
	maxMessage = maxMessageOr(maxMessage)
	return &goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: backendPluginSet(Info{}, nil, maxMessage),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		GRPCDialOptions:  shim.DialOptions(maxMessage),
		Managed:          false,
	}
}

// Launch starts the plugin binary at path, negotiates the API version and
// returns a handle. The plugin's log lines are re-emitted on logger. The
// plugin exits by itself if this process dies.
func Launch(path string, logger hclog.Logger, opts ...LaunchOption) (*Client, error) {
	var o launchOptions
	for _, f := range opts {
		f(&o)
	}
	maxMessage := maxMessageOr(o.maxMessage)
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start plugin %s: lifeline pipe: %w", path, err)
	}
	cmd := exec.Command(path)
	cmd.ExtraFiles = []*os.File{lifeR} // fd 3 in the plugin
	// The host environment is added here, not by go-plugin, so that ours
	// comes last and wins over a same-named variable inherited by the core.
	cmd.Env = append(os.Environ(), ParentFDEnv+"=3", MaxMessageEnv+"="+strconv.Itoa(maxMessage))
	cfg := ClientConfig(maxMessage)
	cfg.Cmd, cfg.Logger, cfg.SkipHostEnv = cmd, logger, true
	gp := goplugin.NewClient(cfg)
	rpc, err := gp.Client()
	lifeR.Close() // the plugin has its copy
	if err != nil {
		lifeW.Close()
		gp.Kill()
		if strings.Contains(strings.ToLower(err.Error()), "incompatible api version") {
			return nil, fmt.Errorf("plugin %s is incompatible: %v; this core speaks plugin API versions %v (upgrade whichever side is older)", path, err, APIVersions)
		}
		return nil, fmt.Errorf("start plugin %s: %w", path, err)
	}
	raw, err := rpc.Dispense(TypeBackend)
	if err != nil {
		lifeW.Close()
		gp.Kill()
		return nil, fmt.Errorf("plugin %s: %w", path, err)
	}
	return &Client{gp: gp, api: gp.NegotiatedVersion(), backend: raw.(*shim.BackendClient), lifeline: lifeW}, nil
}

// Attach connects to a plugin served in this process (sdktest); it has no
// process or lifeline of its own.
func Attach(rc *goplugin.ReattachConfig, maxMessage int, logger hclog.Logger) (*Client, error) {
	cfg := ClientConfig(maxMessage)
	cfg.Reattach, cfg.Logger = rc, logger
	// A reattached client negotiates nothing: it speaks the served version.
	cfg.Plugins = cfg.VersionedPlugins[rc.ProtocolVersion]
	gp := goplugin.NewClient(cfg)
	rpc, err := gp.Client()
	if err != nil {
		gp.Kill()
		return nil, fmt.Errorf("attach plugin: %w", err)
	}
	raw, err := rpc.Dispense(TypeBackend)
	if err != nil {
		gp.Kill()
		return nil, fmt.Errorf("attach plugin: %w", err)
	}
	return &Client{gp: gp, api: gp.NegotiatedVersion(), backend: raw.(*shim.BackendClient)}, nil
}

// Describe asks the plugin who it is.
func (c *Client) Describe(ctx context.Context) (Described, error) {
	i, err := c.backend.Info(ctx)
	if err != nil {
		return Described{}, err
	}
	return Described{Type: i.Type, Name: i.Name, Version: i.Version, Description: i.Description, APIVersions: i.APIVersions}, nil
}

// APIVersion is the negotiated plugin API version.
func (c *Client) APIVersion() int { return c.api }

// Configure gives the plugin its host services and configuration.
func (c *Client) Configure(ctx context.Context, h host.Host, cfg []byte) error {
	return c.backend.Configure(ctx, h, cfg, c.api)
}

// Backend is the plugin as a backend.Backend.
func (c *Client) Backend() backend.Backend { return c.backend }

// Exited reports whether the plugin process has ended.
func (c *Client) Exited() bool { return c.gp.Exited() }

// Pid is the plugin's process id (0 if unknown).
func (c *Client) Pid() int {
	if rc := c.gp.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Kill ends the plugin process.
func (c *Client) Kill() {
	c.gp.Kill()
	if c.lifeline != nil {
		c.lifeline.Close()
	}
}

// IsUnavailable reports an error that means the plugin process is gone.
func IsUnavailable(err error) bool { return shim.IsUnavailable(err) }
