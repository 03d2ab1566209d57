package forge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/files"
	"github.com/mcp-forge/mcp-forge/core/forge/pluginset"
	"github.com/mcp-forge/mcp-forge/core/fsquota"
	"github.com/mcp-forge/mcp-forge/core/hostsvc"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/procid"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// Runtime is the container engine the core runs on: containers, and the
// images of custom environments (core/runtime/podman).
type Runtime interface {
	runtime.Runtime
	runtime.ImageBuilder
}

// podQuota is the quota of workspaces that are only the staging copies of
// pods' workspaces: plain directories, each bounded where it is used, by
// its pod's emptyDir (the runtime's workspace-quota guarantee). Each has an
// owner file beside it naming its server, so that the next start removes
// those of a server that died (a Podman core's loop images carry the same).
type podQuota struct{ base, server string }

const ownerSuffix = ".owner"

func (q podQuota) Provision(path string, _ int64, _, _ int) error {
	if err := os.MkdirAll(path, 0o711); err != nil {
		return err
	}
	return os.WriteFile(path+ownerSuffix, []byte(q.server), 0o600)
}

func (podQuota) Release(path string) error {
	if err := os.Remove(path + ownerSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (podQuota) Enforced() bool { return true }

// Sweep removes the staging directories of servers that are gone.
func (q podQuota) Sweep() (int, error) {
	owners, err := filepath.Glob(filepath.Join(q.base, "sessions", "*"+ownerSuffix))
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, o := range owners {
		b, err := os.ReadFile(o)
		if err != nil || string(b) == q.server || procid.Alive(string(b)) {
			continue
		}
		dir := strings.TrimSuffix(o, ownerSuffix)
		if err := errors.Join(os.RemoveAll(dir), os.Remove(o)); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func (podQuota) Close() error { return nil }

// featureOf is what rt (the runtime itself, under the test harness's
// gaps) offers as T, if it does: a way to its sandboxes' workspaces when
// they are not the core's directories, its snapshots, its CPU updates.
func featureOf[T any](rt Runtime) (T, bool) {
	for {
		if g, ok := rt.(gapRuntime); ok {
			rt = g.Runtime
			continue
		}
		t, ok := rt.(T)
		return t, ok
	}
}

// remoteOf is rt's way to its sandboxes' workspaces, if they are not the
// core's directories.
func remoteOf(rt Runtime) runtime.RemoteWorkspace {
	r, _ := featureOf[runtime.RemoteWorkspace](rt)
	return r
}

// quota gives workspaces their size-limited filesystems (fsquota.Quota).
type quota interface {
	workspace.Provisioner
	Sweep() (int, error)
	Close() error
}

// parts are what New takes from the machine: the container engine, the
// workspace quota, the audit log, and the start of the plugins. Tests
// replace them (a scripted runtime, a recording quota, a plugin start
// that provisions like a warm pool).
type parts struct {
	runtime     func(config.Config, hclog.Logger) (Runtime, error)
	quota       func(config.Config, hclog.Logger) (quota, error)
	audit       func(config.Config) (*audit.Logger, error)
	loadPlugins func(ctx context.Context, m *plugins.Manager, hostFor plugins.HostFactory) []error
	// watchdog starts the process that removes this server's containers if
	// it dies (serve on stdio).
	watchdog func(configPath string, log hclog.Logger) (watchdogHandle, error)
	// inspect learns what the plugins are, without serving (doctor, images).
	inspect func(context.Context, config.Config) []plugins.Status
	// bound: a watchdog removes this core's sandboxes if it dies (serve
	// sets it once the watchdog runs).
	bound bool
}

// machine are the real parts.
var machine = parts{
	runtime: runtimeFor,
	quota: func(cfg config.Config, log hclog.Logger) (quota, error) {
		// Never Required: a workspace the kernel cannot bound is refused
		// by the policy, as a missing workspace-quota guarantee, when its
		// container is created (audited, waivable by name).
		return fsquota.New(cfg.Volumes.BasePath, log, fsquota.Options{})
	},
	audit: func(cfg config.Config) (*audit.Logger, error) {
		l, err := audit.Open(cfg.Security.AuditLog, int64(cfg.Security.AuditMaxSize), cfg.Security.AuditKeep)
		if err == nil && cfg.Security.AuditStdout {
			l.Mirror(os.Stdout)
		}
		return l, err
	},
	loadPlugins: func(ctx context.Context, m *plugins.Manager, _ plugins.HostFactory) []error { return m.LoadAll(ctx) },
	watchdog:    startWatchdog,
	inspect:     pluginset.Inspect,
}

// undoStack is what a successful New did, as undo steps: each step that
// holds something pushes how to release it; run releases everything
// pushed, last first (a failed New, or Close).
type undoStack struct {
	mu    sync.Mutex
	steps []undoStep
}

type undoStep struct {
	what string
	undo func(context.Context) error
}

func (u *undoStack) push(what string, undo func(context.Context) error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.steps = append(u.steps, undoStep{what, undo})
}

// undoTimeout bounds the whole release (containers to stop, sessions to
// close).
const undoTimeout = 30 * time.Second

// run undoes every step in reverse, once: a second run finds nothing.
// A step that fails is logged; the others still run.
func (u *undoStack) run(log hclog.Logger) {
	u.mu.Lock()
	steps := u.steps
	u.steps = nil
	u.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	for i := len(steps) - 1; i >= 0; i-- {
		if err := steps[i].undo(ctx); err != nil {
			log.Warn("could not release "+steps[i].what, "error", err)
		}
	}
}

// grants resolves the tool grants of plugins' containers: the hosts get
// it before any plugin starts; the tool bridge, which needs its plugin
// running, is resolved once it exists (before anything is served). Until
// then, and without a bridge plugin, there is no grant to give.
type grants struct {
	svc atomic.Pointer[toolbridge.Service]
}

func (g *grants) resolve(s *toolbridge.Service) { g.svc.Store(s) }

// Grant implements hostsvc.GrantFunc.
func (g *grants) Grant(plugin, token string) (*toolbridge.Grant, error) {
	s := g.svc.Load()
	if s == nil {
		return nil, errors.New("this server serves no tool grants (no bridge plugin)")
	}
	return s.Grant(plugin, token)
}

// crashes releases what a crashed plugin held: its containers, and the
// workspaces of its containers no live session holds. It is the plugin
// manager's OnCrash from before any plugin starts; the engine, whose
// sessions it marks dead, is resolved once built (before that no session
// exists to mark or keep).
type crashes struct {
	sb  *sandbox.Manager
	log hclog.Logger

	mu     sync.Mutex
	hosts  map[string]*hostsvc.Host // the host services of each plugin's current process
	engine atomic.Pointer[engine.Engine]
}

func (c *crashes) add(name string, h *hostsvc.Host) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hosts[name] = h
}

func (c *crashes) resolve(e *engine.Engine) { c.engine.Store(e) }

// sessionFS finds the pod of a session among every plugin's containers
// (under its own id, or the pool workspace it was bound to): the session
// tools' way to its files on a runtime that keeps them there.
func (c *crashes) sessionFS(r runtime.RemoteWorkspace, ws *workspace.Manager) files.RemoteSessions {
	return func(internal string) (files.SessionFS, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, h := range c.hosts {
			if id, ok := h.SessionContainer(internal, ws.Bound(internal)); ok {
				return hostsvc.SessionFS{R: r, ID: id}, nil
			}
		}
		return nil, fmt.Errorf("%w: session %s has no sandbox yet", workspace.ErrNotFound, internal)
	}
}

func (c *crashes) crashed(name string) {
	eng := c.engine.Load()
	keep := func(string) bool { return false }
	if eng != nil {
		eng.MarkBackendDead(name)
		keep = eng.Registry().Holds
	}
	n := c.sb.RemoveOwnedBy(context.Background(), name)
	c.mu.Lock()
	h := c.hosts[name]
	c.mu.Unlock()
	released := 0
	if h != nil {
		released = h.Crashed(keep)
	}
	c.log.Warn("plugin crashed; its sessions are marked dead", "plugin", name, "containers_removed", n, "workspaces_released", released)
}

// hostGaps are the gaps of the core's own making: workspace-quota when q
// cannot bound workspaces (its kernel mechanism), lifetime-bound when no
// watchdog removes the sandboxes of a core that dies (bound: serve started
// one; a core built in a test process has none).
func hostGaps(q interface{ Enforced() bool }, bound bool) []runtime.Gap {
	var out []runtime.Gap
	if !q.Enforced() {
		why := "workspaces are plain directories, bounded only by a periodic walk"
		switch m := q.(type) {
		case interface{ Mechanism() fsquota.Mechanism }: // the live quota
			why = "no filesystem per workspace: " + m.Mechanism().String()
		case fmt.Stringer: // a detected mechanism (doctor)
			why = "no filesystem per workspace: " + m.String()
		}
		out = append(out, runtime.Gap{Guarantee: runtime.WorkspaceQuota, Why: why,
			Fix: "run the server as root with loop devices and e2fsprogs (make setup)"})
	}
	if !bound {
		out = append(out, runtime.Gap{Guarantee: runtime.LifetimeBound, Why: "no watchdog runs for this core (it was not started by `mcp-forge serve`)",
			Fix: "run the core with `mcp-forge serve`, which starts its watchdog first"})
	}
	return out
}

// gapRuntime is a runtime that also lacks the guarantees gaps names: the
// host's (hostGaps), or what a test scripts (NewWithGaps).
type gapRuntime struct {
	Runtime
	gaps func() []runtime.Gap
}

// Capabilities are the runtime's (runtime.Capable).
func (g gapRuntime) Capabilities() runtime.Capabilities { return runtime.CapabilitiesOf(g.Runtime) }

func (g gapRuntime) Guarantees(ctx context.Context) (runtime.Report, error) {
	rep, err := g.Runtime.Guarantees(ctx)
	if err != nil {
		return rep, err
	}
	return rep.With(g.gaps()...), nil
}

// withHostGaps is rt lacking what hostGaps says. The sandboxes of a
// runtime that stages workspaces (Kubernetes) have neither the host's
// workspaces nor its watchdog: the pod's emptyDir and
// activeDeadlineSeconds are in the runtime's own report.
func withHostGaps(rt Runtime, q interface{ Enforced() bool }, bound bool) Runtime {
	if runtime.CapabilitiesOf(rt).StagedWorkspaces {
		return rt
	}
	return gapRuntime{Runtime: rt, gaps: func() []runtime.Gap { return hostGaps(q, bound) }}
}

// sessionHosts moves session containers between this core and its
// replicas through each plugin's host services (handover.SessionHosts).
type sessionHosts struct{ c *crashes }

func (s sessionHosts) host(plugin string) (*hostsvc.Host, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if h := s.c.hosts[plugin]; h != nil {
		return h, nil
	}
	return nil, fmt.Errorf("plugin %s is not running", plugin)
}

func (s sessionHosts) Endpoints(plugin, container string) (string, []runtime.SessionEndpoint, bool) {
	h, err := s.host(plugin)
	if err != nil {
		return "", nil, false
	}
	return h.Endpoints(container)
}

func (s sessionHosts) Adopt(plugin, container, workspace string, eps []runtime.SessionEndpoint) error {
	h, err := s.host(plugin)
	if err != nil {
		return err
	}
	return h.Adopt(container, workspace, eps)
}

func (s sessionHosts) Release(plugin, container string) {
	if h, err := s.host(plugin); err == nil {
		h.Release(container)
	}
}

func (s sessionHosts) Remove(ctx context.Context, plugin, container string) error {
	h, err := s.host(plugin)
	if err != nil {
		return err
	}
	return h.Remove(ctx, container)
}

func (s sessionHosts) CanSnapshot(plugin, container string) (int64, error) {
	h, err := s.host(plugin)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", sandbox.ErrNoSnapshot, err)
	}
	return h.CanSnapshot(container)
}

// rootlessSnapshots are a rootless server's: none whole. A snapshot
// copies the sandbox's workspace with it, and a rootless server cannot
// read what the sandbox made private there (a sub-id's 0600 files:
// ipykernel's own kernel.json in every Python session, any mkstemp).
// Measured: checkpoint_session failed "copy the workspace: permission
// denied", and a suspend, whose save ends the sandbox before the copy,
// would lose the session. Sessions are checkpointed as variables instead,
// with this reason.
type rootlessSnapshots struct {
	sessionHosts
	// whole is the sandbox's own answer (sessionHosts'), asked first.
	whole interface {
		CanSnapshot(plugin, container string) (int64, error)
	}
}

// errRootlessSnapshot is why.
var errRootlessSnapshot = fmt.Errorf("%w: this server is not root, and cannot copy the files the sandbox keeps private in its workspace (a whole snapshot needs a root server)", sandbox.ErrNoSnapshot)

// CanSnapshot says why not: the sandbox's own reason first (a runc
// sandbox is never saved whole), else the server's.
func (s rootlessSnapshots) CanSnapshot(plugin, container string) (int64, error) {
	if _, err := s.whole.CanSnapshot(plugin, container); err != nil {
		return 0, err
	}
	return 0, errRootlessSnapshot
}

func (rootlessSnapshots) Snapshot(context.Context, string, string, string, int64, bool) error {
	return errRootlessSnapshot
}

func (s sessionHosts) Snapshot(ctx context.Context, plugin, container, dir string, budget int64, stop bool) error {
	h, err := s.host(plugin)
	if err != nil {
		return err
	}
	return h.Snapshot(ctx, container, dir, budget, stop)
}

func (s sessionHosts) Restore(ctx context.Context, plugin, session, dir string) (string, error) {
	h, err := s.host(plugin)
	if err != nil {
		return "", err
	}
	return h.Restore(ctx, session, dir)
}

func (s sessionHosts) Running(ctx context.Context, plugin, container string) (bool, error) {
	h, err := s.host(plugin)
	if err != nil {
		return false, err
	}
	st, err := h.State(ctx, container)
	return st.Running, err
}
