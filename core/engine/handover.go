package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	heldnote "github.com/mcp-forge/mcp-forge/core/held"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Sessions that outlive the replica that opened them. With a session
// store (a core in a Kubernetes cluster), a session is recorded in the
// cluster once its kernel runs; a replica that finds no session of a
// client's id in its own table looks there, claims the session's pod from
// a replica that is gone (or handed it over), and has the same plugin
// resume the kernel that is still running: the variables are kept. A
// replica stopping gracefully hands its sessions over instead of closing
// them.

// Rules of the refusals of handed-over sessions (docs/audit.md).
const (
	RuleSessionHeld  = "session-held"  // another live replica serves the session
	RuleSessionMoved = "session-moved" // the session was taken over by another replica
	// RuleSessionRecord: a record in the cluster names another client
	// or session than the id it is stored under.
	RuleSessionRecord = "session-record"
)

// SessionHosts is the host services' side of moving sessions between
// cores (core/hostsvc, one Host per plugin).
type SessionHosts interface {
	// Endpoints is the workspace and endpoints of plugin's container.
	Endpoints(plugin, container string) (workspace string, eps []runtime.SessionEndpoint, ok bool)
	// Adopt lets plugin reach a container another core created.
	Adopt(plugin, container, workspace string, eps []runtime.SessionEndpoint) error
	// Release forgets plugin's container without removing it.
	Release(plugin, container string)
	// Remove removes plugin's container, as plugin would.
	Remove(ctx context.Context, plugin, container string) error
	// Running reports whether plugin's container still runs.
	Running(ctx context.Context, plugin, container string) (bool, error)
}

// SetSessionStore records sessions in st and takes them over from there.
func (e *Engine) SetSessionStore(st runtime.SessionStore, h SessionHosts) {
	e.store, e.hosts = st, h
}

// record records s, whose kernel info just started, in the session store
// (caller holds s's lock). A session that cannot be recorded still runs,
// on this replica only; one with a tool grant or network is never
// recorded, since both are this replica's.
func (e *Engine) record(ctx context.Context, s *session.Session, info backend.SessionInfo) {
	e.setContainer(s, "")
	if e.store == nil || info.ContainerID == "" || len(info.ResumeState) == 0 || s.Grant != nil || s.Network != nil {
		return
	}
	ws, eps, ok := e.hosts.Endpoints(s.Backend, info.ContainerID)
	if !ok {
		return
	}
	start := time.Now()
	err := e.store.RecordSession(ctx, info.ContainerID, runtime.SessionRecord{
		Client: s.Client, ID: s.ID, Internal: s.Internal, Backend: s.Backend, Language: s.Language, Image: s.Start.Image,
		Workspace: ws, Endpoints: eps, Resume: info.ResumeState, Created: s.Created,
	})
	if err != nil {
		e.log.Warn("could not record a session in the cluster: only this replica can serve it", "session", s.ID, "client", s.Client, "error", err)
		return
	}
	e.setContainer(s, info.ContainerID)
	e.log.Debug("session recorded", "session", s.ID, "container", s.Container, "took", time.Since(start))
}

// adopt takes client's session id over from the session store, if it is
// recorded there: false and no session when it is not (or a call of the
// client took it over first). tool names the asking tool for a refusal.
func (e *Engine) adopt(ctx context.Context, client, id, tool string) (bool, error) {
	if e.store == nil {
		return false, nil
	}
	internal := session.InternalID(client, id)
	rec, ctr, err := e.store.FindSession(ctx, internal)
	switch {
	case errors.Is(err, runtime.ErrNoRecord):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("session %q: cannot read the cluster's record of it: %w; retry", id, err)
	case rec.Client != client || rec.ID != id:
		// The internal id is a hash of both: a record that names another
		// client was not written by a core.
		e.rec.Record(audit.Entry{Event: audit.SecurityViolation, Severity: audit.Critical, SessionID: internal, UserID: client, Success: false,
			Error: "a session record names another client or session", Details: map[string]any{"rule": RuleSessionRecord, "container_id": ctr, "session": id}})
		return false, nil
	}
	var quotaErr error
	s, created, err := e.sessions.Acquire(client, id, func(a session.Admission) (*session.Session, error) {
		// A session its gone replica still counts (until its Lease goes
		// with its pod, or expires) counts twice meanwhile: a tenant at
		// its limit is refused for that while, rather than let past it.
		if quotaErr = e.admit(client, id, a); quotaErr != nil {
			return nil, quotaErr
		}
		ns := &session.Session{ID: id, Internal: internal, Backend: rec.Backend, Language: rec.Language, Client: client, Created: rec.Created, LastActive: time.Now(),
			State: session.StateStarting, Docs: map[string]string{}, Start: backend.OpenSessionRequest{SessionID: internal, Image: rec.Image}}
		// Locked before anyone can see it: a destroy or a call waits
		// for the takeover.
		ns.Lock()
		return ns, nil
	})
	if quotaErr != nil && e.SessionQuota != nil {
		e.SessionQuota.Refused(ctx, client, tool, id, quotaErr)
	}
	if err != nil || !created {
		return false, err // !created: a call of this client got there first
	}
	defer s.Unlock()
	start := time.Now()
	err = e.takeOver(ctx, s, rec, ctr)
	d := map[string]any{"session": id, "backend": rec.Backend, "language": rec.Language, "container": ctr, "takeover_ms": time.Since(start).Milliseconds()}
	if err != nil {
		e.sessions.Drop(s)
		e.rec.Record(audit.Entry{Event: audit.SessionAdopt, SessionID: internal, UserID: client, Success: false, Error: audit.ErrText(err), Severity: audit.Warning, Details: d})
		var held *runtime.HeldError
		if errors.As(err, &held) {
			if held.By != "" {
				heldnote.Note(ctx, held.By)
			}
			return false, refusal.New(RuleSessionHeld, "session %q is being served by another replica of this server right now: retry", id)
		}
		return false, err
	}
	e.sessions.Update(s, func(s *session.Session) { s.Container, s.State = ctr, session.StateIdle })
	e.rec.Record(audit.Entry{Event: audit.SessionAdopt, SessionID: internal, UserID: client, Success: true, Severity: audit.Info, Details: d})
	e.log.Info("took a session over from another replica", "session", id, "client", client, "container", ctr, "took", time.Since(start))
	return true, nil
}

