// Package sandbox is the core's single door to containers: every request
// passes the policy, is audited, and touches only containers this forge
// instance created. Host services for plugins and the engine both use it.
package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/procid"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/telemetry"
)

// TimeoutError is a container killed at its wall-clock limit.
type TimeoutError struct{ Limit time.Duration }

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("execution timed out after %s (the timeout limit) and the container was killed; ask for a longer timeout or make the code faster", e.Limit)
}

// OOMError is a container killed for exceeding its memory limit, as the
// kernel reported it.
type OOMError struct{ Limit int64 }

func (e *OOMError) Error() string {
	return fmt.Sprintf("out of memory: the process was killed at the %s memory limit (exit 137); use less memory or ask for a larger limit", config.FormatSize(e.Limit))
}

// KilledError is a container whose process died of SIGKILL (exit 137) that
// the kernel did not report as an OOM kill. When the runtime cannot tell
// (Unknown), the memory limit is named as a possible cause.
type KilledError struct {
	Limit   int64 // memory limit, for the hint
	Unknown bool  // no OOM signal was available
}

func (e *KilledError) Error() string {
	msg := "the process was killed by signal 9 (SIGKILL)"
	if e.Unknown && e.Limit > 0 {
		msg += fmt.Sprintf("; if the code uses a lot of memory this may have been the %s memory limit", config.FormatSize(e.Limit))
	}
	return msg
}

// AuditError is a refusal because the audit log cannot be written: nothing
// runs unaudited.
type AuditError struct{ Err error }

func (e *AuditError) Error() string {
	return fmt.Sprintf("execution refused: the audit log cannot be written (%v), and nothing runs unaudited; fix the log's path, permissions or disk space (`mcp-forge doctor` says what is wrong)", e.Err)
}

func (e *AuditError) Unwrap() error { return e.Err }

// Engine is what the manager needs of a runtime: what it enforces, its
// containers and the images they are created from.
type Engine interface {
	runtime.Guarantor
	runtime.Containers
	runtime.Images
}

// Manager creates and operates sandbox containers on behalf of a plugin.
type Manager struct {
	rt       Engine
	pol      *policy.Policy
	tracked  *Tracker
	audit    audit.Recorder
	log      hclog.Logger
	instance string
	server   string
	remote   runtime.RemoteWorkspace
	inside   runtime.SocketDialer
	snaps    runtime.Snapshotter
	cpu      CPUUpdater
	noWarmUp atomic.Bool // a live update failed: no more allowances

	mu       sync.Mutex
	limits   map[string]runtime.Limits     // container id → limits, for OOM messages
	gvisor   map[string]string             // gVisor container id → its image's id ("": adopted, unknown)
	verdicts map[string]runtime.OOMVerdict // container id → how its exit 137 came about
	scrub    map[string]*runtime.Scrubber  // container id → its environment, kept out of the audit log
	pending  map[string]string             // container id → plugin, whose removal failed and is retried
	runs     map[string]*runContainers     // run id → its containers not yet removed
	runOf    map[string]string             // container id → the run it serves
	warm     map[string]*warmUp            // container id → its warm-up, until clamped (warmup.go)
	kick     chan struct{}                 // wakes the removal retrier
	stop     chan struct{}                 // ends it
	stopOnce sync.Once
	// closing refuses new containers once Shutdown began; creates counts
	// those under way, which Shutdown waits for (a pool refill racing the
	// final sweep would otherwise leave its container behind).
	closing bool
	creates sync.WaitGroup
	// The runtime's guarantees, measured once (guarantees.go): the gaps
	// every sandbox goes without (waived), or the refusal of every create.
	// gmu, not mu: the measure is a call to the engine, which must not
	// hold up the bookkeeping of containers already running.
	gmu     sync.Mutex
	checked bool
	waived  []runtime.Gap
	refusal error
}

// Options configure a Manager.
type Options struct {
	Instance string // shared by every server on one base path
	ServerID string // default: this process (tests simulate dead servers)
	// Remote is the runtime's way to the workspaces of its sandboxes when
	// they do not live in the core's directory (Kubernetes); nil: they do.
	Remote runtime.RemoteWorkspace
	// Inside reaches the sockets gVisor sandboxes listen on from inside
	// them (Sockets); nil: they are dialled where they are bound, on the host.
	Inside runtime.SocketDialer
	// Snapshots saves gVisor sandboxes whole and restores them
	// (snapshot.go); nil: none can be.
	Snapshots runtime.Snapshotter
	// CPU lowers a warm-up container's CPU quota to its limit (warmup.go);
	// nil: no warm-up allowance is given.
	CPU CPUUpdater
}

