package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/engine/grants"
	"github.com/mcp-forge/mcp-forge/core/engine/network"
	"github.com/mcp-forge/mcp-forge/core/engine/sandboxes"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/telemetry"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
)

// The engine's side of sessions: their kernels (opened, run in, restarted
// and closed through the backend plugins), tool grants, workspaces and
// audit. The table of sessions, their states and ids is core/session.

// Lookup returns client's session id. Sessions are namespaced by client:
// another client's session with the same id is not seen at all, so the
// answer (and the audit rule, session-not-found) is that of an id nobody
// has opened.
func (e *Engine) Lookup(ctx context.Context, client, id, tool string) (*session.Session, error) {
	if err := session.CheckID(id); err != nil {
		return nil, e.Refuse(client, id, tool, err, nil)
	}
	s := e.sessions.Get(client, id)
	if s == nil {
		// Another replica may have opened it (core/engine/handover).
		if _, err := e.replicas.Adopt(ctx, client, id, tool); err != nil {
			return nil, e.Refuse(client, id, tool, err, nil)
		}
		s = e.sessions.Get(client, id)
	}
	if s == nil {
		return nil, e.Refuse(client, id, tool, session.NotFound(id), nil)
	}
	if err := e.replicas.StillServed(ctx, s, tool); err != nil {
		return nil, err
	}
	return s, nil
}

// Registry is the table of the engine's sessions.
func (e *Engine) Registry() *session.Registry { return e.sessions }

// SessionBackend is the running backend name, which must keep sessions.
func (e *Engine) SessionBackend(ctx context.Context, name string) (backend.SessionBackend, error) {
	b, err := e.plugins.Backend(ctx, name)
	if err != nil {
		return nil, err
	}
	sb, ok := b.(backend.SessionBackend)
	if !ok {
		return nil, fmt.Errorf("backend %s has no sessions", name)
	}
	return sb, nil
}

// Acquire finds or creates (as "starting") the session for an execute or a
// restore. It is the one place where a live session is admitted: the
// client's quota (SessionQuota) and sessions.max_concurrent are checked here,
// under the registry's lock that adds the session, whichever tool asks.
func (e *Engine) Acquire(ctx context.Context, req Request, backendName, tool string) (*session.Session, bool, error) {
	// A checkpoint matters only to a session that is not in the table, and
	// reading it is I/O: a live session (every execute but a session's
	// first) skips it. Read outside the registry's lock, which admits the
	// session after looking it up again.
	var ckpt checkpoint.Meta
	var hasCkpt bool
	adopted := false
	if !e.sessions.Live(req.Client, req.SessionID) {
		// Another replica may have opened it (core/engine/handover).
		var err error
		if adopted, err = e.replicas.Adopt(ctx, req.Client, req.SessionID, tool); err != nil {
			return nil, false, err
		}
	}
	if !e.sessions.Live(req.Client, req.SessionID) {
		ckpt, hasCkpt = e.ckpts.Get(req.Client, req.SessionID)
	}
	var quotaErr error // refused by the client's quota: recorded outside the lock
	s, created, err := e.sessions.Acquire(req.Client, req.SessionID, func(a session.Admission) (*session.Session, error) {
		if adopted {
			// This call took the session over and a destroy came in
			// between: the call was for that session, not a new one.
			return nil, fmt.Errorf("session %q was destroyed while this call waited for it", req.SessionID)
		}
		if hasCkpt && ckpt.Language != req.Language {
			have := e.LanguageName(ckpt.Language)
			return nil, refusal.New(session.RuleSessionLanguage, "session %q has a checkpoint of %s (list_sessions shows it): run %s code in it with execute_%s, use another session_id, or destroy_session it first",
				req.SessionID, have, have, ckpt.Language)
		}
		if quotaErr = e.Admit(req.Client, req.SessionID, a); quotaErr != nil {
			return nil, quotaErr
		}
		now := time.Now()
		internal := session.InternalID(req.Client, req.SessionID)
		return &session.Session{ID: req.SessionID, Internal: internal, Backend: backendName, Language: req.Language, Client: req.Client, Created: now, LastActive: now, State: session.StateStarting,
			Docs: map[string]string{}, Start: backend.OpenSessionRequest{SessionID: internal, Image: req.CustomImage, Env: req.Environment}, Pending: hasCkpt}, nil
	})
	if quotaErr != nil {
		e.QuotaRefused(ctx, req.Client, tool, req.SessionID, quotaErr)
	}
	if err != nil {
		return nil, false, err
	}
	// Language never changes: no lock needed to read it.
	if !created && s.Language != req.Language {
		have := e.LanguageName(s.Language)
		return nil, false, refusal.New(session.RuleSessionLanguage, "session %q runs %s: run %s code in it with execute_%s, or use another session_id for %s code",
			req.SessionID, have, have, s.Language, e.LanguageName(req.Language))
	}
	return s, created, nil
}

