// Package handover keeps sessions past the replica that opened them. With
// a session store (a core in a Kubernetes cluster), a session is recorded
// in the cluster once its kernel runs; a replica that finds no session of
// a client's id in its own table looks there, claims the session's pod
// from a replica that is gone (or handed it over), and has the same plugin
// resume the kernel that is still running: the variables are kept. A
// replica stopping gracefully hands its sessions over instead of closing
// them. Without a store, every session is this replica's alone.
package handover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

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

// Engine is what a takeover needs of the engine: its sessions, admitted
// as it admits them, their kernels reached through their plugins, and
// refusals audited as it audits them.
type Engine interface {
	Registry() *session.Registry
	Admit(client, id string, a session.Admission) error
	QuotaRefused(ctx context.Context, client, tool, id string, err error)
	SessionBackend(ctx context.Context, name string) (backend.SessionBackend, error)
	RemoveWorkspace(internal string)
	Refuse(client, sessionID, tool string, err error, details map[string]any) error
	CloseGrant(s *session.Session)
}

// Replicas are the sessions of an engine as the replicas of its core share
// them.
type Replicas struct {
	eng      Engine
	sessions *session.Registry
	ws       *workspace.Manager
	rec      audit.Recorder
	log      hclog.Logger
	store    runtime.SessionStore // nil: sessions live in this replica only
	hosts    SessionHosts
}

// New returns eng's sessions, this replica's alone until SetSessionStore.
func New(eng Engine, ws *workspace.Manager, rec audit.Recorder, log hclog.Logger) *Replicas {
	return &Replicas{eng: eng, sessions: eng.Registry(), ws: ws, rec: rec, log: log}
}

// SetSessionStore records sessions in st and takes them over from there.
func (r *Replicas) SetSessionStore(st runtime.SessionStore, h SessionHosts) {
	r.store, r.hosts = st, h
}

// Record records s, whose kernel info just started, in the session store
// (caller holds s's lock). A session that cannot be recorded still runs,
// on this replica only; one with a tool grant or network is never
// recorded, since both are this replica's.
func (r *Replicas) Record(ctx context.Context, s *session.Session, info backend.SessionInfo) {
	r.setContainer(s, "")
	if r.store == nil || info.ContainerID == "" || len(info.ResumeState) == 0 || s.Grant != nil || s.Network != nil {
		return
	}
	ws, eps, ok := r.hosts.Endpoints(s.Backend, info.ContainerID)
	if !ok {
		return
	}
	start := time.Now()
	err := r.store.RecordSession(ctx, info.ContainerID, runtime.SessionRecord{
		Client: s.Client, ID: s.ID, Internal: s.Internal, Backend: s.Backend, Language: s.Language, Image: s.Start.Image,
		Workspace: ws, Endpoints: eps, Resume: info.ResumeState, Created: s.Created,
	})
	if err != nil {
		r.log.Warn("could not record a session in the cluster: only this replica can serve it", "session", s.ID, "client", s.Client, "error", err)
		return
	}
	r.setContainer(s, info.ContainerID)
	r.log.Debug("session recorded", "session", s.ID, "container", s.Container, "took", time.Since(start))
}

