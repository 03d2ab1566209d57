// Package hostsvc implements the host services (sdk/host) that the core
// offers each plugin. A Host is constructed per plugin: the plugin's identity
// comes from here, never from a request, and every container request goes
// through the sandbox manager's policy, audit and ownership checks.
package hostsvc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/hostroots"
	"github.com/mcp-forge/mcp-forge/core/periodic"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/sandboxgrant"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Host serves one plugin.
type Host struct {
	plugin string
	m      *sandbox.Manager
	rec    audit.Recorder
	ws     *workspace.Manager

	mu         sync.Mutex
	workspaces map[string]*tracked // container id → its workspace

	grants   GrantFunc   // nil: no tool grants
	network  NetworkFunc // nil: no network grants
	sandbox  SandboxFunc // nil: no sandbox grants
	channels Channels
	// floor is the isolation every container of this plugin runs under at
	// least ("" or nil: none beyond its grants').
	floor func() string
}

// GrantFunc resolves a tool grant token for plugin plugin
// (toolbridge.Service.Grant): only a live grant issued to that plugin.
type GrantFunc func(plugin, token string) (*toolbridge.Grant, error)

// SetGrants lets containers of this plugin mount the tool grants the core
// issued to it (host.Intent.ToolsGrant).
func (h *Host) SetGrants(f GrantFunc) { h.grants = f }

// NetworkFunc resolves a network grant token for plugin plugin
// (egress.Channels.Lookup): only a live channel opened for that plugin.
type NetworkFunc func(plugin, token string) (*egress.Channel, error)

// SetNetwork lets containers of this plugin mount the network channels
// the core opened for it (host.Intent.NetworkGrant).
func (h *Host) SetNetwork(f NetworkFunc) { h.network = f }

// SandboxFunc resolves a sandbox grant token for plugin plugin
// (sandboxgrant.Registry.Lookup): only a live grant issued to that plugin.
type SandboxFunc func(plugin, token string) (*sandboxgrant.Grant, error)

// SetSandboxGrants lets containers of this plugin have what the core
// granted its runs (host.Intent.SandboxGrant): host roots, an isolation.
func (h *Host) SetSandboxGrants(f SandboxFunc) { h.sandbox = f }

// SetIsolationFloor runs every container this plugin creates under at
// least the isolation f names when it is created ("": none beyond its
// sandbox grant's): a builder's, whose containers are no run's, but read
// images a strict tenant may have shaped.
func (h *Host) SetIsolationFloor(f func() string) { h.floor = f }

type tracked struct {
	*workspace.Workspace
	stop      context.CancelFunc // ends the quota watch
	exceeded  string             // why the container was killed, if it was
	endpoints map[string]Endpoint
	intent    host.Intent // what it was created from (no Files): a snapshot's restore creates it again
	hostRoots bool        // it mounts host roots (its sandbox grant's), which a snapshot does not hold
	// sandbox is the grant it was created with (nil: none); claimed: a
	// run's or session's grant was given it (Claim), so no other may be.
	sandbox *sandboxgrant.Grant
	claimed bool
}

// New returns the host services for plugin plugin.
func New(plugin string, m *sandbox.Manager, rec audit.Recorder, ws *workspace.Manager) *Host {
	h := &Host{plugin: plugin, m: m, rec: rec, ws: ws, workspaces: map[string]*tracked{}, channels: managerSockets{m}}
	return h
}

// Sandbox implements host.Host.
func (h *Host) Sandbox() host.Sandbox { return h }

// Audit implements host.Host.
func (h *Host) Audit() host.Audit { return auditSvc{h} }

