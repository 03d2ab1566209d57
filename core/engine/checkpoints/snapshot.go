package checkpoints

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Whole-sandbox checkpoints: a gVisor session's checkpoint is a snapshot
// of its sandbox (memory, processes, open files, sockets) where the
// runtime can take one (SessionSnapshots), else its variables as before,
// saying why. A snapshot lies in the checkpoint store like any checkpoint
// (bounded by the store's quota, 0700, per client, expired, removed with
// its session), sealed with the store's key over the client, the session
// and every byte: what restores is only what the core saved for that
// client's session.

// SessionSnapshots saves a session's sandbox whole and restores one, through
// the host services of the session's plugin (hostsvc.Host.Snapshot and
// Restore).
type SessionSnapshots interface {
	// CanSnapshot: the most bytes a snapshot of plugin's container can
	// take, or why it cannot be saved whole (an error wrapping
	// sandbox.ErrNoSnapshot).
	CanSnapshot(plugin, container string) (int64, error)
	// Snapshot saves plugin's running container into dir, at most budget
	// bytes, ending it with stop; an error wrapping sandbox.ErrNoSnapshot:
	// it cannot be.
	Snapshot(ctx context.Context, plugin, container, dir string, budget int64, stop bool) error
	// Restore creates and starts plugin's container for session (an
	// internal id) from the snapshot in dir, and answers it.
	Restore(ctx context.Context, plugin, session, dir string) (string, error)
	// Remove removes plugin's container, as plugin would.
	Remove(ctx context.Context, plugin, container string) error
	// Running reports whether plugin's container still runs.
	Running(ctx context.Context, plugin, container string) (bool, error)
}

// SetSnapshots lets gVisor sessions be checkpointed whole through s.
func (c *Keeper) SetSnapshots(s SessionSnapshots) { c.snaps = s }

// sessionFile keeps what the core holds of the session beside its sandbox
// (documentation, note, history): a session resumed from its snapshot
// after a suspend or a restart has them again.
const sessionFile = "session.json"

type sessionKept struct {
	Docs    map[string]string `json:"docs,omitempty"`
	Note    string            `json:"note,omitempty"`
	History session.History   `json:"history"`
}

// resumeFile is the plugin's resume state of the snapshotted kernel,
// beside the sandbox's files: with it the plugin reaches the restored
// kernel (backend.OpenSessionRequest.Restored).
const resumeFile = "resume"

// snapshotLocked saves live idle session s whole as the client's
// checkpoint of as (caller holds s's lock); a suspend (why whySuspend)
// ends its sandbox with the save. An error wrapping sandbox.ErrNoSnapshot:
// it cannot be, and the caller saves its variables.
func (c *Keeper) snapshotLocked(ctx context.Context, s *session.Session, as, why string) (CheckpointInfo, error) {
	switch {
	case c.snaps == nil:
		return CheckpointInfo{}, fmt.Errorf("%w: this server's runtime cannot save a sandbox whole", sandbox.ErrNoSnapshot)
	case s.Sandbox == "" || len(s.Resume) == 0:
		return CheckpointInfo{}, fmt.Errorf("%w: backend %s cannot reach a restored kernel (it reports no resume state)", sandbox.ErrNoSnapshot, s.Backend)
	case s.Grant != nil || s.Network != nil:
		return CheckpointInfo{}, fmt.Errorf("%w: the session holds MCP tools or network, whose connections to the core cannot be saved with it", sandbox.ErrNoSnapshot)
	}
	// At most what its limits let it take, not the store's whole room:
	// a snapshot being made never holds back everyone else's checkpoints.
	bound, err := c.snaps.CanSnapshot(s.Backend, s.Sandbox)
	if err != nil {
		return CheckpointInfo{}, err
	}
	key, err := checkpoint.SealKey(checkpointRoot(c.cfg))
	if err != nil {
		return CheckpointInfo{}, fmt.Errorf("the snapshot seal key: %w", err)
	}
	var kept sessionKept
	c.sessions.Update(s, func(s *session.Session) {
		kept = sessionKept{Docs: maps.Clone(s.Docs), Note: s.Note, History: s.History.Clone()}
	})
	keptJSON, err := json.Marshal(kept)
	if err != nil {
		return CheckpointInfo{}, err
	}
	t0 := time.Now()
	info := CheckpointInfo{SessionID: as, Language: s.Language, Backend: s.Backend, Client: s.Client, Created: t0, Kind: checkpoint.KindSnapshot, Suspended: why == whySuspend}
	info, err = c.ckpts.Put(info, bound, func(dir string, budget int64) ([]string, error) {
		if err := c.snaps.Snapshot(ctx, s.Backend, s.Sandbox, dir, budget, why == whySuspend); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, resumeFile), s.Resume, 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, sessionFile), keptJSON, 0o600); err != nil {
			return nil, err
		}
		return nil, checkpoint.Seal(key, dir, s.Client, as)
	})
	var full *checkpoint.FullError
	if errors.As(err, &full) {
		err = c.storeFull(s, full)
	}
	if errors.Is(err, sandbox.ErrNoSnapshot) {
		return CheckpointInfo{}, err // not audited here: the variables' checkpoint is, saying why
	}
	d := map[string]any{"session": s.ID, "reason": why, "kind": checkpoint.KindSnapshot, "bytes": info.Bytes, "duration_ms": time.Since(t0).Milliseconds()}
	if as != s.ID {
		d["as"] = as
	}
	c.rec.Record(audit.Entry{Event: "session.checkpoint", SessionID: s.Internal, UserID: s.Client, Success: err == nil, Error: audit.ErrText(err), Severity: audit.ErrSeverity(err), Details: d})
	if err != nil {
		return CheckpointInfo{}, err
	}
	return info, nil
}