// Adopt takes client's session id over from the session store, if it is
// recorded there: false and no session when it is not (or a call of the
// client took it over first). tool names the asking tool for a refusal.
func (r *Replicas) Adopt(ctx context.Context, client, id, tool string) (bool, error) {
	if r.store == nil {
		return false, nil
	}
	internal := session.InternalID(client, id)
	rec, ctr, err := r.store.FindSession(ctx, internal)
	switch {
	case errors.Is(err, runtime.ErrNoRecord):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("session %q: cannot read the cluster's record of it: %w; retry", id, err)
	case rec.Client != client || rec.ID != id:
		// The internal id is a hash of both: a record that names another
		// client was not written by a core.
		r.rec.Record(audit.Entry{Event: audit.SecurityViolation, Severity: audit.Critical, SessionID: internal, UserID: client, Success: false,
			Error: "a session record names another client or session", Details: map[string]any{"rule": RuleSessionRecord, "container_id": ctr, "session": id}})
		return false, nil
	}
	var quotaErr error
	s, created, err := r.sessions.Acquire(client, id, func(a session.Admission) (*session.Session, error) {
		// A session its gone replica still counts (until its Lease goes
		// with its pod, or expires) counts twice meanwhile: a tenant at
		// its limit is refused for that while, rather than let past it.
		if quotaErr = r.eng.Admit(client, id, a); quotaErr != nil {
			return nil, quotaErr
		}
		ns := &session.Session{ID: id, Internal: internal, Backend: rec.Backend, Language: rec.Language, Client: client, Created: rec.Created, LastActive: time.Now(),
			State: session.StateStarting, Docs: map[string]string{}, Start: backend.OpenSessionRequest{SessionID: internal, Image: rec.Image}}
		// Locked before anyone can see it: a destroy or a call waits
		// for the takeover.
		ns.Lock()
		return ns, nil
	})
	if quotaErr != nil {
		r.eng.QuotaRefused(ctx, client, tool, id, quotaErr)
	}
	if err != nil || !created {
		return false, err // !created: a call of this client got there first
	}
	defer s.Unlock()
	start := time.Now()
	err = r.takeOver(ctx, s, rec, ctr)
	d := map[string]any{"session": id, "backend": rec.Backend, "language": rec.Language, "container": ctr, "takeover_ms": time.Since(start).Milliseconds()}
	if err != nil {
		r.sessions.Drop(s)
		r.rec.Record(audit.Entry{Event: audit.SessionAdopt, SessionID: internal, UserID: client, Success: false, Error: audit.ErrText(err), Severity: audit.Warning, Details: d})
		var held *runtime.HeldError
		if errors.As(err, &held) {
			// The refusal carries who serves the session: the HTTP
			// transport forwards the call there (core/forward).
			return false, &refusal.Error{Rule: RuleSessionHeld, Err: held,
				Msg: fmt.Sprintf("session %q is being served by another replica of this server right now: retry", id)}
		}
		return false, err
	}
	r.sessions.Update(s, func(s *session.Session) { s.Container, s.State = ctr, session.StateIdle })
	r.rec.Record(audit.Entry{Event: audit.SessionAdopt, SessionID: internal, UserID: client, Success: true, Severity: audit.Info, Details: d})
	r.log.Info("took a session over from another replica", "session", id, "client", client, "container", ctr, "took", time.Since(start))
	return true, nil
}