// Create implements host.Sandbox.
func (h *Host) Create(ctx context.Context, in host.Intent) (host.Container, error) {
	grant, err := lookupGrant(h, "container.create", in.SessionID, in.ToolsGrant, h.grants, toolbridge.RuleNotGranted, "this server serves no tool grants (no bridge plugin)")
	if err != nil {
		return host.Container{}, err
	}
	channel, err := lookupGrant(h, "container.create", in.SessionID, in.NetworkGrant, h.network, egress.RuleNotGranted, "this server grants no network (no [network] policy is served)")
	if err != nil {
		return host.Container{}, err
	}
	sg, err := lookupGrant(h, "container.create", in.SessionID, in.SandboxGrant, h.sandbox, sandboxgrant.RuleNotGranted, "this server issues no sandbox grants")
	if err != nil {
		return host.Container{}, err
	}
	if channel != nil && len(in.Command) == 0 {
		return host.Container{}, host.Errorf(host.KindInvalid, "a container with a network grant needs a command: the forwarder starts before it")
	}
	places, err := host.EndpointPlaces(in)
	if err != nil {
		h.rec.Record(audit.Entry{Event: audit.ContainerCreate, Severity: audit.Warning, SessionID: in.SessionID, Success: false, Error: err.Error(),
			Details: map[string]any{"rule": RuleEndpointIntent, "plugin": h.plugin}})
		return host.Container{}, err
	}
	lim, err := h.limits(in)
	if err != nil {
		return host.Container{}, err
	}
	w, err := h.ws.Create(in.SessionID)
	if err != nil {
		if errors.Is(err, workspace.ErrBadSessionID) {
			return host.Container{}, host.Errorf(host.KindInvalid, "%v", err)
		}
		return host.Container{}, host.Errorf(host.KindInternal, "%v", err)
	}
	cleanup := func() {
		if w.Ephemeral {
			h.ws.Remove(w)
		}
	}
	// Files first: a mount may name one (a file mount).
	for name, data := range in.Files {
		if err := w.WriteFile(name, data); err != nil {
			cleanup()
			return host.Container{}, fileErr(err)
		}
	}
	isolation := ""
	if sg != nil {
		isolation = sg.Isolation()
	}
	if h.floor != nil && h.floor() == runtime.IsolationGVisor {
		isolation = runtime.IsolationGVisor // the stricter of the grant's and the floor
	}
	id, err := h.create(ctx, in, w, lim, grant, channel, sg, isolation, places)
	if err != nil {
		cleanup()
		return host.Container{}, err
	}
	return host.Container{ID: id}, nil
}

// limits are the limits the intent asks for, as the policy resolves them.
func (h *Host) limits(in host.Intent) (runtime.Limits, error) {
	lim, err := h.m.Policy().ResolveLimits(policy.LimitRequest{Memory: in.Memory, CPUQuota: in.CPUQuota, Pids: in.Pids, Timeout: int64(in.Timeout / time.Second)})
	if err != nil {
		return lim, host.Errorf(host.KindInvalid, "%v", err)
	}
	return lim, nil
}

