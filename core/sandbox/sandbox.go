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
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// LabelServer identifies the live server process that owns a container, so
// reconciliation never removes containers of another running forge.
const LabelServer = "io.mcp-forge.server"

// TimeoutError is a container killed at its wall-clock limit.
type TimeoutError struct{ Limit time.Duration }

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("execution timed out after %s (the timeout limit) and the container was killed; ask for a longer timeout or make the code faster", e.Limit)
}

// OOMError is a container killed for exceeding its memory limit.
type OOMError struct{ Limit int64 }

func (e *OOMError) Error() string {
	return fmt.Sprintf("out of memory: the process was killed at the %s memory limit (exit 137); use less memory or ask for a larger limit", config.FormatSize(e.Limit))
}

// Manager creates and operates sandbox containers on behalf of an owner.
type Manager struct {
	rt       runtime.Runtime
	pol      *policy.Policy
	tracked  *Tracker
	audit    audit.Recorder
	log      hclog.Logger
	instance string
	server   string
	enforce  bool

	mu      sync.Mutex
	limits  map[string]runtime.Limits // container id → limits, for OOM messages
	checked bool
	infoErr error
	// unenforced: the runtime cannot enforce memory/CPU/pids (notice.go).
	unenforced bool
}

// Options configure a Manager.
type Options struct {
	Instance              string // shared by every server on one base path
	EnforceResourceLimits bool
	ServerID              string // default: this process (tests simulate dead servers)
}

// New returns a manager over rt.
func New(rt runtime.Runtime, pol *policy.Policy, rec audit.Recorder, log hclog.Logger, o Options) *Manager {
	m := &Manager{
		rt: rt, pol: pol, tracked: NewTracker(), audit: rec, log: log,
		instance: o.Instance, server: o.ServerID, enforce: o.EnforceResourceLimits,
		limits: map[string]runtime.Limits{},
	}
	if m.server == "" {
		m.server = ServerID(os.Getpid())
	}
	return m
}

// ServerTag is a short stable name of this server process, used to keep the
// workspaces of servers sharing a base path apart.
func (m *Manager) ServerTag() string {
	sum := sha256.Sum256([]byte(m.server))
	return hex.EncodeToString(sum[:4])
}

// Policy is the policy the manager applies.
func (m *Manager) Policy() *policy.Policy { return m.pol }

// Runtime is the underlying engine (for doctor and image checks).
func (m *Manager) Runtime() runtime.Runtime { return m.rt }

// ServerID is "<pid>-<start time>" of a process: unique across pid reuse.
func ServerID(pid int) string {
	return fmt.Sprintf("%d-%s", pid, procStart(pid))
}

func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "0"
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		f := strings.Fields(s[i+1:])
		if len(f) > 19 {
			return f[19]
		}
	}
	return "0"
}

func serverAlive(id string) bool {
	pidStr, _, ok := strings.Cut(id, "-")
	pid, err := strconv.Atoi(pidStr)
	if !ok || err != nil || pid <= 0 {
		return false
	}
	return ServerID(pid) == id
}

// checkEnforceable refuses to run when limits cannot be enforced (rootless
// on cgroups v1) unless the operator turned enforcement off.
func (m *Manager) checkEnforceable(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.checked {
		return m.infoErr
	}
	info, err := m.rt.Info(ctx)
	if err != nil {
		return err // not cached: the service may come up later
	}
	m.checked = true
	m.unenforced = info.Rootless && !info.CgroupsV2 // notice.go
	if info.Rootless && !info.CgroupsV2 && m.enforce {
		m.infoErr = ErrLimitsUnenforceable // notice.go
	}
	return m.infoErr
}

func (m *Manager) violation(op, owner, session string, err error) {
	var v *policy.Violation
	if errors.As(err, &v) {
		m.audit.Record(audit.Entry{Event: audit.SecurityViolation, Severity: audit.Critical, SessionID: session,
			Success: false, Error: err.Error(), Details: map[string]any{"operation": op, "rule": v.Rule, "owner": owner}})
	}
}