// HeldElsewhere is the other live replica that serves client's session
// id ("NAMESPACE/NAME" of its pod), "" when this replica serves it or may
// (not recorded, handed over, its replica gone, no store, or the cluster
// cannot say). The HTTP transport forwards the session's calls there
// before anything of them is admitted or counted here (core/forward).
func (e *Engine) HeldElsewhere(ctx context.Context, client, id string) string {
	if e.store == nil || session.CheckID(id) != nil || e.sessions.Live(client, id) {
		return ""
	}
	rec, ctr, err := e.store.FindSession(ctx, session.InternalID(client, id))
	if err != nil || rec.Client != client || rec.ID != id {
		return "" // the call's own lookup says (and audits) what is wrong
	}
	by, err := e.store.Holder(ctx, ctr)
	if err != nil {
		return ""
	}
	return by
}

// takeOver claims the session's container and has its plugin resume the
// kernel in it (caller holds s's lock). A kernel that is gone (its
// container stopped, no answer with its key) is removed with its record:
// the client's next call starts afresh. Anything else hands the session
// back for a later call to try again.
func (e *Engine) takeOver(ctx context.Context, s *session.Session, rec runtime.SessionRecord, ctr string) error {
	if err := e.store.ClaimSession(ctx, ctr); err != nil {
		return err
	}
	if err := e.hosts.Adopt(s.Backend, ctr, rec.Workspace, rec.Endpoints); err != nil {
		e.handBack(ctx, s, ctr)
		return fmt.Errorf("session %q: %w", s.ID, err)
	}
	if rec.Workspace != s.Internal {
		if err := e.ws.Bind(s.Internal, rec.Workspace, s.Backend); err != nil {
			e.handBack(ctx, s, ctr)
			return fmt.Errorf("session %q: %w", s.ID, err)
		}
	}
	sb, err := e.sessionBackend(ctx, s.Backend)
	if err == nil {
		req := s.Start
		req.Resume, req.ResumeContainer = rec.Resume, ctr
		_, err = sb.OpenSession(ctx, req)
	}
	if err == nil {
		return nil
	}
	// Only a container that stopped has lost the kernel: one that runs
	// may be busy with the cell its replica left running, or the call
	// was cancelled.
	if running, serr := e.hosts.Running(context.WithoutCancel(ctx), s.Backend, ctr); serr == nil && !running {
		if rerr := e.hosts.Remove(context.WithoutCancel(ctx), s.Backend, ctr); rerr != nil {
			e.log.Warn("could not remove the container of a session whose kernel is lost", "session", s.ID, "container", ctr, "error", rerr)
		}
		e.removeWorkspace(s.Internal)
		return fmt.Errorf("session %q was served by a replica that is gone, and its kernel has stopped since (%w): its state is lost; call again to start it afresh", s.ID, err)
	}
	e.handBack(ctx, s, ctr)
	return fmt.Errorf("session %q could not be taken over from the replica that served it: %w; retry (a kernel busy with a long cell answers once it ends)", s.ID, err)
}

// handBack undoes a claim that could not be completed: any replica may try
// again.
func (e *Engine) handBack(ctx context.Context, s *session.Session, ctr string) {
	if err := e.store.ReleaseSession(context.WithoutCancel(ctx), ctr); err != nil {
		e.log.Warn("could not hand a session back", "session", s.ID, "container", ctr, "error", err)
	}
	e.hosts.Release(s.Backend, ctr)
}

