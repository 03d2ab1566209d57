// Package forge assembles the core from a configuration: audit log, policy,
// Podman runtime, sandbox manager, plugins, engine and MCP server.
package forge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/environments"
	"github.com/mcp-forge/mcp-forge/core/fsquota"
	"github.com/mcp-forge/mcp-forge/core/hostsvc"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/core/packages"
	"github.com/mcp-forge/mcp-forge/core/periodic"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime/podman"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/seccomp"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// Forge is a running core.
type Forge struct {
	Config  config.Config
	Log     hclog.Logger
	Audit   *audit.Logger
	Sandbox *sandbox.Manager
	// Workspaces owns the sessions' and runs' directories on the host.
	Workspaces *workspace.Manager
	Plugins    *plugins.Manager
	Engine     *engine.Engine
	MCP        *mcpserver.Server
	// Environments builds custom environments; nil when disabled.
	Environments *environments.Service
	// Tools is the MCP tool bridge (mcp_tools), nil without a bridge plugin.
	Tools *toolbridge.Service
	quota *fsquota.Quota
	stop  context.CancelFunc
}

// Instance names the containers of every server sharing a base path.
func Instance(base string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(base)))
	return hex.EncodeToString(sum[:6])
}

// LoadConfig loads and validates a configuration, including the policy's
// checks of it (configured images against the allowlist). path "" means the
// built-in defaults.
func LoadConfig(path string) (config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return cfg, err
	}
	if errs := policy.CheckConfig(cfg); len(errs) > 0 {
		return cfg, errs
	}
	// The package lists and patterns are read now, so `config check`
	// reports a bad file or pattern rather than the first build.
	if _, err := packages.New(cfg.EnvironmentBuilder); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// PluginDir is where default plugins are looked for.