// create creates the container of intent in over workspace w, which holds
// its files, with the grants the intent named, and tracks it.
func (h *Host) create(ctx context.Context, in host.Intent, w *workspace.Workspace, lim runtime.Limits, grant *toolbridge.Grant, channel *egress.Channel, sg *sandboxgrant.Grant, isolation string, places map[string]string) (string, error) {
	intent := in
	intent.Files = nil
	var mounts []runtime.Mount
	outDir := "" // the working directory's place in the workspace
	for _, m := range in.Mounts {
		src, err := w.Dir(m.Subdir)
		if err != nil {
			return "", fileErr(err)
		}
		mounts = append(mounts, runtime.Mount{Source: src, Target: m.Target, ReadOnly: m.ReadOnly})
		if grant != nil && !m.ReadOnly && m.Target == in.WorkDir {
			// Image content of tool results lands in the working directory.
			grant.Attach(src, m.Target)
			outDir = m.Subdir
		}
	}
	if grant != nil {
		mounts = append(mounts, runtime.Mount{Source: grant.Dir(), Target: bridge.SandboxDir, ReadOnly: true})
		in.Env = grant.Env(in.Env)
	}
	if sg != nil {
		rm, err := sg.Mounts()
		if err != nil {
			h.rec.Record(audit.Entry{Event: audit.SecurityViolation, Severity: audit.Warning, SessionID: in.SessionID, Success: false, Error: err.Error(),
				Details: map[string]any{"rule": hostroots.RuleChanged, "operation": "container.create", "plugin": h.plugin}})
			return "", host.Errorf(host.KindPolicy, "%v", err)
		}
		mounts = append(mounts, rm...)
	}
	if channel != nil {
		mounts = append(mounts, runtime.Mount{Source: channel.Dir(), Target: egress.SandboxDir, ReadOnly: true})
		in.Env = channel.Env(in.Env)
		in.Command = egress.Command(agent.Path, in.Command)
	}
	labels := map[string]string{}
	for k, v := range in.Labels {
		labels[runtime.LabelPluginPrefix+k] = v
	}
	if in.CodeHash != "" {
		labels[runtime.LabelCodeHash] = in.CodeHash
	}
	if w.Ephemeral {
		labels[runtime.LabelOneShot] = "true"
	}
	id, err := h.m.Create(ctx, policy.Intent{
		Image: in.Image, Command: in.Command, Env: in.Env, WorkDir: in.WorkDir, Labels: labels,
		Mounts: mounts, Limits: lim, SessionID: w.SessionID, Workspace: w.Name, WorkspacePath: w.Path, Plugin: h.plugin,
		WarmUp: in.WarmUp, Isolation: isolation, Endpoints: len(in.Endpoints),
	})
	if err != nil {
		return "", asHostErr(err)
	}
	if channel != nil {
		channel.Mounted()
	}
	if r := h.m.Remote(); grant != nil && r != nil {
		grant.SetRemote(remoteGrant{r: r, id: id, outDir: outDir})
	}
	wctx, stop := context.WithCancel(context.Background())
	if sg != nil {
		sg.Created(id)
	}
	t := &tracked{Workspace: w, stop: stop, endpoints: map[string]Endpoint{}, intent: intent, hostRoots: sg != nil && len(sg.Names()) > 0, sandbox: sg}
	for _, e := range in.Endpoints {
		t.endpoints[e.Name] = Endpoint{ContainerID: id, Name: e.Name, Path: e.Path, Workspace: w, Rel: places[e.Name]}
	}
	h.mu.Lock()
	h.workspaces[id] = t
	h.mu.Unlock()
	h.ws.Claim(w, h.plugin)
	if h.ws.Quota() > 0 && !h.ws.Enforced() {
		// Without a filesystem per workspace, a walk of visible files is
		// the only (weaker) bound.
		go h.watchQuota(wctx, id, t)
	}
	return id, nil
}

// lookupGrant resolves a grant token (nil for none) that the core issued to
// this plugin, for operation op; any other is audited as a violation.
func lookupGrant[G any](h *Host, op, sessionID, token string, lookup func(plugin, token string) (*G, error), rule, none string) (*G, error) {
	if token == "" {
		return nil, nil
	}
	var g *G
	err := errors.New(none)
	if lookup != nil {
		g, err = lookup(h.plugin, token)
	}
	if err != nil {
		h.rec.Record(audit.Entry{Event: audit.SecurityViolation, Severity: audit.Warning, SessionID: sessionID, Success: false, Error: err.Error(),
			Details: map[string]any{"rule": rule, "operation": op, "plugin": h.plugin}})
		return nil, host.Errorf(host.KindPolicy, "%v", err)
	}
	return g, nil
}

func asHostErr(err error) error {
	var he *host.Error
	var v *policy.Violation
	var le *policy.LimitError
	switch {
	case errors.As(err, &he):
		return he
	case errors.As(err, &v):
		return host.Errorf(host.KindPolicy, "%v", err)
	case errors.As(err, &le):
		return host.Errorf(host.KindInvalid, "%v", err)
	case strings.Contains(err.Error(), "no Podman API socket") || strings.Contains(err.Error(), "connect to Podman"):
		return host.Errorf(host.KindUnavailable, "%v", err)
	}
	return host.Errorf(host.KindInternal, "%v", err)
}

// Clamp implements host.Sandbox.
func (h *Host) Clamp(ctx context.Context, id string) error {
	return wrap(h.m.Clamp(ctx, h.plugin, id))
}