// served reports whether this replica still serves s: true for a session
// that is not recorded.
func (e *Engine) served(ctx context.Context, s *session.Session) (bool, error) {
	ctr := e.containerOf(s)
	if e.store == nil || ctr == "" {
		return true, nil
	}
	own, err := e.store.OwnsSession(ctx, ctr)
	if err != nil {
		return false, fmt.Errorf("session %q: cannot confirm in the cluster that this replica still serves it: %w; retry", s.ID, err)
	}
	return own, nil
}

// containerOf is s's recorded container ("": none).
func (e *Engine) containerOf(s *session.Session) (ctr string) {
	e.sessions.Update(s, func(s *session.Session) { ctr = s.Container })
	return ctr
}

func (e *Engine) setContainer(s *session.Session, ctr string) {
	e.sessions.Update(s, func(s *session.Session) { s.Container = ctr })
}

// stillOwned checks, before anything touches a recorded session's kernel,
// that no other replica took it over meanwhile (caller holds s's lock):
// one that did is forgotten here without touching its kernel, and the
// call refused for the client to retry where the session is now.
func (e *Engine) stillOwned(ctx context.Context, s *session.Session, tool string) error {
	if own, err := e.served(ctx, s); own || err != nil {
		return err
	}
	e.letGo(ctx, s, "taken over by another replica")
	return e.refuse(s.Client, s.ID, tool, refusal.New(RuleSessionMoved, "session %q was taken over by another replica of this server: retry, and the call reaches it there", s.ID), nil)
}

// stillServed is stillOwned for a session found in the table, not yet
// locked: the lock is taken only when it was lost.
func (e *Engine) stillServed(ctx context.Context, s *session.Session, tool string) error {
	if own, err := e.served(ctx, s); own || err != nil {
		return err
	}
	s.Lock()
	defer s.Unlock()
	if e.sessions.State(s) == session.StateGone {
		return e.refuse(s.Client, s.ID, tool, session.NotFound(s.ID), nil)
	}
	return e.stillOwned(ctx, s, tool)
}

// lostTo reports whether the idle reaper must leave s alone (caller holds
// s's lock): another replica took it over (it is let go here), or the
// cluster cannot say (the next sweep asks again). The reaper never closes
// a kernel that may not be this replica's.
func (e *Engine) lostTo(ctx context.Context, s *session.Session) bool {
	own, err := e.served(ctx, s)
	switch {
	case err != nil:
		e.log.Warn("cannot tell whether this replica still serves an idle session; leaving it to the next sweep", "session", s.ID, "error", err)
		return true
	case own:
		return false
	}
	e.letGo(ctx, s, "taken over by another replica")
	return true
}

// letGo drops s from this replica, leaving its kernel running for another
// (caller holds s's lock): the plugin's channels to it close before the
// plugin forgets it, so nothing it sends on the way out reaches the kernel.
func (e *Engine) letGo(ctx context.Context, s *session.Session, why string) {
	e.store.Forget(s.Container)
	e.hosts.Release(s.Backend, s.Container)
	if sb, err := e.sessionBackend(ctx, s.Backend); err == nil {
		_ = sb.CloseSession(ctx, s.Internal)
	}
	e.sessions.Drop(s)
	e.rec.Record(audit.Entry{Event: audit.SessionHandover, SessionID: s.Internal, UserID: s.Client, Success: true, Severity: audit.Info,
		Details: map[string]any{"session": s.ID, "container": s.Container, "reason": why, "executions": s.Executions}})
}

// successors reports whether another replica will be there to take the
// sessions over when this one stops (a rolling update, not the removal
// of the Deployment).
func (e *Engine) successors(ctx context.Context) bool {
	if e.store == nil {
		return false
	}
	n, err := e.store.Successors(ctx)
	if err != nil {
		e.log.Warn("cannot tell whether another replica takes this one's sessions over; closing them", "error", err)
		return false
	}
	return n > 0
}

// handOver leaves a recorded session to the other replicas at a graceful
// stop (caller holds s's lock): false if it is not recorded or the cluster
// did not take it, and the session is then closed like any other.
func (e *Engine) handOver(ctx context.Context, s *session.Session) bool {
	if e.store == nil || s.Container == "" || e.sessions.State(s) != session.StateIdle {
		return false
	}
	if err := e.store.ReleaseSession(ctx, s.Container); err != nil {
		e.log.Warn("could not hand a session over; closing it", "session", s.ID, "client", s.Client, "error", err)
		return false
	}
	// The plugin is stopped next: it need not be told.
	e.hosts.Release(s.Backend, s.Container)
	e.sessions.Drop(s)
	e.rec.Record(audit.Entry{Event: audit.SessionHandover, SessionID: s.Internal, UserID: s.Client, Success: true, Severity: audit.Info,
		Details: map[string]any{"session": s.ID, "container": s.Container, "reason": "server shutdown", "executions": s.Executions}})
	return true
}