func PluginDir(cfg config.Config) string {
	if cfg.Server.PluginDir != "" {
		return cfg.Server.PluginDir
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return filepath.Dir(exe)
}

// PluginSettings is what the core tells every plugin: the output limits,
// and the default memory and timeouts (a warm pool creates containers
// before any request says its limits).
// Nothing here depends on which plugin it is: a backend's image is its own
// setting ([plugins.NAME.config] image, merged over these by the plugin
// manager), by default the image the plugin declares.
func PluginSettings(cfg config.Config) func(string) map[string]any {
	maxOut, maxImg := int64(cfg.Execution.MaxOutput), int64(cfg.Execution.MaxImageSize)
	return func(string) map[string]any {
		// default_memory travels as the configuration writes it ("512m"):
		// that is the plugins' wire format.
		return map[string]any{"max_output_bytes": maxOut, "max_image_bytes": maxImg,
			"default_memory": cfg.Execution.DefaultMemory.String(), "default_timeout": cfg.Execution.DefaultTimeout, "max_timeout": cfg.Execution.MaxTimeout}
	}
}

// MessageLimit is the gRPC message size plugin connections need to carry
// code up to execution.max_code_size, output up to execution.max_output and
// images up to execution.max_image_size.
func MessageLimit(cfg config.Config) int {
	return plugin.MessageLimit(int64(cfg.Execution.MaxCodeSize), int64(cfg.Execution.MaxOutput), int64(cfg.Execution.MaxImageSize))
}

// New builds the core, reconciles containers left by dead servers and starts
// the plugins. Close releases everything.
func New(ctx context.Context, cfg config.Config, log hclog.Logger) (*Forge, error) {
	al, err := audit.Open(cfg.Security.AuditLog, int64(cfg.Security.AuditMaxSize), cfg.Security.AuditKeep)
	if err != nil {
		return nil, fmt.Errorf("%w (set security.audit_log to a writable path)", err)
	}
	al.OnError(func(err error) { log.Error("audit log write failed", "error", err) })
	if err := os.MkdirAll(filepath.Join(cfg.Volumes.BasePath, "sessions"), 0o711); err != nil {
		al.Close()
		return nil, fmt.Errorf("volumes.base_path: %w", err)
	}
	if err := privateBase(cfg.Volumes.BasePath); err != nil { // rootless.go
		al.Close()
		return nil, err
	}
	if _, err := seccomp.Install(cfg.Volumes.BasePath); err != nil {
		al.Close()
		return nil, fmt.Errorf("volumes.base_path: %w", err)
	}
	ps := policy.FromConfig(cfg)
	ps.ToolGrantTarget = bridge.SandboxDir
	pol := policy.New(ps, filepath.EvalSymlinks)
	rt := podman.New(cfg.Server.PodmanSocket)
	sb := sandbox.New(rt, pol, al, log.Named("sandbox"), sandbox.Options{
		Instance: Instance(cfg.Volumes.BasePath), EnforceResourceLimits: cfg.Security.EnforceResourceLimits})
	f := &Forge{Config: cfg, Log: log, Audit: al, Sandbox: sb}

	if n, err := sb.Reconcile(ctx); err != nil {
		log.Warn("could not reconcile containers at start (is Podman running? `mcp-forge doctor`)", "error", err)
	} else if n > 0 {
		log.Info("removed containers left by a previous run", "count", n)
	}

	entries := plugins.Discover(cfg, PluginDir(cfg))
	fsq, err := fsquota.New(cfg.Volumes.BasePath, log.Named("quota"), fsquota.Options{Required: cfg.Volumes.EnforceQuota})
	if err != nil {
		al.Close()
		return nil, fmt.Errorf("volumes: %w", err)
	}
	if n, err := fsq.Sweep(); err != nil {
		log.Warn("could not release workspaces left by a previous run", "error", err)
	} else if n > 0 {
		log.Info("released workspaces left by a previous run", "count", n)
	}
	ws := workspace.New(cfg.Volumes.BasePath, sb.ServerTag(), int64(cfg.Volumes.SessionQuota), fsq)
	f.Workspaces, f.quota = ws, fsq
	// The host services of each plugin's current process, so that a crash
	// releases what its containers held.
	var hostsMu sync.Mutex
	hosts := map[string]*hostsvc.Host{}
	f.Plugins = plugins.NewManager(entries, func(name string) host.Host {
		h := hostsvc.New(name, sb, al, ws)
		hostsMu.Lock()
		hosts[name] = h
		hostsMu.Unlock()
		h.SetGrants(func(owner, token string) (*toolbridge.Grant, error) {
			if f.Tools == nil {
				return nil, errors.New("this server serves no tool grants (no bridge plugin)")
			}
			return f.Tools.Grant(owner, token)
		})
		return h
	}, PluginSettings(cfg), al, log.Named("plugin"))
	f.Plugins.MaxMessage = MessageLimit(cfg)
	var bridges *bridgeChoice
	f.Plugins.TypeSettings, bridges = bridgeSettings(cfg)
	for _, err := range f.Plugins.LoadAll(ctx) {
		log.Error("plugin not loaded", "error", err)
	}
	if len(entries) == 0 {
		log.Warn("no plugins found; build them with `make build`", "plugin_dir", PluginDir(cfg))
	}
	if f.Engine, err = engine.New(cfg, pol, f.Plugins, ws, al, log.Named("engine")); err != nil {
		f.Plugins.Close()
		sb.Shutdown(ctx)
		// The plugins' warm pools provisioned workspaces meanwhile: a
		// server that does not start releases them as a stopping one does
		// (its watchdog, told of a clean stop, leaves them alone).
		if err := ws.Close(); err != nil {
			log.Warn("could not remove every workspace", "error", err)
		}
		_ = fsq.Close()
		al.Close()
		return nil, fmt.Errorf("the configuration does not fit the plugins:\n%w", err)
	}
	f.Engine.AddResultNotice(sb.LimitsNotice) // every result says when limits were not enforced
	f.Engine.RunGone = sb.RunGone
	f.Engine.ImagePresent = func(ctx context.Context, ref string) (bool, error) {
		_, ok, err := sb.Runtime().Image(ctx, ref)
		return ok, err
	}
	loadedBridges := f.Plugins.Typed(plugin.TypeBridge)
	if len(loadedBridges) > 1 && cfg.Bridge.Plugin == "" {
		log.Warn("several bridge plugins are loaded; the first to start has the MCP servers and is used: set [bridge] plugin to choose", "bridges", strings.Join(loadedBridges, ","), "using", bridges.get())
	}
	if name, why := pickBridge(cfg, loadedBridges, bridges.get()); name != "" {
		t, err := toolbridge.New(cfg, name, func(ctx context.Context) (bridge.Bridge, error) { return f.Plugins.Bridge(ctx, name) },
			filepath.Join(cfg.Volumes.BasePath, "tools"), al, log.Named("bridge"))
		if err != nil {
			f.Engine.SetTools(nil, err.Error())
			log.Error("MCP tools are unavailable", "error", err)
		} else {
			f.Tools = t
			f.Engine.SetTools(t, "")
		}
	} else {
		f.Engine.SetTools(nil, why)
		if len(cfg.MCPTools) > 0 {
			log.Warn("mcp_tools are configured but cannot be called", "reason", why)
		}
	}
	f.MCP = mcpserver.New(f.Engine, cfg)
	f.Plugins.OnCrash = func(name string) {
		f.Engine.MarkBackendDead(name)
		n := sb.RemoveOwnedBy(context.Background(), name)
		hostsMu.Lock()
		h := hosts[name]
		hostsMu.Unlock()
		released := 0
		if h != nil {
			released = h.Crashed(f.Engine.HoldsSession)
		}
		log.Warn("plugin crashed; its sessions are marked dead", "plugin", name, "containers_removed", n, "workspaces_released", released)
	}

	bg, stop := context.WithCancel(context.Background())
	f.stop = stop
	go f.sweep(bg)
	f.environments(bg, pol, rt) // environments.go
	go f.Engine.Reaper(bg)
	return f, nil
}

// sweep removes this server's containers that outlived any possible run,
// e.g. after a plugin crashed mid-call.
func (f *Forge) sweep(ctx context.Context) {
	maxAge := time.Duration(f.Config.Execution.MaxTimeout)*time.Second + 5*time.Minute
	periodic.Every(ctx, time.Duration(f.Config.Sessions.CleanupInterval)*time.Second, func(ctx context.Context) bool {
		if n, err := f.Sandbox.RemoveOlderThan(ctx, maxAge); err == nil && n > 0 {
			f.Log.Info("removed stale containers", "count", n)
		}
		return true
	})
}

// Close stops plugins, removes this server's containers and closes the log.
func (f *Forge) Close() {
	f.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.Engine.CloseAll(ctx)
	if f.Tools != nil {
		f.Tools.Close()
	}
	f.Plugins.Close()
	f.Sandbox.Shutdown(ctx)
	if err := f.Workspaces.Close(); err != nil {
		f.Log.Warn("could not remove every workspace", "error", err)
	}
	if err := f.quota.Close(); err != nil {
		f.Log.Warn("could not remove the quota state of this server", "error", err)
	}
	f.Audit.Close()
}