// Claim implements host.Sandbox: a pooled container of this plugin's,
// created with a standing grant, is given to the run's or session's own
// grant token, once. A refusal is audited: a sound plugin never asks one.
func (h *Host) Claim(ctx context.Context, id, token string) error {
	g, err := lookupGrant(h, "container.claim", "", token, h.sandbox, sandboxgrant.RuleNotGranted, "this server issues no sandbox grants")
	if err == nil && g == nil {
		err = host.Errorf(host.KindInvalid, "claim container %s: no sandbox grant named", id)
	}
	if err != nil {
		return err
	}
	h.mu.Lock()
	t, ok := h.workspaces[id]
	if !ok {
		h.mu.Unlock()
		return host.Errorf(host.KindNotFound, "claim container %s: no such container of plugin %s", id, h.plugin)
	}
	err = g.Claim(id, t.sandbox, t.claimed)
	if err == nil {
		t.claimed = true
	}
	h.mu.Unlock()
	if err != nil {
		h.rec.Record(audit.Entry{Event: audit.SecurityViolation, Severity: audit.Warning, Success: false, Error: err.Error(),
			Details: map[string]any{"rule": sandboxgrant.RuleClaim, "operation": "container.claim", "plugin": h.plugin, "container": id}})
		return host.Errorf(host.KindPolicy, "%v", err)
	}
	return nil
}

// Start implements host.Sandbox.
func (h *Host) Start(ctx context.Context, id string) error {
	return wrap(h.m.Start(ctx, h.plugin, id))
}

func wrap(err error) error {
	if err == nil {
		return nil
	}
	return asHostErr(err)
}

// Wait implements host.Sandbox: timeouts and OOM kills are outcomes, not errors.
func (h *Host) Wait(ctx context.Context, id string, timeout time.Duration) (host.WaitResult, error) {
	code, err := h.m.Wait(ctx, h.plugin, id, timeout)
	h.checkFull(id)
	var te *sandbox.TimeoutError
	var oom *sandbox.OOMError
	if why := h.exceeded(id); why != "" {
		return host.WaitResult{ExitCode: code, Message: why}, nil
	}
	switch {
	case errors.As(err, &te):
		return host.WaitResult{ExitCode: code, TimedOut: true, Message: err.Error()}, nil
	case errors.As(err, &oom):
		return host.WaitResult{ExitCode: code, OOMKilled: true, Message: err.Error()}, nil
	case errors.As(err, new(*sandbox.KilledError)):
		return host.WaitResult{ExitCode: code, Message: err.Error()}, nil
	case err != nil:
		return host.WaitResult{}, asHostErr(err)
	}
	return host.WaitResult{ExitCode: code}, nil
}

// State implements host.Sandbox.
func (h *Host) State(ctx context.Context, id string) (host.State, error) {
	running, code, err := h.m.State(ctx, h.plugin, id)
	if err != nil {
		return host.State{}, asHostErr(err)
	}
	if running {
		return host.State{Running: true}, nil
	}
	if q := h.exceeded(id); q != "" {
		return host.State{ExitCode: code, Message: q}, nil
	}
	why := h.m.ExitError(id, code)
	var oom *sandbox.OOMError
	return host.State{ExitCode: code, OOMKilled: errors.As(why, &oom), Message: why.Error()}, nil
}

// Logs implements host.Sandbox.
func (h *Host) Logs(ctx context.Context, id string, max int64) (host.Output, error) {
	o, err := h.m.Logs(ctx, h.plugin, id, max)
	if err != nil {
		return host.Output{}, asHostErr(err)
	}
	return host.Output{Stdout: o.Stdout, Stderr: o.Stderr, StdoutTotal: o.StdoutTotal, StderrTotal: o.StderrTotal}, nil
}

// Exec implements host.Sandbox.
func (h *Host) Exec(ctx context.Context, id string, req host.ExecRequest) (host.ExecResult, error) {
	if len(req.Command) == 0 {
		return host.ExecResult{}, host.Errorf(host.KindInvalid, "exec needs a command")
	}
	if req.Timeout < 0 {
		return host.ExecResult{}, host.Errorf(host.KindInvalid, "exec timeout %s is negative", req.Timeout)
	}
	if len(req.Stdin) > host.MaxFileBytes {
		return host.ExecResult{}, host.Errorf(host.KindInvalid, "exec stdin of %d bytes is over the %d-byte limit; put a file with PutFile in parts instead", len(req.Stdin), host.MaxFileBytes)
	}
	if req.MaxBytes <= 0 || req.MaxBytes > host.MaxExecOutputBytes {
		req.MaxBytes = host.MaxExecOutputBytes
	}
	rreq := sandbox.ExecRequest{ExecRequest: runtime.ExecRequest{
		Command: req.Command, Stdin: req.Stdin, Env: req.Env, WorkDir: req.WorkDir, Max: req.MaxBytes, Timeout: req.Timeout}}
	if req.Output != nil {
		// Podman writes stdout and stderr from separate goroutines; the
		// callback is promised one call at a time.
		var mu sync.Mutex
		rreq.Stdout = chunkWriter(&mu, host.Stdout, req.Output)
		rreq.Stderr = chunkWriter(&mu, host.Stderr, req.Output)
	}
	r, timedOut, err := h.m.Exec(ctx, h.plugin, id, rreq)
	h.checkFull(id) // a warm container's run is an exec
	if err != nil {
		return host.ExecResult{}, asHostErr(err)
	}
	return host.ExecResult{ExitCode: r.ExitCode, TimedOut: timedOut, Output: host.Output{Stdout: r.Stdout, Stderr: r.Stderr, StdoutTotal: r.StdoutTotal, StderrTotal: r.StderrTotal}}, nil
}