// QuotaRefused records a refusal of the client's quota (Admit), outside
// the registry's lock.
func (e *Engine) QuotaRefused(ctx context.Context, client, tool, id string, err error) {
	if e.SessionQuota != nil {
		e.SessionQuota.Refused(ctx, client, tool, id, err)
	}
}

// Admit refuses one more live session of client's beyond its quota or
// sessions.max_concurrent (under the registry's lock: see Acquire).
func (e *Engine) Admit(client, id string, a session.Admission) error {
	if e.SessionQuota != nil {
		if err := e.SessionQuota.CheckSessions(client, a.Owned); err != nil {
			return err
		}
	}
	if a.Open >= e.cfg.Sessions.MaxConcurrent {
		return refusal.New(session.RuleSessionsMax, "cannot start session %q: %d sessions are open, the limit (sessions.max_concurrent = %d); destroy one with destroy_session, or wait for idle sessions to be removed after sessions.idle_timeout (%d s)",
			id, a.Open, e.cfg.Sessions.MaxConcurrent, e.cfg.Sessions.IdleTimeout)
	}
	return nil
}

// Open starts the session's kernel (caller holds s's lock); restart: the
// session had one, and its workspace stays.
func (e *Engine) Open(ctx context.Context, s *session.Session, restart bool) error {
	sb, err := e.SessionBackend(ctx, s.Backend)
	if err == nil {
		err = e.issuer().Isolation(s)
	}
	if err == nil {
		start := time.Now()
		req := s.Start
		if restart {
			req.WorkspaceID = cmp.Or(e.ws.Bound(s.Internal), s.Internal)
		}
		var info backend.SessionInfo
		info, err = sb.OpenSession(ctx, req)
		warm := err == nil && info.WorkspaceID != "" && info.WorkspaceID != s.Internal
		if err == nil {
			err = e.issuer().Honoured(s, info.ContainerID)
		}
		if err != nil && info.ContainerID != "" {
			_ = sb.CloseSession(context.WithoutCancel(ctx), s.Internal)
		} else if warm {
			// A kernel pre-started under a pool id: its workspace becomes
			// this session's. A binding the workspace manager refuses (not
			// that plugin's, already another session's) fails the start.
			if berr := e.ws.Bind(s.Internal, info.WorkspaceID, s.Backend); berr != nil {
				_ = sb.CloseSession(context.WithoutCancel(ctx), s.Internal)
				err = fmt.Errorf("the %s backend handed over a kernel whose workspace cannot be this session's: %w", s.Backend, berr)
			}
		}
		took := time.Since(start)
		d := map[string]any{"session": s.ID, "backend": s.Backend, "language": s.Language, "image": s.Start.Image, "start_ms": took.Milliseconds(), "warm": warm}
		if warm {
			d["workspace"] = info.WorkspaceID
		}
		if info.ContainerID != "" {
			d["container"] = info.ContainerID
		}
		entry := audit.Entry{Event: audit.SessionCreate, SessionID: s.Internal, UserID: s.Client, Success: err == nil, Error: audit.ErrText(err), Severity: audit.ErrSeverity(err), Details: d}
		if warm {
			// A warm kernel's container was created and audited before any
			// session asked for it: handing it over creates nothing, so
			// this entry is the one that must be written, or nothing runs.
			if aerr := audit.Must(e.rec, entry); aerr != nil {
				_ = sb.CloseSession(context.WithoutCancel(ctx), s.Internal)
				return fmt.Errorf("execution refused: the audit log cannot be written (%v), and nothing runs unaudited; fix the log's path, permissions or disk space (`mcp-forge doctor` says what is wrong)", aerr)
			}
		} else {
			e.rec.Record(entry)
		}
		if err == nil {
			e.sessions.CountStart(s.Backend, warm, took)
			s.Sandbox, s.Resume = info.ContainerID, info.ResumeState
			e.replicas.Record(ctx, s, info)
		}
	}
	return err
}