// Create hardens and checks the intent, then creates the container.
func (m *Manager) Create(ctx context.Context, in policy.Intent) (string, error) {
	in.Instance = m.instance
	if in.Labels == nil {
		in.Labels = map[string]string{}
	}
	in.Labels[LabelServer] = m.server
	spec, err := m.pol.Harden(in)
	if err != nil {
		m.violation("container.create", in.Owner, in.SessionID, err)
		return "", err
	}
	if err := m.checkEnforceable(ctx); err != nil {
		m.audit.Record(audit.Entry{Event: audit.ContainerCreate, Severity: audit.Error, SessionID: in.SessionID, Error: err.Error(), Details: refusalDetails(err)})
		return "", err
	}
	details := map[string]any{"image": spec.Image, "owner": in.Owner, "memory": spec.Limits.MemoryBytes,
		"cpu_quota": spec.Limits.CPUQuota, "pids": spec.Limits.Pids, "timeout_s": spec.Limits.Timeout.Seconds(),
		"network": spec.Network, "mounts": len(spec.Mounts)}
	if h := in.Labels[runtime.LabelCodeHash]; h != "" {
		details["code_sha256"] = h
	}
	id, err := m.rt.Create(ctx, spec)
	if err != nil {
		m.audit.Record(audit.Entry{Event: audit.ContainerCreate, Severity: audit.Error, SessionID: in.SessionID, Details: details, Error: err.Error()})
		return "", err
	}
	details["container_id"] = id
	m.tracked.Add(id, in.Owner)
	m.mu.Lock()
	m.limits[id] = spec.Limits
	m.mu.Unlock()
	m.audit.Record(audit.Entry{Event: audit.ContainerCreate, SessionID: in.SessionID, Success: true, Details: details})
	return id, nil
}

// CheckSpec applies the policy to a complete spec and audits a refusal; for
// callers that hold a full spec rather than an intent.
func (m *Manager) CheckSpec(s runtime.Spec) error {
	err := m.pol.CheckCreate(s)
	if err != nil {
		m.violation("container.create", s.Owner, s.SessionID, err)
	}
	return err
}

func (m *Manager) check(owner, id, op string) error {
	if err := m.tracked.Check(id, owner, op); err != nil {
		m.violation("container."+op, owner, "", err)
		return err
	}
	return nil
}

func (m *Manager) record(event, owner, id string, err error, extra map[string]any) {
	e := audit.Entry{Event: event, Success: err == nil, Details: map[string]any{"container_id": id, "owner": owner}}
	for k, v := range extra {
		e.Details[k] = v
	}
	if err != nil {
		e.Severity, e.Error = audit.Error, err.Error()
	}
	m.audit.Record(e)
}

// Start starts a container owner created.
func (m *Manager) Start(ctx context.Context, owner, id string) error {
	if err := m.check(owner, id, "start"); err != nil {
		return err
	}
	err := m.rt.Start(ctx, id)
	m.record(audit.ContainerStart, owner, id, err, nil)
	return err
}

// Wait waits for exit. A timeout becomes *TimeoutError, a memory kill
// *OOMError; otherwise the exit code is returned.
func (m *Manager) Wait(ctx context.Context, owner, id string, timeout time.Duration) (int, error) {
	if err := m.check(owner, id, "wait"); err != nil {
		return -1, err
	}
	m.mu.Lock()
	lim := m.limits[id]
	m.mu.Unlock()
	if timeout <= 0 || (lim.Timeout > 0 && timeout > lim.Timeout) {
		timeout = lim.Timeout
	}
	code, err := m.rt.Wait(ctx, id, timeout)
	switch {
	case errors.Is(err, runtime.ErrTimeout):
		err = &TimeoutError{Limit: timeout}
	case err == nil && code == 137 && lim.MemoryBytes > 0:
		err = &OOMError{Limit: lim.MemoryBytes}
	}
	if err != nil {
		m.record(audit.ContainerStop, owner, id, err, map[string]any{"exit_code": code})
	}
	return code, err
}