// New returns a manager over rt.
func New(rt Engine, pol *policy.Policy, rec audit.Recorder, log hclog.Logger, o Options) *Manager {
	m := &Manager{
		rt: rt, pol: pol, tracked: NewTracker(), audit: rec, log: log,
		instance: o.Instance, server: o.ServerID, remote: o.Remote, inside: o.Inside, snaps: o.Snapshots, cpu: o.CPU,
		limits: map[string]runtime.Limits{}, gvisor: map[string]string{}, verdicts: map[string]runtime.OOMVerdict{},
		scrub: map[string]*runtime.Scrubber{}, pending: map[string]string{},
		runs: map[string]*runContainers{}, runOf: map[string]string{}, warm: map[string]*warmUp{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}),
	}
	if m.server == "" {
		m.server = procid.Self()
	}
	go m.retryRemovals()
	return m
}

// ID is the server id containers of this manager are labelled with
// (runtime.LabelServer).
func (m *Manager) ID() string { return m.server }

// ServerTag is a short stable name of this server process, used to keep the
// workspaces of servers sharing a base path apart.
func (m *Manager) ServerTag() string {
	sum := sha256.Sum256([]byte(m.server))
	return hex.EncodeToString(sum[:4])
}

// Remote is how the workspaces of this runtime's sandboxes are reached when
// they live where the sandboxes run; nil when they are the core's directories.
func (m *Manager) Remote() runtime.RemoteWorkspace { return m.remote }