// SessionStartStats reports per backend how its kernels were started
// (environment/info).
func (e *Engine) SessionStartStats() map[string]session.Starts { return e.sessions.StartStats() }

// executeSession runs a request in its session, starting the kernel on
// first use and restarting a dead one with a notice that state was lost.
func (e *Engine) executeSession(ctx context.Context, s *session.Session, created bool, breq backend.ExecuteRequest, tools grants.Ask, emit func(backend.StreamEvent)) (backend.ExecuteResult, []OutputFile, error) {
	s.Lock()
	defer s.Unlock()
	// Under s's lock: only this run's files come back. What the last
	// execute saw is the start, unless the core wrote into the workspace
	// since (a file the kernel wrote between calls comes with this one).
	before, seen := s.Outputs()
	if !seen {
		before = e.files.OutputSnapshot(s.Internal)
	}
	var notices []string
	switch state := e.sessions.State(s); {
	case state == session.StateGone:
		if meta, ok := e.ckpts.Get(s.Client, s.ID); ok && meta.Suspended {
			return backend.ExecuteResult{}, nil, fmt.Errorf("session %q was suspended (idle past sessions.suspend_after) while this call waited for it: nothing ran; call again and it resumes", s.ID)
		}
		return backend.ExecuteResult{}, nil, fmt.Errorf("session %q was destroyed while this call waited for it", s.ID)
	case created:
		if err := e.issuer().Session(ctx, s, tools); err != nil {
			e.sessions.Drop(s)
			e.RemoveWorkspace(s.Internal)
			return backend.ExecuteResult{}, nil, err
		}
		if notice, ok := e.ckpts.ResumePending(ctx, s); ok {
			notices = append(notices, notice)
			before = e.files.OutputSnapshot(s.Internal)
			break
		}
		if err := e.Open(ctx, s, false); err != nil {
			e.CloseGrant(s)
			e.sessions.Drop(s)
			e.RemoveWorkspace(s.Internal)
			return backend.ExecuteResult{}, nil, err
		}
		if s.Pending {
			notices = append(notices, e.ckpts.RestorePending(ctx, s))
			before = e.files.OutputSnapshot(s.Internal) // restored files are not this run's output
		}
	case state == session.StateDead:
		reason := s.LostReason
		if err := e.Reopen(ctx, s); err != nil {
			return backend.ExecuteResult{}, nil, fmt.Errorf("session %q could not be restarted after its kernel died: %w", s.ID, err)
		}
		notices = append(notices, fmt.Sprintf("session %q was restarted before this run: %s. Variables and imports from before are gone.", s.ID, reason))
	default:
		if err := e.replicas.StillOwned(ctx, s, "execute_"+s.Language); err != nil {
			return backend.ExecuteResult{}, nil, err
		}
		if len(breq.Env) > 0 {
			notices = append(notices, "environment applies when a session starts; it was ignored for this existing session")
		}
		if breq.Image != "" && breq.Image != s.Start.Image {
			notices = append(notices, "custom_image applies when a session starts; this session keeps its image")
		}
	}
	breq.Image, breq.Env = s.Start.Image, s.Start.Env
	if len(tools.ToolIDs) > 0 && !created {
		if s.Grant == nil {
			return backend.ExecuteResult{}, nil, refusal.New(RuleMCPTools, "session %q was started without mcp_tools: a session's tools directory is mounted when its kernel starts, so pass mcp_tools on a session's first call (destroy_session, then call again with mcp_tools); tools can be added on later calls of such a session", s.ID)
		}
		// The container mounted the grant at its start: the new tools
		// appear in the same directory.
		if err := s.Grant.Extend(ctx, tools.ToolIDs); err != nil {
			return backend.ExecuteResult{}, nil, err
		}
		if hint := bridge.LateToolsHint(s.Language); hint != "" {
			notices = append(notices, hint)
		}
	}
	if s.Grant != nil {
		s.Grant.BeginRun(breq.RunID, tools.Client, tools.Approve) // a fresh call budget per execute
		breq.ToolsGrant = s.Grant.Token()
	}
	hosts := append(slices.Clip(tools.Hosts), tools.Credentials...)
	if n, err := network.SessionNotice(s.Network, s.ID, s.Backend, created, hosts); err != nil {
		return backend.ExecuteResult{}, nil, e.Refuse(tools.Client, s.ID, tools.Tool, err, map[string]any{"network": hosts})
	} else if n != "" {
		notices = append(notices, n)
	}
	if s.SandboxGrant != nil && created {
		if n := sandboxes.Notice(s.SandboxGrant, s.Backend); n != "" {
			notices = append(notices, n)
		}
	}
	e.sessions.SetState(s, session.StateBusy)
	sb, err := e.SessionBackend(ctx, s.Backend)
	var res backend.ExecuteResult
	if err == nil {
		res, err = e.cancelled.InSession(ctx, sb, s, breq, emit)
	}
	e.sessions.Update(s, func(s *session.Session) {
		s.LastActive = time.Now()
		s.Executions++
		var ce *plugins.CrashError
		switch {
		case errors.As(err, &ce):
			s.State, s.LostReason = session.StateDead, "the "+ce.Plugin+" plugin crashed"
		case err != nil && s.State == session.StateBusy:
			s.State = session.StateIdle
		case res.SessionDead:
			s.State, s.LostReason = session.StateDead, "the kernel died"
			if res.Error != nil {
				s.LostReason = res.Error.Message
			}
		case s.State == session.StateBusy: // a crash elsewhere may have marked it dead meanwhile
			s.State = session.StateIdle
		}
	})
	res.Notices = append(notices, res.Notices...)
	writes := s.Writes()
	_, fspan := telemetry.Start(ctx, "engine.output_files")
	files, more, after := e.files.OutputFiles(s.Internal, before)
	fspan.SetAttributes(attribute.Int("mcp_forge.files", len(files)))
	fspan.End()
	s.SetOutputs(after, writes)
	res.Notices = append(res.Notices, more...)
	if err == nil {
		// Under the session's lock: cells are recorded in the order they ran.
		e.limits.Cap(&res)
		network.Scrub(network.Secrets(s.Network), &res)
		e.recordCell(s, breq.Code, res) // history.go
	}
	return res, files, err
}