// State reports whether a container of owner's runs, and if not how it ended
// (an OOM kill is recognised by exit 137 under a memory limit).
func (m *Manager) State(ctx context.Context, owner, id string) (running bool, code int, err error) {
	if err := m.check(owner, id, "inspect"); err != nil {
		return false, 0, err
	}
	return m.rt.State(ctx, id)
}

// ExitError explains how a container ended: an OOM kill or an exit code.
func (m *Manager) ExitError(id string, code int) error {
	m.mu.Lock()
	lim := m.limits[id]
	m.mu.Unlock()
	if code == 137 && lim.MemoryBytes > 0 {
		return &OOMError{Limit: lim.MemoryBytes}
	}
	return fmt.Errorf("the process exited with code %d", code)
}

// Logs returns the container's stdout and stderr, each capped at max bytes.
func (m *Manager) Logs(ctx context.Context, owner, id string, max int64) (runtime.Output, error) {
	if err := m.check(owner, id, "read logs of"); err != nil {
		return runtime.Output{}, err
	}
	return m.rt.Logs(ctx, id, max)
}

// Exec runs a command inside a running container of owner's.
func (m *Manager) Exec(ctx context.Context, owner, id string, cmd []string, max int64) (runtime.ExecResult, error) {
	if err := m.check(owner, id, "exec in"); err != nil {
		return runtime.ExecResult{}, err
	}
	res, err := m.rt.Exec(ctx, id, cmd, max)
	m.record(audit.ContainerExec, owner, id, err, map[string]any{"command": cmd[0], "exit_code": res.ExitCode})
	return res, err
}

// Signal sends a signal to the container's processes.
func (m *Manager) Signal(ctx context.Context, owner, id, sig string) error {
	if err := m.check(owner, id, "signal"); err != nil {
		return err
	}
	err := m.rt.Signal(ctx, id, sig)
	m.record(audit.ContainerSignal, owner, id, err, map[string]any{"signal": sig})
	return err
}

// Stop stops a container of owner's.
func (m *Manager) Stop(ctx context.Context, owner, id string, grace time.Duration) error {
	if err := m.check(owner, id, "stop"); err != nil {
		return err
	}
	err := m.rt.Stop(ctx, id, grace)
	m.record(audit.ContainerStop, owner, id, err, nil)
	return err
}

// Remove force-removes a container of owner's and forgets it.
func (m *Manager) Remove(ctx context.Context, owner, id string) error {
	if err := m.check(owner, id, "remove"); err != nil {
		return err
	}
	err := m.rt.Remove(ctx, id)
	if err == nil {
		m.tracked.Remove(id)
		m.mu.Lock()
		delete(m.limits, id)
		m.mu.Unlock()
	}
	m.record(audit.ContainerRemove, owner, id, err, nil)
	return err
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
		srv := c.Labels[LabelServer]
		if srv == m.server || serverAlive(srv) {
			continue
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
		if c.Labels[LabelServer] != m.server || c.Labels[runtime.LabelOneShot] != "true" || time.Since(c.Created) < age {
			continue
		}
		if err := m.Remove(ctx, "", c.ID); err == nil {
			n++
		}
	}
	return n, nil
}

// RemoveOwnedBy removes every container of one owner (a crashed plugin's).
func (m *Manager) RemoveOwnedBy(ctx context.Context, owner string) int {
	n := 0
	for _, id := range m.tracked.IDs() {
		if m.tracked.Check(id, owner, "remove") == nil && m.Remove(ctx, owner, id) == nil {
			n++
		}
	}
	return n
}

// Shutdown removes every container this server still tracks.
func (m *Manager) Shutdown(ctx context.Context) {
	for _, id := range m.tracked.IDs() {
		_ = m.Remove(ctx, "", id)
	}
}