// restoreSnapshot brings snapshot meta back as session s's sandbox (caller
// holds s's lock): once the snapshot's seal holds, a kernel s still has
// (live) is closed and its files removed, then the snapshot is restored in
// a new container and its plugin reaches the kernel in it, which holds
// everything it held. With keep, the session's documentation, note and
// history come back from the snapshot too (a suspended or restarted
// session resumed: they were the session's).
func (c *Keeper) restoreSnapshot(ctx context.Context, s *session.Session, meta checkpoint.Meta, live bool, why string, keep bool) (CheckpointInfo, error) {
	t0 := time.Now()
	sb, err := c.eng.SessionBackend(ctx, s.Backend)
	if err != nil {
		return CheckpointInfo{}, err
	}
	var ctr string
	var resume []byte
	closed := false // s's live kernel, closed for the snapshot
	key, err := checkpoint.SealKey(checkpointRoot(c.cfg))
	if err == nil {
		err = c.ckpts.Read(s.Client, meta.SessionID, func(dir string) error {
			if err := checkpoint.Verify(key, dir, s.Client, meta.SessionID); err != nil {
				c.rec.Record(audit.Entry{Event: audit.SecurityViolation, Severity: audit.Warning, SessionID: s.Internal, UserID: s.Client, Success: false, Error: err.Error(),
					Details: map[string]any{"rule": checkpoint.RuleSnapshotSeal, "operation": "session.restore", "session": s.ID}})
				return &refusal.Error{Rule: checkpoint.RuleSnapshotSeal, Err: err,
					Msg: fmt.Sprintf("the snapshot of session %q does not match its seal (its files changed since it was made, or are not this session's): it is not restored; destroy_session removes it", meta.SessionID)}
			}
			var err error
			if resume, err = os.ReadFile(filepath.Join(dir, resumeFile)); err != nil {
				return err
			}
			if keep {
				var k sessionKept
				if data, err := os.ReadFile(filepath.Join(dir, sessionFile)); err == nil && json.Unmarshal(data, &k) == nil {
					c.sessions.Update(s, func(s *session.Session) {
						s.Docs, s.Note, s.History = k.Docs, k.Note, k.History
						if s.Docs == nil {
							s.Docs = map[string]string{}
						}
					})
				}
			}
			// Sealed: now the kernel the session has goes.
			if live {
				_ = sb.CloseSession(ctx, s.Internal)
				c.eng.CloseGrant(s)
				c.eng.RemoveWorkspace(s.Internal)
				closed = true
			}
			c.sessions.SetState(s, session.StateBusy)
			s.Wrote()
			ctr, err = c.snaps.Restore(ctx, s.Backend, s.Internal, dir)
			return err
		})
	}
	var info backend.SessionInfo
	if err == nil {
		req := s.Start
		req.WorkspaceID, req.Resume, req.ResumeContainer, req.Restored = s.Internal, resume, ctr, true
		if info, err = sb.OpenSession(ctx, req); err == nil && !info.Resumed {
			_ = sb.CloseSession(context.WithoutCancel(ctx), s.Internal)
			err = fmt.Errorf("backend %s started a new kernel instead of reaching the restored one", s.Backend)
		}
		if err != nil {
			_ = c.snaps.Remove(context.WithoutCancel(ctx), s.Backend, ctr)
		}
	}
	if err == nil {
		s.Sandbox, s.Resume = ctr, info.ResumeState
	}
	c.sessions.Update(s, func(s *session.Session) {
		switch {
		case err == nil:
			s.State, s.LostReason = session.StateIdle, ""
		case closed:
			// Its kernel was closed for the snapshot that did not come back.
			s.State, s.LostReason = session.StateDead, "its snapshot could not be restored"
		}
		s.LastActive, s.Variables, s.VarsUpdated = time.Now(), nil, time.Time{}
	})
	event := "session.restore"
	if meta.Suspended && keep {
		event = "session.resume"
	}
	c.rec.Record(audit.Entry{Event: event, SessionID: s.Internal, UserID: s.Client, Success: err == nil, Error: audit.ErrText(err), Severity: audit.ErrSeverity(err),
		Details: map[string]any{"session": s.ID, "by": why, "kind": checkpoint.KindSnapshot, "container": ctr, "checkpoint_created": meta.Created,
			"duration_ms": time.Since(t0).Milliseconds()}})
	return meta, err
}