// Reopen replaces a dead kernel with a new one started like the first
// (caller holds s's lock).
func (e *Engine) Reopen(ctx context.Context, s *session.Session) error {
	if sb, err := e.SessionBackend(ctx, s.Backend); err == nil {
		_ = sb.CloseSession(ctx, s.Internal) // what is left of the old one
	}
	if err := e.Open(ctx, s, true); err != nil {
		return err
	}
	e.sessions.Update(s, func(s *session.Session) { s.State, s.LostReason = session.StateIdle, "" })
	return nil
}

// introspect refreshes a session's variables (caller holds s's lock).
func (e *Engine) introspect(ctx context.Context, s *session.Session) {
	if e.sessions.State(s) == session.StateDead {
		return
	}
	sb, err := e.SessionBackend(ctx, s.Backend)
	var vars []backend.Variable
	if err == nil {
		vars, err = sb.Inspect(ctx, s.Internal)
	}
	e.sessions.Update(s, func(s *session.Session) {
		if err != nil {
			s.VarsError = err.Error()
			return
		}
		s.Variables, s.VarsUpdated, s.VarsError = vars, time.Now(), ""
	})
}

// View returns a session's state, refreshing the variables when asked.
func (e *Engine) View(ctx context.Context, client, id string, refresh bool) (session.View, error) {
	if v, ok := e.suspendedView(client, id); ok {
		return v, nil
	}
	s, err := e.Lookup(ctx, client, id, "resources/read")
	if err != nil {
		return session.View{}, err
	}
	if refresh && e.checkSessionJob(s) == nil { // a job's session shows its last introspection
		s.Lock()
		e.introspect(ctx, s)
		s.Unlock()
	}
	return e.sessions.View(s), nil
}

// StateSuspended is the state of a session suspended while idle
// (sessions.suspend_after): its sandbox is saved whole and removed, and
// the next call on it resumes it.
const StateSuspended = "suspended"

// suspendedView is client's session id when it is suspended: shown as it
// is, without resuming it (a resource read is not a call on it).
func (e *Engine) suspendedView(client, id string) (session.View, bool) {
	if session.CheckID(id) != nil || e.sessions.Get(client, id) != nil {
		return session.View{}, false
	}
	meta, ok := e.ckpts.Get(client, id)
	if !ok || !meta.Suspended {
		return session.View{}, false
	}
	return session.View{ID: id, Language: meta.Language, Backend: meta.Backend, State: StateSuspended,
		Note:               "suspended at " + meta.Created.UTC().Format(time.RFC3339) + " after being idle: its whole sandbox is saved; the next call on it resumes it",
		IntrospectionError: "not looked at: the session is suspended (the next call on it resumes it)"}, true
}