// Sockets is how the core reaches the unix sockets container id listens
// on: through the runtime, from inside the sandbox, for a pod (its
// workspace is not here) and for a gVisor sandbox (whose sockets stay in
// its Sentry, so that runsc can checkpoint it); nil: in its workspace on
// this host.
func (m *Manager) Sockets(id string) runtime.SocketDialer {
	if m.remote != nil {
		return m.remote
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.gvisor[id]; ok && m.inside != nil {
		return m.inside
	}
	return nil
}

// Policy is the policy the manager applies.
func (m *Manager) Policy() *policy.Policy { return m.pol }

func (m *Manager) violation(op, plugin, session string, err error) {
	var v *policy.Violation
	if errors.As(err, &v) {
		m.audit.Record(audit.Entry{Event: audit.SecurityViolation, Severity: audit.Critical, SessionID: session,
			Success: false, Error: err.Error(), Details: map[string]any{"operation": op, "rule": v.Rule, "plugin": plugin}})
	}
}

// ErrShuttingDown refuses a container asked for after Shutdown began.
var ErrShuttingDown = errors.New("the server is shutting down: no new containers")

// Create hardens and checks the intent, then creates the container. The
// creation is audited before the container can be started; if that record
// cannot be written the container is removed and the request refused.
func (m *Manager) Create(ctx context.Context, in policy.Intent) (id string, err error) {
	ctx, span := telemetry.Start(ctx, "container.create", attribute.String("mcp_forge.plugin", in.Plugin), attribute.String("mcp_forge.image", in.Image))
	defer func() {
		span.SetAttributes(attribute.String("mcp_forge.container", short(id)))
		telemetry.End(span, err)
	}()
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return "", ErrShuttingDown
	}
	m.creates.Add(1)
	m.mu.Unlock()
	defer m.creates.Done()
	in.Instance = m.instance
	if in.Labels == nil {
		in.Labels = map[string]string{}
	}
	in.Labels[runtime.LabelServer] = m.server
	secrets := runtime.NewScrubber(in.Env, true)
	if err := checkEnv(in.Env); err != nil {
		m.audit.Record(audit.Entry{Event: audit.ContainerCreate, Severity: audit.Error, SessionID: in.SessionID,
			Details: map[string]any{"plugin": in.Plugin}, Error: secrets.String(err.Error())})
		return "", err
	}
	spec, err := m.pol.Harden(in)
	if err != nil {
		m.violation("container.create", in.Plugin, in.SessionID, err)
		return "", err
	}
	if err := audit.Check(m.audit); err != nil {
		m.log.Error("refusing to create a container: the audit log cannot be written", "error", err)
		return "", &AuditError{Err: err}
	}
	waived, err := m.checkGuarantees(ctx, in.Plugin, in.SessionID)
	if err != nil {
		return "", err
	}
	if spec.Isolation == runtime.IsolationGVisor && slices.ContainsFunc(waived, func(g runtime.Gap) bool { return g.Guarantee == runtime.KernelIsolation }) {
		if in.Isolation == runtime.IsolationGVisor {
			// A tenant's requirement is not the operator's to waive.
			err := &policy.Violation{Rule: policy.RuleIsolation, Detail: "this run's tenant requires gVisor (tenants.*.isolation), which cannot run here (security.waive names kernel-isolation): nothing runs"}
			m.violation("container.create", in.Plugin, in.SessionID, err)
			return "", err
		}
		// gVisor cannot run here and the operator waived it: every result
		// says so (the waived notice).
		spec = m.pol.Downgrade(spec)
	}
	if err := m.confine(ctx, &spec); err != nil {
		return "", err
	}
	clampTo := int64(0)
	if in.WarmUp {
		clampTo = m.allowWarmUp(&spec, waived)
	}
	details := map[string]any{"image": spec.Image, "image_id": spec.ImageID, "seccomp": spec.SeccompProfile, "plugin": in.Plugin, "memory": spec.Limits.MemoryBytes,
		"cpu_quota": spec.Limits.CPUQuota, "pids": spec.Limits.Pids, "timeout_s": spec.Limits.Timeout.Seconds(),
		"network": spec.Network, "mounts": len(spec.Mounts), "isolation": spec.Isolation}
	if clampTo > 0 {
		// What the container is held to from Clamp on; the allowance before.
		details["cpu_quota"], details["warm_up_cpu_quota"] = clampTo, spec.Limits.CPUQuota
	}
	if len(waived) > 0 {
		details["waived"] = gapNames(waived)
	}
	if h := in.Labels[runtime.LabelCodeHash]; h != "" {
		details["code_sha256"] = h
	}
	// HOOK(http): the run a stateless container serves, so the audit log
	// can name the tenant that asked for it.
	if r := in.Labels[runtime.LabelRun]; r != "" {
		details["run_id"] = r
	}
	// The create runs to its end even if the caller gives up meanwhile (a
	// plugin stopping mid-refill): cut short, Podman may still make the
	// container, untracked and left behind. The runtime bounds the call.
	t0 := time.Now()
	id, err = m.rt.Create(context.WithoutCancel(ctx), spec)
	details["duration_ms"] = time.Since(t0).Milliseconds()
	if err != nil {
		m.audit.Record(audit.Entry{Event: audit.ContainerCreate, Severity: audit.Error, SessionID: in.SessionID, Details: details, Error: secrets.String(err.Error())})
		return "", err
	}
	details["container_id"] = id
	m.tracked.Add(id, in.Plugin)
	if clampTo > 0 {
		m.startWarmUp(in.Plugin, id, clampTo)
		spec.Limits.CPUQuota = clampTo
	}
	m.mu.Lock()
	m.limits[id] = spec.Limits
	if spec.Isolation == runtime.IsolationGVisor {
		m.gvisor[id] = spec.ImageID
	}
	m.scrub[id] = secrets
	if r := in.Labels[runtime.LabelRun]; r != "" {
		m.bindLocked(id, r)
	}
	m.mu.Unlock()
	if err := audit.Must(m.audit, audit.Entry{Event: audit.ContainerCreate, SessionID: in.SessionID, Success: true, Details: details}); err != nil {
		m.unaudited(in.Plugin, id, err)
		return "", &AuditError{Err: err}
	}
	if err := ctx.Err(); err != nil {
		_ = m.Remove(context.WithoutCancel(ctx), in.Plugin, id)
		return "", err
	}
	return id, nil
}

// unaudited removes a container whose operation could not be audited.
func (m *Manager) unaudited(plugin, id string, err error) {
	m.log.Error("removing a container whose operation could not be audited", "id", short(id), "error", err)
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = m.Remove(rctx, plugin, id)
}