// ResumePending restores the snapshot a new session was created over
// (caller holds s's lock, no kernel started yet) and answers the notice
// the result carries; ok false: there is none to restore here (no
// checkpoint, one of variables, or a first call asking for MCP tools or
// network, which a restored sandbox cannot have), and the caller starts a
// kernel as usual. A snapshot that fails to restore is kept for
// restore_session, and the call runs in a new kernel.
func (c *Keeper) ResumePending(ctx context.Context, s *session.Session) (string, bool) {
	if !s.Pending || s.Grant != nil || s.Network != nil || (s.SandboxGrant != nil && len(s.SandboxGrant.Names()) > 0) {
		return "", false
	}
	meta, ok := c.Get(s.Client, s.ID)
	if !ok || meta.Kind != checkpoint.KindSnapshot {
		return "", false
	}
	s.Pending = false
	t0 := time.Now()
	event := "first execute"
	if meta.Suspended {
		event = "resume after suspend"
	}
	if _, err := c.restoreSnapshot(ctx, s, meta, false, event, true); err != nil {
		c.eng.RemoveWorkspace(s.Internal)
		c.sessions.SetState(s, session.StateStarting)
		if oerr := c.eng.Open(ctx, s, false); oerr != nil {
			return "", false // the caller's own open reports it
		}
		c.sessions.Update(s, func(s *session.Session) { s.State, s.LostReason = session.StateIdle, "" })
		return fmt.Sprintf("session %q has a snapshot of %s that could not be restored (%v): this run started in an empty session; restore_session tries again, destroy_session removes it",
			s.ID, meta.Created.Format(time.RFC3339), err), true
	}
	return fmt.Sprintf("%s Resumed in %d ms.", checkpoint.RestoreNotice(meta), time.Since(t0).Milliseconds()), true
}

// whySuspend is the reason of a suspend's snapshot.
const whySuspend = "suspended"

// SuspendIdle suspends every session idle longer than
// sessions.suspend_after that can be saved whole: its sandbox is
// snapshotted into the checkpoint store and removed, its memory freed.
// The session is then a checkpoint (list_sessions lists it, bounded by the
// store's quota and sessions.checkpoint_ttl); the next call with its id
// resumes it with a notice and the time it took (ResumePending). It
// returns how many were suspended.
func (c *Keeper) SuspendIdle(ctx context.Context) int {
	after := time.Duration(c.cfg.Sessions.SuspendAfter) * time.Second
	if after <= 0 || c.snaps == nil {
		return 0
	}
	return c.sessions.EachIdle(after, func(s *session.Session) bool {
		if c.sessions.State(s) != session.StateIdle || c.replicas.LostTo(ctx, s) {
			return false
		}
		if s.SuspendRefused.Equal(s.LastActive) {
			return false // refused since its last call: not tried on every sweep
		}
		idle := time.Since(s.LastActive)
		t0 := time.Now()
		info, err := c.snapshotLocked(ctx, s, s.ID, whySuspend)
		if errors.Is(err, sandbox.ErrNoSnapshot) {
			s.SuspendRefused = s.LastActive
			return false // kept live until sessions.idle_timeout
		}
		if err != nil {
			s.SuspendRefused = s.LastActive
			if running, rerr := c.snaps.Running(ctx, s.Backend, s.Sandbox); rerr == nil && !running {
				// Saved and stopped, then the save failed: its kernel is gone.
				c.sessions.Update(s, func(s *session.Session) {
					s.State, s.LostReason = session.StateDead, fmt.Sprintf("its suspend failed (%v)", err)
				})
			}
			c.log.Warn("could not suspend an idle session", "session", s.ID, "client", s.Client, "error", err)
			return false
		}
		var cerr error
		if sb, err := c.eng.SessionBackend(ctx, s.Backend); err == nil {
			cerr = sb.CloseSession(ctx, s.Internal)
		}
		c.eng.CloseGrant(s) // the resume grants afresh
		c.sessions.Drop(s)
		c.eng.RemoveWorkspace(s.Internal)
		c.rec.Record(audit.Entry{Event: "session.suspend", SessionID: s.Internal, UserID: s.Client, Success: cerr == nil, Error: audit.ErrText(cerr), Severity: audit.ErrSeverity(cerr),
			Details: map[string]any{"session": s.ID, "idle_s": int(idle.Seconds()), "bytes": info.Bytes, "suspend_ms": time.Since(t0).Milliseconds()}})
		c.log.Info("suspended an idle session", "session", s.ID, "client", s.Client, "bytes", info.Bytes, "took", time.Since(t0).Round(time.Millisecond))
		return true
	})
}