// DocumentState records descriptions of variables and a note, then
// refreshes the introspection.
func (e *Engine) DocumentState(ctx context.Context, client, id string, vars map[string]string, note *string, clear bool) (session.View, error) {
	const tool = "document_state"
	s, err := e.Lookup(ctx, client, id, tool)
	if err != nil {
		return session.View{}, err
	}
	if err := session.CheckDocs(vars, note); err != nil {
		return session.View{}, e.Refuse(client, id, tool, err, nil)
	}
	if err := e.RefuseIfJob(s, tool); err != nil { // sessionjobs.go
		return session.View{}, err
	}
	s.Lock()
	defer s.Unlock()
	if err := e.sessions.Document(s, vars, note, clear); err != nil {
		return session.View{}, e.Refuse(client, id, tool, err, nil)
	}
	e.introspect(ctx, s)
	return e.sessions.View(s), nil
}

// RestartSession clears a session's namespace, keeping its container; a
// dead session gets a new kernel.
func (e *Engine) RestartSession(ctx context.Context, client, id string) (session.View, error) {
	s, err := e.Lookup(ctx, client, id, "restart_session")
	if err != nil {
		return session.View{}, err
	}
	if err := e.RefuseIfJob(s, "restart_session"); err != nil {
		return session.View{}, err
	}
	e.claim(ctx, s, false)
	defer s.Unlock()
	switch e.sessions.State(s) {
	case session.StateGone:
		return session.View{}, fmt.Errorf("restart session %q: it was destroyed meanwhile", id)
	case session.StateDead:
		err = e.Reopen(ctx, s)
	default:
		var sb backend.SessionBackend
		if sb, err = e.SessionBackend(ctx, s.Backend); err == nil {
			err = sb.RestartSession(ctx, s.Internal)
		}
	}
	e.rec.Record(audit.Entry{Event: "session.restart", SessionID: s.Internal, UserID: client, Success: err == nil, Error: audit.ErrText(err), Severity: audit.ErrSeverity(err),
		Details: map[string]any{"session": id}})
	if err != nil {
		return session.View{}, fmt.Errorf("restart session %q: %w", id, err)
	}
	e.sessions.Update(s, func(s *session.Session) {
		s.State, s.LastActive, s.Variables, s.VarsUpdated = session.StateIdle, time.Now(), nil, time.Time{}
	})
	return e.sessions.View(s), nil
}

// DestroySession removes a session's container and directory.
func (e *Engine) DestroySession(ctx context.Context, client, id string) error {
	const tool = "destroy_session"
	if session.CheckID(id) == nil && !e.sessions.Live(client, id) {
		// Another replica may serve it, its checkpoint in a store shared
		// with this one: the session goes first, with it (core/engine/handover).
		if _, err := e.replicas.Adopt(ctx, client, id, tool); err != nil {
			return e.Refuse(client, id, tool, err, nil)
		}
	}
	if session.CheckID(id) == nil && !e.sessions.Live(client, id) && e.ckpts.Remove(client, id) {
		// Only a checkpoint is left (after a restart or the idle reaper).
		e.rec.Record(audit.Entry{Event: audit.SessionDestroy, SessionID: session.InternalID(client, id), UserID: client, Success: true, Severity: audit.Info,
			Details: map[string]any{"session": id, "reason": "destroyed by the client: its checkpoint removed"}})
		return nil
	}
	s, err := e.Lookup(ctx, client, id, tool)
	if err != nil {
		return err
	}
	e.jobs.CancelFor(s, "destroy_session was called")
	closed := e.claim(ctx, s, true)
	defer s.Unlock()
	defer e.ckpts.Remove(s.Client, s.ID) // a checkpoint goes with its session
	if closed {
		return e.DestroyLocked(ctx, s, "destroyed by the client while code ran", true)
	}
	return e.DestroyLocked(ctx, s, "destroyed by the client", false)
}

// ClaimGrace is how long destroy waits for interrupted code to stop before
// it closes the kernel under it.
var ClaimGrace = 3 * time.Second