// HeldElsewhere is the other live replica that serves client's session
// id ("NAMESPACE/NAME" of its pod), "" when this replica serves it or may
// (not recorded, handed over, its replica gone, no store, or the cluster
// cannot say). The HTTP transport forwards the session's calls there
// before anything of them is admitted or counted here (core/forward).
func (r *Replicas) HeldElsewhere(ctx context.Context, client, id string) string {
	if r.store == nil || session.CheckID(id) != nil || r.sessions.Live(client, id) {
		return ""
	}
	rec, ctr, err := r.store.FindSession(ctx, session.InternalID(client, id))
	if err != nil || rec.Client != client || rec.ID != id {
		return "" // the call's own lookup says (and audits) what is wrong
	}
	by, err := r.store.Holder(ctx, ctr)
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
func (r *Replicas) takeOver(ctx context.Context, s *session.Session, rec runtime.SessionRecord, ctr string) error {
	if err := r.store.ClaimSession(ctx, ctr); err != nil {
		return err
	}
	if err := r.hosts.Adopt(s.Backend, ctr, rec.Workspace, rec.Endpoints); err != nil {
		r.handBack(ctx, s, ctr)
		return fmt.Errorf("session %q: %w", s.ID, err)
	}
	if rec.Workspace != s.Internal {
		if err := r.ws.Bind(s.Internal, rec.Workspace, s.Backend); err != nil {
			r.handBack(ctx, s, ctr)
			return fmt.Errorf("session %q: %w", s.ID, err)
		}
	}
	sb, err := r.eng.SessionBackend(ctx, s.Backend)
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
	if running, serr := r.hosts.Running(context.WithoutCancel(ctx), s.Backend, ctr); serr == nil && !running {
		if rerr := r.hosts.Remove(context.WithoutCancel(ctx), s.Backend, ctr); rerr != nil {
			r.log.Warn("could not remove the container of a session whose kernel is lost", "session", s.ID, "container", ctr, "error", rerr)
		}
		r.eng.RemoveWorkspace(s.Internal)
		return fmt.Errorf("session %q was served by a replica that is gone, and its kernel has stopped since (%w): its state is lost; call again to start it afresh", s.ID, err)
	}
	r.handBack(ctx, s, ctr)
	return fmt.Errorf("session %q could not be taken over from the replica that served it: %w; retry (a kernel busy with a long cell answers once it ends)", s.ID, err)
}

// handBack undoes a claim that could not be completed: any replica may try
// again.
func (r *Replicas) handBack(ctx context.Context, s *session.Session, ctr string) {
	if err := r.store.ReleaseSession(context.WithoutCancel(ctx), ctr); err != nil {
		r.log.Warn("could not hand a session back", "session", s.ID, "container", ctr, "error", err)
	}
	r.hosts.Release(s.Backend, ctr)
}

// served reports whether this replica still serves s: true for a session
// that is not recorded.
func (r *Replicas) served(ctx context.Context, s *session.Session) (bool, error) {
	ctr := r.containerOf(s)
	if r.store == nil || ctr == "" {
		return true, nil
	}
	own, err := r.store.OwnsSession(ctx, ctr)
	if err != nil {
		return false, fmt.Errorf("session %q: cannot confirm in the cluster that this replica still serves it: %w; retry", s.ID, err)
	}
	return own, nil
}

// containerOf is s's recorded container ("": none).
func (r *Replicas) containerOf(s *session.Session) (ctr string) {
	r.sessions.Update(s, func(s *session.Session) { ctr = s.Container })
	return ctr
}

func (r *Replicas) setContainer(s *session.Session, ctr string) {
	r.sessions.Update(s, func(s *session.Session) { s.Container = ctr })
}

// StillOwned checks, before anything touches a recorded session's kernel,
// that no other replica took it over meanwhile (caller holds s's lock):
// one that did is forgotten here without touching its kernel, and the
// call refused for the client to retry where the session is now.
func (r *Replicas) StillOwned(ctx context.Context, s *session.Session, tool string) error {
	if own, err := r.served(ctx, s); own || err != nil {
		return err
	}
	r.letGo(ctx, s, "taken over by another replica")
	return r.eng.Refuse(s.Client, s.ID, tool, refusal.New(RuleSessionMoved, "session %q was taken over by another replica of this server: retry, and the call reaches it there", s.ID), nil)
}

// StillServed is stillOwned for a session found in the table, not yet
// locked: the lock is taken only when it was lost.
func (r *Replicas) StillServed(ctx context.Context, s *session.Session, tool string) error {
	if own, err := r.served(ctx, s); own || err != nil {
		return err
	}
	s.Lock()
	defer s.Unlock()
	if r.sessions.State(s) == session.StateGone {
		return r.eng.Refuse(s.Client, s.ID, tool, session.NotFound(s.ID), nil)
	}
	return r.StillOwned(ctx, s, tool)
}

// LostTo reports whether the idle reaper must leave s alone (caller holds
// s's lock): another replica took it over (it is let go here), or the
// cluster cannot say (the next sweep asks again). The reaper never closes
// a kernel that may not be this replica's.
func (r *Replicas) LostTo(ctx context.Context, s *session.Session) bool {
	own, err := r.served(ctx, s)
	switch {
	case err != nil:
		r.log.Warn("cannot tell whether this replica still serves an idle session; leaving it to the next sweep", "session", s.ID, "error", err)
		return true
	case own:
		return false
	}
	r.letGo(ctx, s, "taken over by another replica")
	return true
}

// letGo drops s from this replica, leaving its kernel running for another
// (caller holds s's lock): the plugin's channels to it close before the
// plugin forgets it, so nothing it sends on the way out reaches the kernel.
func (r *Replicas) letGo(ctx context.Context, s *session.Session, why string) {
	r.store.Forget(s.Container)
	r.hosts.Release(s.Backend, s.Container)
	if sb, err := r.eng.SessionBackend(ctx, s.Backend); err == nil {
		_ = sb.CloseSession(ctx, s.Internal)
	}
	r.eng.CloseGrant(s) // its grants end here; the next replica grants its own
	r.sessions.Drop(s)
	r.rec.Record(audit.Entry{Event: audit.SessionHandover, SessionID: s.Internal, UserID: s.Client, Success: true, Severity: audit.Info,
		Details: map[string]any{"session": s.ID, "container": s.Container, "reason": why, "executions": s.Executions}})
}

// Successors reports whether another replica will be there to take the
// sessions over when this one stops (a rolling update, not the removal
// of the Deployment).
func (r *Replicas) Successors(ctx context.Context) bool {
	if r.store == nil {
		return false
	}
	n, err := r.store.Successors(ctx)
	if err != nil {
		r.log.Warn("cannot tell whether another replica takes this one's sessions over; closing them", "error", err)
		return false
	}
	return n > 0
}

// HandOver leaves a recorded session to the other replicas at a graceful
// stop (caller holds s's lock): false if it is not recorded or the cluster
// did not take it, and the session is then closed like any other.
func (r *Replicas) HandOver(ctx context.Context, s *session.Session) bool {
	if r.store == nil || s.Container == "" || r.sessions.State(s) != session.StateIdle {
		return false
	}
	if err := r.store.ReleaseSession(ctx, s.Container); err != nil {
		r.log.Warn("could not hand a session over; closing it", "session", s.ID, "client", s.Client, "error", err)
		return false
	}
	// The plugin is stopped next: it need not be told.
	r.hosts.Release(s.Backend, s.Container)
	r.sessions.Drop(s)
	r.rec.Record(audit.Entry{Event: audit.SessionHandover, SessionID: s.Internal, UserID: s.Client, Success: true, Severity: audit.Info,
		Details: map[string]any{"session": s.ID, "container": s.Container, "reason": "server shutdown", "executions": s.Executions}})
	return true
}