// checkEnv refuses environment values no process can hold, before the OCI
// runtime echoes them in an error. The name is given; the value never is.
func checkEnv(env map[string]string) error {
	for k, v := range env {
		if strings.ContainsRune(v, 0) {
			// Not named: the engine audits this error, and a name may be a secret.
			return &policy.LimitError{Field: "environment", Msg: fmt.Sprintf("the value of one of the %d variables contains a NUL byte (\\x00), which no process environment can hold; remove it", len(env))}
		}
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return &policy.LimitError{Field: "environment", Msg: "a variable name is empty or contains '=' or a NUL byte; use letters, digits and '_'"}
		}
	}
	return nil
}

// CheckSpec applies the policy to a complete spec and audits a refusal; for
// callers that hold a full spec rather than an intent.
func (m *Manager) CheckSpec(s runtime.Spec) error {
	err := m.pol.CheckCreate(s)
	if err != nil {
		m.violation("container.create", s.Plugin, s.SessionID, err)
	}
	return err
}

func (m *Manager) check(plugin, id, op string) error {
	if err := m.tracked.Check(id, plugin, op); err != nil {
		m.violation("container."+op, plugin, "", err)
		return err
	}
	return nil
}

func (m *Manager) entry(event, plugin, id string, err error, extra map[string]any) audit.Entry {
	e := audit.Entry{Event: event, Success: err == nil, Details: map[string]any{"container_id": id, "plugin": plugin}}
	for k, v := range extra {
		e.Details[k] = v
	}
	if err != nil {
		m.mu.Lock()
		sc := m.scrub[id]
		m.mu.Unlock()
		e.Severity, e.Error = audit.Error, sc.String(err.Error())
	}
	return e
}

func (m *Manager) record(event, plugin, id string, err error, extra map[string]any) {
	m.audit.Record(m.entry(event, plugin, id, err, extra))
}

// Start starts a container plugin created. A start that cannot be audited is
// undone: the container is removed and the request refused.
func (m *Manager) Start(ctx context.Context, plugin, id string) (err error) {
	ctx, span := telemetry.Start(ctx, "container.start", attribute.String("mcp_forge.container", short(id)))
	defer func() { telemetry.End(span, err) }()
	if err := m.check(plugin, id, "start"); err != nil {
		return err
	}
	t0 := time.Now()
	err = m.rt.Start(ctx, id)
	// The runtime's own time, so a slow start (image mount, user
	// namespace, the OCI runtime) shows in the audit log apart from the
	// runner's.
	took := map[string]any{"duration_ms": time.Since(t0).Milliseconds()}
	if aerr := audit.Must(m.audit, m.entry(audit.ContainerStart, plugin, id, err, took)); aerr != nil {
		m.unaudited(plugin, id, aerr)
		return &AuditError{Err: aerr}
	}
	return err
}

// Wait waits for exit. A timeout becomes *TimeoutError, a memory kill
// *OOMError; otherwise the exit code is returned.
func (m *Manager) Wait(ctx context.Context, plugin, id string, timeout time.Duration) (code int, err error) {
	ctx, span := telemetry.Start(ctx, "container.wait", attribute.String("mcp_forge.container", short(id)))
	defer func() { telemetry.End(span, err) }()
	if err := m.check(plugin, id, "wait"); err != nil {
		return -1, err
	}
	m.mu.Lock()
	lim := m.limits[id]
	m.mu.Unlock()
	if timeout <= 0 || (lim.Timeout > 0 && timeout > lim.Timeout) {
		timeout = lim.Timeout
	}
	code, err = m.rt.Wait(ctx, id, timeout)
	switch {
	case errors.Is(err, runtime.ErrTimeout):
		err = &TimeoutError{Limit: timeout}
	case err == nil && code == 137:
		m.learnExit(ctx, id)
		err = m.ExitError(id, code)
	}
	if err != nil {
		m.record(audit.ContainerStop, plugin, id, err, map[string]any{"exit_code": code})
	}
	return code, err
}