type chunkFunc func(p []byte) (int, error)

func (f chunkFunc) Write(p []byte) (int, error) { return f(p) }

func chunkWriter(mu *sync.Mutex, name host.Stream, out func(host.Stream, []byte)) chunkFunc {
	return func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		out(name, append([]byte(nil), p...))
		return len(p), nil
	}
}

// Signal implements host.Sandbox.
func (h *Host) Signal(ctx context.Context, id string, sig host.Signal, scope host.SignalScope) error {
	if err := sig.Check(); err != nil {
		return err
	}
	name := string(sig.Normal())
	switch scope {
	case host.SignalInit:
		return wrap(h.m.Signal(ctx, h.plugin, id, name))
	case host.SignalAll:
		return wrap(h.m.SignalAll(ctx, h.plugin, id, name))
	}
	return host.Errorf(host.KindInvalid, "unknown signal scope %d", scope)
}

// Stop implements host.Sandbox.
func (h *Host) Stop(ctx context.Context, id string, grace time.Duration) error {
	return wrap(h.m.Stop(ctx, h.plugin, id, grace))
}

// Remove implements host.Sandbox; an ephemeral workspace goes with it.
func (h *Host) Remove(ctx context.Context, id string) error {
	h.checkFull(id) // last chance: an ephemeral workspace goes now
	h.keepRemoteFiles(id)
	if err := h.m.Remove(ctx, h.plugin, id); err != nil {
		return asHostErr(err)
	}
	h.mu.Lock()
	ws, ok := h.workspaces[id]
	delete(h.workspaces, id)
	h.mu.Unlock()
	if ok {
		ws.stop()
		if ws.Ephemeral {
			h.ws.Remove(ws.Workspace)
		}
	}
	return nil
}

// Crashed releases the workspaces of the plugin's containers once it died
// and the core removed them: ephemeral ones, and session workspaces it made
// that no core session holds (keep), such as a warm pool's or a throw-away
// session's. A session the core keeps (marked dead, restartable on its
// files) keeps its workspace. It returns how many were removed.
func (h *Host) Crashed(keep func(sessionID string) bool) int {
	h.mu.Lock()
	all := h.workspaces
	h.workspaces = map[string]*tracked{}
	h.mu.Unlock()
	n := 0
	for _, t := range all {
		t.stop()
		switch {
		case t.Ephemeral:
			if h.ws.Remove(t.Workspace) == nil {
				n++
			}
		case !keep(t.SessionID):
			if ok, _ := h.ws.RemoveClaimed(t.SessionID, h.plugin); ok {
				n++
			}
		}
	}
	return n
}

// ReadFiles implements host.Sandbox: regular files of one workspace
// directory, never following symlinks the sandboxed code may have planted.
func (h *Host) ReadFiles(ctx context.Context, id, subdir string, maxFile, maxTotal int64) ([]host.File, error) {
	ws, err := h.workspaceOf(id)
	if err != nil {
		return nil, err
	}
	if r := h.m.Remote(); r != nil {
		return remoteReadFiles(ctx, r, id, subdir, maxFile, maxTotal)
	}
	// The directory itself may have been replaced by a symlink from inside.
	dir, err := ws.PlainDir(subdir)
	if err != nil || dir == "" {
		return nil, fileErr(err)
	}
	files, err := host.ReadDir(dir, maxFile, maxTotal)
	if err != nil {
		return nil, host.Errorf(host.KindInternal, "read files: %v", err)
	}
	return files, nil
}

