package forge

import (
	"context"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/forge/commands"
	"github.com/mcp-forge/mcp-forge/core/fsquota"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/watchdog"
)

// The operator commands (core/forge/commands), each one call of
// cmd/mcp-forge, over the core serve would run: the same runtime, plugins
// and logs.

// Doctor checks this host for serving cfg: Podman, runtime, cgroups,
// limits, images, paths, plugins and routing, and the HTTP listener when
// it would serve HTTP. ErrFailed if a check failed.
func Doctor(ctx context.Context, cfg config.Config, o Options) error {
	return commands.Doctor(ctx, machine.core(cfg, o), o.io())
}

// ListImages lists the images the backends run and whether they are
// built. ErrFailed if one is missing or a plugin did not load.
func ListImages(ctx context.Context, cfg config.Config, o Options) error {
	return commands.ListImages(ctx, machine.core(cfg, o), o.io())
}

// ListPlugins shows the plugins with their versions and checksum status.
// ErrFailed if there is none or one cannot be probed.
func ListPlugins(ctx context.Context, cfg config.Config, o Options) error {
	return commands.ListPlugins(ctx, cfg, o.io())
}

// NewTenantKey makes an API key and prints it with the sha256 to put in
// [tenants.NAME].
func NewTenantKey(o Options) error { return commands.NewTenantKey(o.io()) }

// HashTenantKey prints the sha256 of the key on the first line of stdin.
func HashTenantKey(o Options) error { return commands.HashTenantKey(o.io()) }

// ErrNoWatchdogPipe is the watchdog started by hand, not by serve.
var ErrNoWatchdogPipe = watchdog.ErrNoPipe

// Watchdog is the watchdog process of server serverID (started by Serve):
// it waits for its server's end on the inherited pipe, then removes the
// server's containers and releases its workspaces.
func Watchdog(cfg config.Config, serverID string) error {
	return commands.Watchdog(machine.core(cfg, Options{}), serverID)
}

func (o Options) io() commands.IO {
	return commands.IO{Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr}
}

// core is the core cfg configures as the commands see it, made of m's
// parts: its runtime lacks what serve's would (its watchdog runs first;
// the workspace quota is this host's, detected only if the guarantees are
// asked).
func (m parts) core(cfg config.Config, o Options) commands.Core {
	addr, _ := HTTPAddress(cfg, o.HTTPAddr)
	quota := sync.OnceValue(func() fsquota.Mechanism { return fsquota.Detect(cfg.Volumes.BasePath) })
	return commands.Core{Config: cfg, ConfigPath: o.ConfigPath, Instance: Instance(cfg.Volumes.BasePath), HTTPAddr: addr,
		Runtime: func(log hclog.Logger) (runtime.Runtime, error) {
			rt, err := m.runtime(cfg, log)
			if err != nil {
				return nil, err
			}
			return withHostGaps(rt, detected(quota), true), nil
		},
		Plugins: func(ctx context.Context) []plugins.Status { return m.inspect(ctx, cfg) },
		Audit:   func() (*audit.Logger, error) { return m.audit(cfg) },
		Log:     func() (hclog.Logger, func(), error) { return NewLogger(cfg) },
	}
}

// detected is the workspace quota this host gives, as detected when first
// asked (hostGaps).
type detected func() fsquota.Mechanism

func (d detected) Enforced() bool { return d().Enforced() }
func (d detected) String() string { return d().String() }
