// Package forge assembles the core from a configuration: audit log, policy,
// runtime, sandbox manager, plugins, engine and MCP server; serves it (on
// stdio or over HTTP); and is the one door of cmd/mcp-forge, each command
// one call. Its parts with a job of their own are beneath it: the plugins
// as the core runs them (pluginset), network by host name (network), the
// lines of /readyz (ready), what a core with replicas runs beside serving
// (replicas), and the operator commands other than serve (commands).
package forge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/config/loader"
	"github.com/mcp-forge/mcp-forge/core/doctor"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/engine/assembly"
	"github.com/mcp-forge/mcp-forge/core/environments"
	"github.com/mcp-forge/mcp-forge/core/forge/network"
	"github.com/mcp-forge/mcp-forge/core/forge/pluginset"
	"github.com/mcp-forge/mcp-forge/core/forge/ready"
	"github.com/mcp-forge/mcp-forge/core/forge/replicas"
	"github.com/mcp-forge/mcp-forge/core/hostroots"
	"github.com/mcp-forge/mcp-forge/core/hostsvc"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/core/packages"
	"github.com/mcp-forge/mcp-forge/core/periodic"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/procid"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/sandboxgrant"
	"github.com/mcp-forge/mcp-forge/core/seccomp"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
	"github.com/mcp-forge/mcp-forge/sdk/pluginhost"
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
	Engine     *assembly.Core
	MCP        *mcpserver.Server
	// Environments builds custom environments; nil when disabled.
	Environments *environments.Service
	// Tools is the MCP tool bridge (mcp_tools), nil without a bridge plugin.
	Tools *toolbridge.Service

	runtime Runtime
	caps    runtime.Capabilities // what the runtime declares it can do
	quotas  *replicas.Quotas     // the tenants' quotas across replicas; nil: this core is alone
	// httpPort is the MCP port served (--http or server.port), where
	// replicas forward calls to each other.
	httpPort int
	undo     undoStack   // what New did, for Close
	probe    ready.Probe // the runtime's lines of /readyz, across rounds
}

// SeccompProfile is MCP-Forge's seccomp profile (JSON), as a Kubernetes
// node installs it as a Localhost profile.
func SeccompProfile() []byte { return seccomp.JSON() }

// GVisorSeccompProfile is the profile's variant for pods under gVisor
// (runtime.kubernetes.runtime_class): runsc applies a pod's profile in its
// Sentry only with oci-seccomp, and answers every refusal with EPERM, so
// clone3 is allowed there (seccomp.GVisorJSON).
func GVisorSeccompProfile() []byte { return seccomp.GVisorJSON() }

// Instance names the containers of every server sharing a base path.
func Instance(base string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(base)))
	return hex.EncodeToString(sum[:6])
}