// learnExit asks the runtime, once, whether the kernel OOM-killed a process
// of a container that exited with 137.
func (m *Manager) learnExit(ctx context.Context, id string) {
	m.mu.Lock()
	_, known := m.verdicts[id]
	m.mu.Unlock()
	if known {
		return
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	v, err := m.rt.OOMKilled(qctx, id)
	if err != nil {
		m.log.Warn("could not tell whether the container was OOM-killed", "id", short(id), "error", err)
		return // not remembered: asked again next time
	}
	m.mu.Lock()
	m.verdicts[id] = v
	m.mu.Unlock()
}

// State reports whether a container of plugin's runs, and if not how it ended
// (ExitError then explains it).
func (m *Manager) State(ctx context.Context, plugin, id string) (running bool, code int, err error) {
	if err := m.check(plugin, id, "inspect"); err != nil {
		return false, 0, err
	}
	running, code, err = m.rt.State(ctx, id)
	if err == nil && !running && code == 137 {
		m.learnExit(ctx, id)
	}
	return running, code, err
}

// ExitError explains how a container ended: an OOM kill the kernel reported
// (*OOMError), a SIGKILL that was not one, or might have been when no signal
// was available (*KilledError), or an exit code.
func (m *Manager) ExitError(id string, code int) error {
	m.mu.Lock()
	lim, verdict := m.limits[id], m.verdicts[id]
	m.mu.Unlock()
	if code != 137 {
		return fmt.Errorf("the process exited with code %d", code)
	}
	switch {
	case verdict == runtime.OOMKill:
		return &OOMError{Limit: lim.MemoryBytes}
	case verdict == runtime.NoOOMKill:
		return &KilledError{Limit: lim.MemoryBytes}
	}
	return &KilledError{Limit: lim.MemoryBytes, Unknown: true}
}

// Logs returns the container's stdout and stderr, each capped at max bytes.
func (m *Manager) Logs(ctx context.Context, plugin, id string, max int64) (runtime.Output, error) {
	if err := m.check(plugin, id, "read logs of"); err != nil {
		return runtime.Output{}, err
	}
	return m.rt.Logs(ctx, id, max)
}

// ExecRequest is a command to run in a running container; its Timeout is
// enforced by the runtime (TERM to the command's process group, KILL
// runtime.ExecKillGrace later), whatever the image holds.
type ExecRequest struct {
	runtime.ExecRequest
}

// Exec runs a command inside a running container of plugin's. TimedOut
// reports a command ended by its timeout.
func (m *Manager) Exec(ctx context.Context, plugin, id string, req ExecRequest) (res runtime.ExecResult, timedOut bool, err error) {
	ctx, span := telemetry.Start(ctx, "container.exec", attribute.String("mcp_forge.container", short(id)))
	defer func() { telemetry.End(span, err) }()
	if err := m.check(plugin, id, "exec in"); err != nil {
		return runtime.ExecResult{}, false, err
	}
	if len(req.Command) == 0 {
		return runtime.ExecResult{}, false, errors.New("exec needs a command")
	}
	if req.Timeout > 0 {
		// Bound the attach too, should the runtime's signals not end it.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout+runtime.ExecKillGrace+15*time.Second)
		defer cancel()
	}
	res, err = m.rt.Exec(ctx, id, req.ExecRequest)
	timedOut = err == nil && res.TimedOut
	m.record(audit.ContainerExec, plugin, id, err, map[string]any{"command": req.Command[0], "exit_code": res.ExitCode, "timed_out": timedOut})
	return res, timedOut, err
}

// Signal sends a signal to the container's init process (catatonit, which
// forwards it to the container's command).
func (m *Manager) Signal(ctx context.Context, plugin, id, sig string) error {
	if err := m.check(plugin, id, "signal"); err != nil {
		return err
	}
	err := m.rt.Signal(ctx, id, sig)
	m.record(audit.ContainerSignal, plugin, id, err, map[string]any{"signal": sig})
	return err
}

// SignalAll sends a signal to every process of the container's user but
// init, by running kill -SIG -1 inside the container as that user: the
// kernel then reaches a shell and whatever it waits for.
func (m *Manager) SignalAll(ctx context.Context, plugin, id, sig string) error {
	if err := m.check(plugin, id, "signal"); err != nil {
		return err
	}
	if strings.Trim(sig, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" || sig == "" {
		return fmt.Errorf("signal %q is not a signal name", sig)
	}
	res, err := m.rt.Exec(ctx, id, runtime.ExecRequest{Command: []string{"/bin/sh", "-c", "kill -s " + sig + " -- -1"}, Max: 4096})
	// No process left to signal (the command already ended) is not a failure.
	if err == nil && res.ExitCode != 0 && !strings.Contains(strings.ToLower(string(res.Stderr)), "no such process") {
		err = fmt.Errorf("kill -s %s -- -1 in the container exited %d: %s", sig, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	m.record(audit.ContainerSignal, plugin, id, err, map[string]any{"signal": sig, "scope": "all"})
	return err
}

// Stop stops a container of plugin's.
func (m *Manager) Stop(ctx context.Context, plugin, id string, grace time.Duration) error {
	if err := m.check(plugin, id, "stop"); err != nil {
		return err
	}
	err := m.rt.Stop(ctx, id, grace)
	m.record(audit.ContainerStop, plugin, id, err, nil)
	return err
}

// Remove force-removes a container of plugin's and forgets it. Removing one
// that is already gone is a success (audited at info, not as a violation).
// A removal the runtime could not do (the service is down) is retried in
// the background until it succeeds; the error is still returned.
func (m *Manager) Remove(ctx context.Context, plugin, id string) (err error) {
	ctx, span := telemetry.Start(ctx, "container.remove", attribute.String("mcp_forge.container", short(id)))
	defer func() { telemetry.End(span, err) }()
	if err := m.tracked.Check(id, plugin, "remove"); err != nil {
		var gone *RemovedError
		if errors.As(err, &gone) {
			m.audit.Record(audit.Entry{Event: audit.ContainerRemove, Success: true,
				Details: map[string]any{"container_id": id, "plugin": plugin, "already_removed": true}})
			return nil
		}
		m.violation("container.remove", plugin, "", err)
		return err
	}
	err = m.rt.Remove(ctx, id)
	m.record(audit.ContainerRemove, plugin, id, err, nil)
	if err != nil {
		m.retryLater(plugin, id)
		return err
	}
	m.forget(id)
	return nil
}

func (m *Manager) forget(id string) {
	m.tracked.Remove(id)
	m.mu.Lock()
	delete(m.limits, id)
	delete(m.gvisor, id)
	delete(m.verdicts, id)
	delete(m.scrub, id)
	delete(m.pending, id)
	m.dropWarmUpLocked(id)
	if r, ok := m.runOf[id]; ok {
		delete(m.runOf, id)
		if rc := m.runs[r]; rc != nil {
			delete(rc.ids, id)
			if len(rc.ids) == 0 {
				close(rc.gone)
				delete(m.runs, r)
			}
		}
	}
	m.mu.Unlock()
}

// Adopt makes a running container another core created for plugin
// (a session handed over through the runtime, which claimed it first)
// this manager's, as if it had created it.
func (m *Manager) Adopt(plugin, id string) {
	m.tracked.Add(id, plugin)
	if m.pol.Isolation() == runtime.IsolationGVisor {
		// Made by an earlier core of this configuration: under gVisor.
		m.mu.Lock()
		m.gvisor[id] = ""
		m.mu.Unlock()
	}
	m.record(audit.ContainerAdopt, plugin, id, nil, nil)
}

// Release hands a container over to another core: it is forgotten without
// being removed, and its plugin's later operations on it find it gone.
func (m *Manager) Release(id string) {
	if m.tracked.Check(id, "", "release") != nil {
		return
	}
	m.forget(id)
	m.record(audit.ContainerRelease, "", id, nil, nil)
}

// runContainers are the containers of one run that are not yet removed;
// gone is closed when the last one is.
type runContainers struct {
	ids  map[string]bool
	gone chan struct{}
}

// bindLocked counts container id as one of run's (caller holds m.mu).
func (m *Manager) bindLocked(id, run string) {
	if _, ok := m.runOf[id]; ok {
		return
	}
	rc := m.runs[run]
	if rc == nil {
		rc = &runContainers{ids: map[string]bool{}, gone: make(chan struct{})}
		m.runs[run] = rc
	}
	rc.ids[id] = true
	m.runOf[id] = run
}

// BindRun counts a container of plugin's, created before the run existed (a
// warm pool's), as serving run: the run's slots are then held until it is
// removed too. A container already bound to another run is refused: one
// container serves one run.
func (m *Manager) BindRun(plugin, id, run string) error {
	if run == "" {
		return fmt.Errorf("bind container %s to a run: no run id", short(id))
	}
	if err := m.check(plugin, id, "bind"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.runOf[id]; ok && r != run {
		return fmt.Errorf("container %s already served run %s: a container serves one run", short(id), r)
	}
	m.bindLocked(id, run)
	return nil
}

// closedChan is what RunGone answers for a run without containers.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// RunGone is closed once no container of run is left: every container
// created with its runtime.LabelRun, or bound to it, was removed (a container whose
// removal failed counts until the retrier removes it). A stateless run may
// return its answer while its container still exits; its slots are held
// until then, so a run cannot keep a sandbox outside every limit.
func (m *Manager) RunGone(run string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rc := m.runs[run]; rc != nil {
		return rc.gone
	}
	return closedChan
}

// retryLater queues a failed removal for the retrier.
func (m *Manager) retryLater(plugin, id string) {
	m.mu.Lock()
	m.pending[id] = plugin
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Pending lists containers whose removal failed and is being retried.
func (m *Manager) Pending() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.pending))
	for id := range m.pending {
		out = append(out, id)
	}
	return out
}

// retryRemovals retries failed removals with a backoff (0.5 s growing to
// 10 s) until each succeeds, so that a container whose removal met a stopped
// Podman service goes as soon as the service is back. Each success is
// audited like any removal.
func (m *Manager) retryRemovals() {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 500*time.Millisecond, 10*time.Second, 0
	var timer <-chan time.Time
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
			if timer == nil {
				b.Reset()
				timer = time.After(b.NextBackOff())
			}
			continue
		case <-timer:
		}
		timer = nil
		for id, plugin := range m.pendingCopy() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := m.rt.Remove(ctx, id)
			cancel()
			if err == nil {
				m.record(audit.ContainerRemove, plugin, id, nil, map[string]any{"retried": true})
				m.forget(id)
			}
		}
		if len(m.Pending()) > 0 {
			timer = time.After(b.NextBackOff())
		}
	}
}