// claim takes a session's operation lock for destroy or restart. Code
// running in the session is interrupted first, so the client does not wait
// for code it wants gone; when kill is set and the code still runs after
// ClaimGrace (a kernel that ignores interrupts, a C loop), the kernel is
// closed under it and claim reports closed.
func (e *Engine) claim(ctx context.Context, s *session.Session, kill bool) (closed bool) {
	if s.TryLock() {
		return false
	}
	sb, err := e.SessionBackend(ctx, s.Backend)
	if err != nil {
		s.Lock()
		return false
	}
	if err := sb.Interrupt(ctx, s.Internal); err != nil {
		e.log.Warn("could not interrupt a session's running code", "session", s.Internal, "error", err)
	}
	locked := make(chan struct{})
	go func() { s.Lock(); close(locked) }()
	select {
	case <-locked:
		return false
	case <-time.After(ClaimGrace):
	}
	if !kill || e.sessions.State(s) == session.StateStarting {
		// A kernel still starting (or being taken over from another
		// replica) is not the plugin's to close yet: wait for it, then
		// the caller closes it as any other.
		<-locked
		return false
	}
	err = sb.CloseSession(ctx, s.Internal)
	<-locked
	return err == nil
}

// DestroyLocked closes the kernel (unless claim already did) and removes
// the session (caller holds s's lock).
func (e *Engine) DestroyLocked(ctx context.Context, s *session.Session, why string, closed bool) error {
	if e.sessions.State(s) == session.StateGone {
		return nil
	}
	var err error
	if !closed {
		var sb backend.SessionBackend
		if sb, err = e.SessionBackend(ctx, s.Backend); err == nil {
			err = sb.CloseSession(ctx, s.Internal)
		}
	}
	e.sessions.Drop(s)
	e.CloseGrant(s)
	e.RemoveWorkspace(s.Internal)
	e.rec.Record(audit.Entry{Event: audit.SessionDestroy, SessionID: s.Internal, UserID: s.Client, Success: err == nil, Error: audit.ErrText(err), Severity: audit.ErrSeverity(err),
		Details: map[string]any{"session": s.ID, "reason": why, "executions": s.Executions}})
	return err
}

// RemoveWorkspace removes the workspace named by a session's internal id.
func (e *Engine) RemoveWorkspace(id string) {
	if err := e.ws.RemoveSession(id); err != nil {
		e.log.Warn("could not remove a session's files", "session", id, "error", err)
	}
}

// Sessions lists the sessions of one connection, or with all every one.
// Variables are left out (the state resource has them).
func (e *Engine) Sessions(client string, all bool) []session.View {
	return e.sessions.List(client, all)
}

// ReapIdle destroys sessions idle longer than sessions.idle_timeout.
func (e *Engine) ReapIdle(ctx context.Context) int {
	return e.sessions.ReapIdle(time.Duration(e.cfg.Sessions.IdleTimeout)*time.Second, func(s *session.Session) {
		if e.replicas.LostTo(ctx, s) { // idle here because another replica serves it
			return
		}
		e.log.Info("removing idle session", "session", s.ID, "client", s.Client, "internal_id", s.Internal, "idle", time.Since(s.LastActive).Round(time.Second))
		_ = e.DestroyLocked(ctx, s, fmt.Sprintf("idle for more than sessions.idle_timeout (%d s)", e.cfg.Sessions.IdleTimeout), false)
	})
}

// MarkBackendDead marks every session of a crashed plugin dead.
func (e *Engine) MarkBackendDead(name string) { e.sessions.MarkBackendDead(name) }

// CloseAll destroys every session (server shutdown). With
// sessions.checkpoint_on_shutdown, each live idle session is checkpointed
// first, so its client finds it again after a restart.
func (e *Engine) CloseAll(ctx context.Context) {
	e.jobs.Stop() // a job's session is free once its run stops
	handOver := e.replicas.Successors(ctx)
	for _, s := range e.sessions.All() {
		s.Lock()
		if handOver && e.replicas.HandOver(ctx, s) { // another replica serves it next
			s.Unlock()
			continue
		}
		e.ckpts.SaveAtShutdown(ctx, s)
		_ = e.DestroyLocked(ctx, s, "server shutdown", false)
		s.Unlock()
	}
}

// CloseGrant ends a session's tool grant and network (caller holds s's
// lock).
func (e *Engine) CloseGrant(s *session.Session) { e.issuer().Close(s) }