// LoadConfig loads and validates a configuration, including the policy's
// checks of it (configured images against the allowlist). path "" means the
// built-in defaults.
func LoadConfig(path string) (config.Config, error) {
	cfg, err := loader.Load(path)
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

// CheckPluginConfigs checks every [plugins.NAME.config] table against the
// schema its plugin declares, as serve does at start-up: each plugin with
// a table is started only to describe itself (nothing is configured, no
// container made). The plugin binary is the one source of its schema, so
// a check cannot disagree with the binary serve will run. A plugin that
// cannot be started fails the check too: its table could not be checked.
func CheckPluginConfigs(ctx context.Context, cfg config.Config) error {
	var errs []error
	for _, e := range plugins.Discover(cfg, pluginset.Dir(cfg)) {
		if len(e.Config) == 0 {
			continue
		}
		_, d, err := plugins.Probe(ctx, e)
		if err != nil {
			errs = append(errs, fmt.Errorf("plugins.%s.config cannot be checked: plugin %s (%s) does not start: %w", e.Name, e.Name, e.Path, err))
			continue
		}
		if err := plugins.CheckConfig(e, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ConfigNotes are what `config check` adds to a valid configuration: the
// old settings it uses and their current form.
func ConfigNotes(cfg config.Config) []string { return policy.AliasNotes(cfg) }

// New builds the core, reconciles containers left by dead servers and starts
// the plugins. Close releases everything.
func New(ctx context.Context, cfg config.Config, log hclog.Logger) (*Forge, error) {
	return build(ctx, cfg, log, machine)
}

// NewWithGaps is New over a runtime that reports gaps on top of what it
// measures: for end-to-end tests of the policy's guarantee decisions on a
// host that enforces everything. Nothing in the configuration reaches it.
func NewWithGaps(ctx context.Context, cfg config.Config, log hclog.Logger, gaps ...runtime.Gap) (*Forge, error) {
	m := machine
	real := m.runtime
	m.runtime = func(cfg config.Config, log hclog.Logger) (Runtime, error) {
		rt, err := real(cfg, log)
		if err != nil {
			return nil, err
		}
		return gapRuntime{Runtime: rt, gaps: func() []runtime.Gap { return gaps }}, nil
	}
	return build(ctx, cfg, log, m)
}

// build is New with the parts it takes from the machine. Every step that
// holds something pushes its undo on f.undo; a failing step returns, and
// the steps done so far are undone in reverse, as Close undoes them all.
func build(ctx context.Context, cfg config.Config, log hclog.Logger, m parts) (_ *Forge, err error) {
	f := &Forge{Config: cfg, Log: log}
	defer func() {
		if err != nil {
			f.undo.run(log)
		}
	}()
	al, err := m.audit(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w (set security.audit_log to a writable path)", err)
	}
	al.OnError(func(err error) { log.Error("audit log write failed", "error", err) })
	f.Audit = al
	f.undo.push("audit log", func(context.Context) error { return al.Close() })
	if err := os.MkdirAll(filepath.Join(cfg.Volumes.BasePath, "sessions"), 0o711); err != nil {
		return nil, fmt.Errorf("volumes.base_path: %w", err)
	}
	if err := privateBase(cfg.Volumes.BasePath); err != nil { // rootless.go
		return nil, err
	}
	if _, err := seccomp.Install(cfg.Volumes.BasePath); err != nil {
		return nil, fmt.Errorf("volumes.base_path: %w", err)
	}
	ps := policy.FromConfig(cfg)
	ps.ToolGrantTarget = bridge.SandboxDir
	ps.NetworkTarget = egress.SandboxDir
	ps.HostRootsTarget = host.RootsDir
	var roots *hostroots.Roots
	if len(cfg.Volumes.HostRoots) > 0 {
		if roots, err = hostroots.New(cfg.Volumes.HostRoots, tenant.Local); err != nil {
			return nil, err
		}
		staged, err := roots.Stage(cfg.Volumes.BasePath)
		if err != nil {
			return nil, err
		}
		f.undo.push("host roots", func(context.Context) error { roots.Unstage(); return nil })
		if !staged {
			log.Warn("host roots are mounted by their paths: this server cannot bind them (not root), so a root replaced by a link between the last check and a sandbox's start would be followed", "roots", len(cfg.Volumes.HostRoots))
		}
		ps.HostRoots, ps.HostRootsStage = roots.MountSources(), hostroots.StageDir(cfg.Volumes.BasePath)
	}
	pol := policy.New(ps, filepath.EvalSymlinks)
	// The workspace quota and the lifetime bound are guarantees of the
	// sandboxes as much as the runtime's limits are: their gaps are
	// reported with the runtime's.
	raw, err := m.runtime(cfg, log)
	if err != nil {
		return nil, err
	}
	f.caps = runtime.CapabilitiesOf(raw)
	var fsq quota = podQuota{base: cfg.Volumes.BasePath, server: procid.Self()}
	if !f.caps.StagedWorkspaces {
		fsq, err = m.quota(cfg, log.Named("quota"))
	}
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	f.undo.push("quota state", func(context.Context) error { return fsq.Close() })
	rt := withHostGaps(raw, fsq, m.bound)
	cpu, _ := featureOf[sandbox.CPUUpdater](raw)      // Podman; a pod's quota stays as created
	inside, _ := featureOf[runtime.SocketDialer](raw) // Podman's agent relay, for gVisor sandboxes
	snaps, _ := featureOf[runtime.Snapshotter](raw)   // Podman's runsc snapshots, for gVisor sandboxes
	sb := sandbox.New(rt, pol, al, log.Named("sandbox"), sandbox.Options{Instance: Instance(cfg.Volumes.BasePath), Remote: remoteOf(raw), Inside: inside, Snapshots: snaps, CPU: cpu})
	f.Sandbox, f.runtime = sb, rt
	if n, err := sb.Reconcile(ctx); err != nil {
		log.Warn("could not reconcile containers at start (is Podman running? `mcp-forge doctor`)", "error", err)
	} else if n > 0 {
		log.Info("removed containers left by a previous run", "count", n)
	}
	if st := f.caps.Sessions; st != nil {
		// A restart in the same pod: the previous process's sessions are
		// anyone's to take over, this process's too.
		if n, err := st.ReleaseAll(ctx); err != nil {
			log.Warn("could not hand over the sessions of this pod's previous core process", "error", err)
		} else if n > 0 {
			log.Info("handed over the sessions of this pod's previous core process", "count", n)
		}
	}

	if stop := replicas.StartReaper(f.caps.Reaper, al); stop != nil {
		f.undo.push("orphan reaper", func(context.Context) error { stop(); return nil })
	}

	if n, err := fsq.Sweep(); err != nil {
		log.Warn("could not release workspaces left by a previous run", "error", err)
	} else if n > 0 {
		log.Info("released workspaces left by a previous run", "count", n)
	}
	ws := workspace.New(cfg.Volumes.BasePath, sb.ServerTag(), int64(cfg.Volumes.SessionQuota), fsq)
	f.Workspaces = ws
	if remoteOf(raw) != nil {
		ws.SetRemote()
	}
	// The plugins' warm pools provision workspaces as they start: a server
	// that does not start releases them as a stopping one does (its
	// watchdog, told of a clean stop, leaves them alone).
	f.undo.push("workspaces", func(context.Context) error { return ws.Close() })
	// The containers exist once plugins start; they go before the
	// workspaces they mount.
	f.undo.push("containers", func(ctx context.Context) error { sb.Shutdown(ctx); return nil })

	// What the plugins' hosts and the crash handler need is in place
	// before any plugin starts; the tool bridge and the engine, which need
	// the plugins running, are resolved below, before anything is served.
	netPolicy, channels, err := network.New(cfg, al, log.Named("egress"))
	if err != nil {
		return nil, err
	}
	f.undo.push("network channels", func(context.Context) error { channels.Close(); return nil })
	grants, sandboxGrants := &grants{}, sandboxgrant.New()
	crashes := &crashes{sb: sb, log: log, hosts: map[string]*hostsvc.Host{}}
	hostFor := func(name string) host.Host {
		h := hostsvc.New(name, sb, al, ws)
		h.SetGrants(grants.Grant)
		h.SetNetwork(channels.Lookup)
		h.SetSandboxGrants(sandboxGrants.Lookup)
		h.SetIsolationFloor(func() string { return builderFloor(cfg, f.Plugins, name) })
		crashes.add(name, h)
		return h
	}
	entries := plugins.Discover(cfg, pluginset.Dir(cfg))
	pm := plugins.NewManager(entries, hostFor, pluginset.Settings(cfg), al, log.Named("plugin"))
	pm.MaxMessage = pluginset.MessageLimit(cfg)
	if pm.Reattach, err = pluginhost.ParseReattach(os.Getenv(plugin.ReattachEnv)); err != nil {
		return nil, err
	}
	var bridges *pluginset.BridgeChoice
	pm.TypeSettings, bridges = pluginset.BridgeSettings(cfg)
	pluginset.ConfigureBuilders(cfg, pm)
	pm.OnCrash = crashes.crashed
	f.Plugins = pm
	f.undo.push("plugins", func(context.Context) error { pm.Close(); return nil })
	var confErrs []error
	for _, err := range m.loadPlugins(ctx, pm, hostFor) {
		// A plugin that refuses its [plugins.NAME.config] is a mistake in
		// forge.toml, refused like one of the core's own keys: the server
		// does not start half-configured.
		if ce := (*plugins.ConfigError)(nil); errors.As(err, &ce) {
			confErrs = append(confErrs, err)
			continue
		}
		log.Error("plugin not loaded", "error", err)
	}
	if len(confErrs) > 0 {
		return nil, errors.Join(confErrs...)
	}
	if len(entries) == 0 {
		log.Warn("no plugins found; build them with `make build`", "plugin_dir", pluginset.Dir(cfg))
	}

	tools, toolsWhy := f.toolBridge(bridges)
	if tools != nil {
		f.Tools = tools
		grants.resolve(tools)
		f.undo.push("tool bridge", func(context.Context) error { tools.Close(); return nil })
	}
	eng, err := assembly.New(cfg, pol, pm, ws, al, log.Named("engine"))
	if err != nil {
		return nil, fmt.Errorf("the configuration does not fit the plugins:\n%w", err)
	}
	f.Engine = eng
	if f.quotas = replicas.ShareQuotas(f.caps.Quotas, eng.Registry()); f.quotas != nil {
		// Undone after the sessions (a stack): the last usage written says
		// what this replica no longer holds.
		f.undo.push("quota sharing", func(context.Context) error { f.quotas.Stop(); return nil })
	}
	f.undo.push("sessions", func(ctx context.Context) error { eng.CloseAll(ctx); return nil })
	eng.AddResultNotice(sb.GuaranteeNotice) // every result says which waived guarantees it went without
	eng.Isolation = sb.Isolation
	eng.RunGone = sb.RunGone
	eng.ImagePresent = func(ctx context.Context, ref string) (bool, error) {
		_, ok, err := rt.Image(ctx, ref)
		return ok, err
	}
	eng.SetTools(tools, toolsWhy)
	eng.SetNetwork(netPolicy, channels)
	if roots != nil {
		eng.SetHostRoots(roots)
	}
	eng.SetSandboxGrants(sandboxGrants, roots, f.caps.StagedWorkspaces) // a pod mounts a root's claim, not a directory of this machine
	if r := remoteOf(raw); r != nil {
		eng.SetRemoteSessions(crashes.sessionFS(r, ws))
	}
	if st := f.caps.Sessions; st != nil {
		eng.SetSessionStore(st, sessionHosts{crashes})
	}
	if snaps != nil && os.Geteuid() != 0 {
		eng.SetSnapshots(rootlessSnapshots{sessionHosts{crashes}, sessionHosts{crashes}}) // their variables, saying why
	} else if snaps != nil {
		eng.SetSnapshots(sessionHosts{crashes}) // gVisor sessions checkpointed whole
	}
	crashes.resolve(eng.Engine)
	f.MCP = mcpserver.New(eng, cfg, log.Named("mcp"))
	// Before the sessions, plugins and audit log go: a build run as a task
	// is cancelled and its end audited.
	f.undo.push("tasks", func(ctx context.Context) error { f.MCP.Tasks().Close(ctx); return nil })

	bg, stop := context.WithCancel(context.Background())
	f.undo.push("background work", func(context.Context) error { stop(); return nil })
	go f.sweep(bg)
	f.environments(bg, pol, rt) // environments.go
	go eng.Reaper(bg)
	return f, nil
}

// Guarantees is doctor's guarantee check over this core's runtime, the one
// its sandboxes are decided on.
func (f *Forge) Guarantees() doctor.Check { return doctor.Guarantees(f.runtime, f.Config) }

// toolBridge is the MCP tool bridge through the bridge plugin picked among
// those loaded, or nil and why there is none.
func (f *Forge) toolBridge(bridges *pluginset.BridgeChoice) (*toolbridge.Service, string) {
	cfg, log := f.Config, f.Log
	loaded := f.Plugins.Typed(plugin.TypeBridge)
	if len(loaded) > 1 && cfg.Bridge.Plugin == "" {
		log.Warn("several bridge plugins are loaded; the first to start has the MCP servers and is used: set [bridge] plugin to choose", "bridges", strings.Join(loaded, ","), "using", bridges.Chosen())
	}
	name, why := pluginset.PickBridge(cfg, loaded, bridges.Chosen())
	if name == "" {
		if len(cfg.MCPTools) > 0 {
			log.Warn("mcp_tools are configured but cannot be called", "reason", why)
		}
		return nil, why
	}
	pm := f.Plugins
	t, err := toolbridge.New(cfg, name, func(ctx context.Context) (bridge.Bridge, error) { return pm.Bridge(ctx, name) },
		filepath.Join(cfg.Volumes.BasePath, "tools"), f.Audit, log.Named("bridge"))
	if err != nil {
		log.Error("MCP tools are unavailable", "error", err)
		return nil, err.Error()
	}
	return t, ""
}

// sweep removes this server's containers that outlived any possible run,
// e.g. after a plugin crashed mid-call.
func (f *Forge) sweep(ctx context.Context) {
	maxAge := time.Duration(f.Config.Execution.LongestTimeout())*time.Second + 5*time.Minute
	periodic.Every(ctx, time.Duration(f.Config.Sessions.CleanupInterval)*time.Second, func(ctx context.Context) bool {
		if n, err := f.Sandbox.RemoveOlderThan(ctx, maxAge); err == nil && n > 0 {
			f.Log.Info("removed stale containers", "count", n)
		}
		return true
	})
}

// Close stops the background work, closes the sessions, the tool bridge
// and the plugins, removes this server's containers and workspaces and
// closes the audit log: every step of New undone, in reverse.
func (f *Forge) Close() { f.undo.run(f.Log) }

// builderFloor is the isolation the containers of plugin name run under at
// least: gVisor for a builder's when a tenant is held to it, since a
// builder lists the packages of a base image (running the image's shell)
// that may be that tenant's environment; nothing otherwise.
func builderFloor(cfg config.Config, pm *plugins.Manager, name string) string {
	if pm == nil || !slices.Contains(pm.Typed(plugin.TypeBuilder), name) {
		return ""
	}
	for _, t := range cfg.Tenants {
		if t.Isolation == runtime.IsolationGVisor {
			return runtime.IsolationGVisor
		}
	}
	return ""
}
