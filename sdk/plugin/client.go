package plugin

import (
	"context"
	"fmt"
	"os/exec"
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
	gp      *goplugin.Client
	api     int
	backend *shim.BackendClient
}

// Launch starts the plugin binary at path, negotiates the API version and
// returns a handle. The plugin's log lines are re-emitted on logger.
func Launch(path string, logger hclog.Logger) (*Client, error) {
	gp := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: BackendPluginSet(Info{}, nil),
		Cmd:              exec.Command(path),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger:           logger,
		Managed:          false,
	})
	rpc, err := gp.Client()
	if err != nil {
		gp.Kill()
		if strings.Contains(strings.ToLower(err.Error()), "incompatible api version") {
			return nil, fmt.Errorf("plugin %s is incompatible: %v; this core speaks plugin API versions %v (upgrade whichever side is older)", path, err, APIVersions)
		}
		return nil, fmt.Errorf("start plugin %s: %w", path, err)
	}
	raw, err := rpc.Dispense(TypeBackend)
	if err != nil {
		gp.Kill()
		return nil, fmt.Errorf("plugin %s: %w", path, err)
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
func (c *Client) Kill() { c.gp.Kill() }

// IsUnavailable reports an error that means the plugin process is gone.
func IsUnavailable(err error) bool { return shim.IsUnavailable(err) }