func (m *Manager) pendingCopy() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]string, len(m.pending))
	for id, o := range m.pending {
		out[id] = o
	}
	return out
}

// Ours lists containers of this instance (any server process).
func (m *Manager) Ours(ctx context.Context) ([]runtime.Container, error) {
	return m.rt.List(ctx, map[string]string{runtime.LabelManaged: "true", runtime.LabelInstance: m.instance})
}

// Reconcile removes containers of this instance left by servers that are no
// longer running. Containers of a live server (another MCP host's forge on
// the same base path) are left alone.
func (m *Manager) Reconcile(ctx context.Context) (int, error) {
	list, err := m.Ours(ctx)
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs []error
	for _, c := range list {
		srv := c.Labels[runtime.LabelServer]
		if srv == m.server || procid.Alive(srv) || c.Labels[runtime.LabelRecorded] == "true" {
			continue // a recorded session is the core's that claims it
		}
		err := m.rt.Remove(ctx, c.ID)
		m.audit.Record(audit.Entry{Event: audit.ContainerReap, SessionID: c.Labels[runtime.LabelSession], Success: err == nil,
			Details: map[string]any{"container_id": c.ID, "image": c.Image, "left_by": srv}, Error: audit.ErrText(err)})
		if err == nil {
			removed++
		} else {
			m.log.Warn("could not remove orphan container", "id", c.ID, "error", err)
			errs = append(errs, fmt.Errorf("remove orphan %s: %w", c.ID[:12], err))
		}
	}
	return removed, errors.Join(errs...)
}