// LegacyWorkspace is the host path of container id's workspace ("" if not
// this plugin's), which no v2 message carries: the plugin shim passes it to
// sdk/oneshot's resident runner in a response header until that runner
// dials an endpoint, and the v1 compatibility path puts it in v1's
// CreateResponse.workspace, where v1 plugins dial their sockets.
func (h *Host) LegacyWorkspace(id string) string {
	t, err := h.workspaceOf(id)
	if err != nil {
		return ""
	}
	return t.Path
}

func (h *Host) workspaceOf(id string) (*tracked, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws, ok := h.workspaces[id]
	if !ok {
		return nil, host.Errorf(host.KindNotFound, "container %s is not one of plugin %s's", refusal.Cut(id), h.plugin)
	}
	return ws, nil
}

// PutFile implements host.Sandbox.
func (h *Host) PutFile(ctx context.Context, id, path string, data []byte) error {
	ws, err := h.workspaceOf(id)
	if err != nil {
		return err
	}
	switch r := h.m.Remote(); {
	case len(data) > host.MaxFileBytes:
		err = host.Errorf(host.KindInvalid, "file %q is %d bytes, over the %d-byte limit of one file; split it", path, len(data), host.MaxFileBytes)
	case r != nil:
		err = remotePutFile(ctx, r, id, path, data)
	default:
		err = fileErr(ws.PutFile(path, data))
	}
	h.rec.Record(audit.Entry{Event: audit.WorkspaceWrite, SessionID: ws.SessionID, Success: err == nil, Error: audit.ErrText(err),
		Details: map[string]any{"container_id": id, "plugin": h.plugin, "path": path, "bytes": len(data)}})
	return err
}

// GetFile implements host.Sandbox.
func (h *Host) GetFile(ctx context.Context, id, path string, max int64) ([]byte, error) {
	ws, err := h.workspaceOf(id)
	if err != nil {
		return nil, err
	}
	if max <= 0 || max > host.MaxFileBytes {
		max = host.MaxFileBytes
	}
	if r := h.m.Remote(); r != nil {
		return remoteGetFile(ctx, r, id, path, max)
	}
	data, err := ws.GetFile(path, max)
	return data, fileErr(err)
}

// fileErr gives an error of core/workspace the kind a plugin sees (its
// refusals are the package's sentinels); the message is the workspace's.
func fileErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, workspace.ErrLink), errors.Is(err, workspace.ErrNotRegular):
		return host.Errorf(host.KindPolicy, "%v", err)
	case errors.Is(err, workspace.ErrNotFound):
		return host.Errorf(host.KindNotFound, "%v", err)
	case errors.Is(err, workspace.ErrPath), errors.Is(err, workspace.ErrTooLarge), errors.Is(err, workspace.ErrNoSpace):
		return host.Errorf(host.KindInvalid, "%v", err)
	}
	return host.Errorf(host.KindInternal, "%v", err)
}

// RemoveWorkspace implements host.Sandbox: only a session workspace this
// plugin created (its current incarnation), and only once none of this
// plugin's containers uses it.
func (h *Host) RemoveWorkspace(_ context.Context, sessionID string) error {
	h.mu.Lock()
	for cid, t := range h.workspaces {
		if !t.Ephemeral && t.SessionID == sessionID {
			h.mu.Unlock()
			return host.Errorf(host.KindInvalid, "workspace of session %s is still used by container %s: remove the container first", sessionID, cid)
		}
	}
	h.mu.Unlock()
	ok, err := h.ws.RemoveClaimed(sessionID, h.plugin)
	if err != nil {
		return host.Errorf(host.KindInternal, "remove workspace of session %s: %v", sessionID, err)
	}
	if !ok {
		return host.Errorf(host.KindNotFound, "plugin %s has no workspace for session %q to remove", h.plugin, sessionID)
	}
	return nil
}

type auditSvc struct{ h *Host }

// EventWarmRun is the audit event a plugin records when it gives a
// request's code to a container it created before the request (a warm
// pool's), with details container_id and run_id: the core then counts that
// container as the run's (sandbox.Manager.BindRun).
const EventWarmRun = "plugin.warm_run"