// RemoveOlderThan removes this server's one-shot containers created more
// than age ago (left by a plugin that died mid-run). Session containers live
// as long as their session and are left to the idle reaper.
func (m *Manager) RemoveOlderThan(ctx context.Context, age time.Duration) (int, error) {
	list, err := m.Ours(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range list {
		if c.Labels[runtime.LabelServer] != m.server || c.Labels[runtime.LabelOneShot] != "true" || time.Since(c.Created) < age {
			continue
		}
		if err := m.Remove(ctx, "", c.ID); err == nil {
			n++
		}
	}
	return n, nil
}

// RemoveOwnedBy removes every container of one plugin (a crashed plugin's).
func (m *Manager) RemoveOwnedBy(ctx context.Context, plugin string) int {
	n := 0
	for _, id := range m.tracked.IDs() {
		if m.tracked.Check(id, plugin, "remove") == nil && m.Remove(ctx, plugin, id) == nil {
			n++
		}
	}
	return n
}

// Shutdown removes every container this server still tracks and ends the
// removal retrier. What cannot be removed now is left to the watchdog or to
// the next server's reconciliation.
func (m *Manager) Shutdown(ctx context.Context) {
	m.stopOnce.Do(func() { close(m.stop) })
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()
	m.stopWarmUps()
	done := make(chan struct{})
	go func() { m.creates.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	for _, id := range m.tracked.IDs() {
		_ = m.Remove(ctx, "", id)
	}
}