// Record adds a plugin's event to the audit log, namespaced and attributed so
// that a plugin cannot pass its events off as the core's.
func (a auditSvc) Record(_ context.Context, e host.Event) error {
	event := e.Event
	if !strings.HasPrefix(event, "plugin.") {
		event = "plugin." + event
	}
	details := map[string]any{}
	for k, v := range e.Details {
		details[k] = v
	}
	details["plugin"] = a.h.plugin
	if event == EventWarmRun {
		// The plugin runs a request's code in a container it created before
		// the request (a warm pool's): from now on that container is the
		// run's, and the run's slots are held until it is removed. A claim
		// the core refuses (not this plugin's container, one that served
		// another run) fails the run, before its code is sent.
		cid, _ := e.Details["container_id"].(string)
		run, _ := e.Details["run_id"].(string)
		if err := a.h.m.BindRun(a.h.plugin, cid, run); err != nil {
			return asHostErr(err)
		}
	}
	sev := e.Severity
	switch sev {
	case audit.Info, audit.Warning, audit.Error, audit.Critical:
	default:
		sev = audit.Info
	}
	// A plugin may act on a record alone (a warm container's run creates no
	// container the core would audit): it learns when the log took nothing.
	if err := audit.Must(a.h.rec, audit.Entry{Event: event, Severity: sev, SessionID: e.SessionID, Success: e.Success, Details: details, Error: e.Error}); err != nil {
		return host.Errorf(host.KindUnavailable, "the audit log cannot be written (%v); nothing is run unaudited", err)
	}
	return nil
}

// checkFull audits the workspace of container id when it has just filled
// its kernel-enforced quota (workspace.Manager.CheckFull: one statfs, one
// line per fill). The kernel refuses the writes, so nothing is stopped; the
// line tells the operator why the run failed.
func (h *Host) checkFull(id string) {
	h.mu.Lock()
	t := h.workspaces[id]
	h.mu.Unlock()
	if t == nil {
		return
	}
	if f, ok := h.fill(id, t.Path); ok {
		h.rec.Record(f.Entry(h.ws.Quota(), t.SessionID, map[string]any{"container_id": id, "plugin": h.plugin}))
	}
}

// fillCheckTimeout bounds the measure of a workspace where its sandbox
// runs (a request to the pod's keeper).
const fillCheckTimeout = 10 * time.Second

// fill is workspace.Manager.CheckFull of container id's workspace at path,
// measured where it lives: the core's own filesystem, or the sandbox's
// (a pod's workspace, of which the core's copy says nothing).
func (h *Host) fill(id, path string) (workspace.Fill, bool) {
	r, ok := h.m.Remote().(runtime.WorkspaceUsage)
	if !ok {
		return h.ws.CheckFull(path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fillCheckTimeout)
	defer cancel()
	u, err := r.WorkspaceUsage(ctx, id)
	if err != nil {
		return workspace.Fill{}, false // the pod is gone or going: its files with it
	}
	return h.ws.CheckFullOf(path, u.Size, u.Free, u.NoInodes)
}

func (h *Host) exceeded(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.workspaces[id]; w != nil {
		return w.exceeded
	}
	return ""
}

// watchQuota kills the container when its workspace (a host directory,
// which no cgroup limits) grows past the quota.
func (h *Host) watchQuota(ctx context.Context, id string, w *tracked) {
	quota := h.ws.Quota()
	periodic.Every(ctx, time.Second, func(context.Context) bool {
		size, files := w.Usage(quota)
		if size <= quota && files <= workspace.MaxFiles {
			return true
		}
		why := fmt.Sprintf("the container was stopped: its files grew past the workspace quota of %s (volumes.session_quota) or %d files; write less to the working directory", config.FormatSize(quota), workspace.MaxFiles)
		h.mu.Lock()
		w.exceeded = why
		h.mu.Unlock()
		h.rec.Record(audit.Entry{Event: audit.SecurityViolation, Severity: audit.Warning, SessionID: w.SessionID, Success: false, Error: why,
			Details: map[string]any{"rule": workspace.RuleQuota, "enforced": "walk", "container_id": id, "plugin": h.plugin, "bytes": size, "files": files}})
		_ = h.m.Signal(context.Background(), "", id, "KILL")
		return false
	})
}

var (
	_ host.Host    = (*Host)(nil)
	_ host.Sandbox = (*Host)(nil)
	_ host.Audit   = auditSvc{}
)
