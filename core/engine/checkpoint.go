package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// The engine's side of checkpoints: the kernel saves and loads its
// namespace (the backend's checkpoint code), the engine moves it with the
// session's files into the checkpoint store (core/checkpoint) and back,
// and audits both.

// CheckpointInfo describes a checkpoint.
type CheckpointInfo = checkpoint.Meta

// ckptFile is where the kernel writes and reads its namespace, relative to
// its working directory; the core moves it to the checkpoint store.
const ckptFile = backend.CheckpointFile

// checkpointRoot is the forge's checkpoint store: sessions.checkpoint_dir,
// by default <base>/state/checkpoints. Checkpoints live there across server
// restarts (unlike workspaces, whose names carry the server's tag).
func checkpointRoot(cfg config.Config) string {
	if cfg.Sessions.CheckpointDir != "" {
		return filepath.Clean(cfg.Sessions.CheckpointDir)
	}
	return filepath.Join(cfg.Volumes.BasePath, "state", "checkpoints")
}

// checkpointCode is how the kernels of a backend save and load their
// namespace: the code comes from the backend's Capabilities (a kernel
// plugin's Spec), so the core knows no language's code and a third-party
// kernel backend supports checkpoints by reporting it. nil: it cannot.
func (e *Engine) checkpointCode(backendName string) *backend.Checkpoint {
	for _, st := range e.plugins.Statuses() {
		if st.Name == backendName && st.Error == "" {
			return st.Capabilities.Checkpoint
		}
	}
	return nil
}

// readCheckpoint returns client's checkpoint of id, if there is one. A
// checkpoint whose record names another client (a hash collision, a copied
// directory) is not client's: ok is false.
func (e *Engine) readCheckpoint(client, id string) (checkpoint.Meta, bool) {
	m, err := e.ckpts.Get(client, id)
	return m, err == nil
}

// Checkpoints lists client's checkpoints (restore_session, or the first
// execute with the session_id, brings one back), newest first.
func (e *Engine) Checkpoints(client string) []CheckpointInfo { return e.ckpts.List(client) }

// runInKernel runs a backend's checkpoint code in a session's kernel
// (caller holds s's lock) and returns its report: the one line carrying
// this run's nonce (backend.ParseCheckpointReport), so that a marker line
// the user's code prints meanwhile (a __getstate__, an R active binding)
// is ignored. The report gives names only: times, sizes and ids are the
// core's.
func (e *Engine) runInKernel(ctx context.Context, s *session.Session, code string) (backend.CheckpointReport, error) {
	var rep backend.CheckpointReport
	sb, err := e.sessionBackend(ctx, s.Backend)
	if err != nil {
		return rep, err
	}
	code, nonce, err := backend.PrepareCheckpointCode(code)
	if err != nil {
		return rep, fmt.Errorf("backend %s: %w", s.Backend, err)
	}
	res, err := sb.ExecuteInSession(ctx, backend.ExecuteRequest{Code: code, Language: s.Language, SessionID: s.Internal, RunID: newID(),
		Timeout: time.Duration(e.cfg.Execution.MaxTimeout) * time.Second, MaxOutputBytes: e.limits.output, MaxImageBytes: e.limits.image}, nil)
	if err != nil {
		return rep, err
	}
	if res.Error != nil {
		return rep, fmt.Errorf("%s: %s", res.Error.Name, res.Error.Message)
	}
	if rep, err = backend.ParseCheckpointReport(res.Stdout, nonce); err != nil {
		return rep, fmt.Errorf("%w (stderr: %.200q)", err, res.Stderr)
	}
	return rep, nil
}

// CheckpointSession saves a session's namespace and working directory to
// the checkpoint store, replacing its previous checkpoint.
func (e *Engine) CheckpointSession(ctx context.Context, client, id string) (CheckpointInfo, error) {
	const tool = "checkpoint_session"
	s, err := e.lookup(ctx, client, id, tool)
	if err != nil {
		return CheckpointInfo{}, err
	}
	if e.checkpointCode(s.Backend) == nil {
		return CheckpointInfo{}, e.refuse(client, id, tool, refusal.New(checkpoint.RuleCheckpointLanguage, "sessions of %s in backend %s cannot be checkpointed: the backend reports no checkpoint code", e.LanguageName(s.Language), s.Backend), nil)
	}
	if err := e.refuseIfJob(s, tool); err != nil { // jobs.go
		return CheckpointInfo{}, err
	}
	s.Lock()
	defer s.Unlock()
	if st := e.sessions.State(s); st != session.StateIdle {
		return CheckpointInfo{}, e.refuse(client, id, tool, refusal.New(checkpoint.RuleCheckpointState, "session %q is %s: only a live, idle session can be checkpointed (run code in it first)", id, st), nil)
	}
	info, err := e.checkpointLocked(ctx, s, "requested")
	if err != nil {
		return CheckpointInfo{}, e.refuse(client, id, tool, fmt.Errorf("checkpoint session %q: %w", id, err), nil)
	}
	return info, nil
}

// checkpointLocked saves a live idle session (caller holds s's lock). A
// checkpoint counts against the session quota: one larger than
// volumes.session_quota is refused (checkpoint-quota), as is one that would
// bring the store past sessions.checkpoint_store_quota
// (checkpoint-store-full); either way the copy stops at the limit, what was
// copied is removed and the previous checkpoint kept. Its description is
// the core's own (session, time, sizes, files): only the variables' names
// come from the kernel, checked (runInKernel).
func (e *Engine) checkpointLocked(ctx context.Context, s *session.Session, why string) (CheckpointInfo, error) {
	return e.saveLocked(ctx, s, s.ID, why)
}

// saveLocked is checkpointLocked storing the checkpoint as the client's
// checkpoint of session id as: s's own id, or the id of a fork that
// restores from it (fork.go).
func (e *Engine) saveLocked(ctx context.Context, s *session.Session, as, why string) (CheckpointInfo, error) {
	snap, err := e.snapshotLocked(ctx, s, as, why) // snapshot.go
	if !errors.Is(err, sandbox.ErrNoSnapshot) {
		return snap, err
	}
	notWhole := ""
	if e.snaps != nil {
		// A runtime that could: say why this one was not.
		notWhole = strings.TrimPrefix(err.Error(), sandbox.ErrNoSnapshot.Error()+": ")
	}
	cp := e.checkpointCode(s.Backend)
	if cp == nil {
		return CheckpointInfo{}, fmt.Errorf("backend %s reports no checkpoint code", s.Backend)
	}
	info := CheckpointInfo{SessionID: as, Language: s.Language, Backend: s.Backend, Client: s.Client, Created: time.Now(), NotWhole: notWhole}
	quotaErr := func(detail string) error {
		return &RequestError{Rule: checkpoint.RuleCheckpointQuota, Msg: fmt.Sprintf("the checkpoint of session %q does not fit the session quota of %s (volumes.session_quota), which a checkpoint counts against (%s; a file counts at its apparent size even if sparse, or its allocated size if larger): "+
			"delete large variables (del x in Python, rm(x) in R) or files of the working directory, then checkpoint again; nothing of this checkpoint is left on disk and the previous checkpoint, if any, is kept", s.ID, e.cfg.Volumes.SessionQuota, detail)}
	}
	rep, err := e.runInKernel(ctx, s, cp.Save)
	switch {
	case err != nil && strings.Contains(err.Error(), "No space left on device"):
		err = quotaErr("the namespace and files together fill the working directory")
	case err != nil && cp.Missing != "" && strings.Contains(err.Error(), cp.Missing):
		err = fmt.Errorf("%w: %s", err, cp.Hint)
	}
	if err == nil {
		info.Saved, info.Skipped = rep.Saved, rep.Skipped
	}
	f, ferr := e.checkpointFS(s.Internal)
	if err == nil {
		err = ferr
	}
	if err == nil {
		// What the core can see of the save: the namespace file is there.
		if _, serr := f.RegularSize(ckptFile); serr != nil {
			err = fmt.Errorf("the kernel reported %d variable(s) saved but its namespace file is not there: %w", len(info.Saved), serr)
		}
	}
	if err == nil {
		info, err = e.ckpts.Put(info, e.ws.Quota(), func(dir string, budget int64) ([]string, error) {
			left, _, err := f.CopyOut(dir, budget, nil)
			return left, err
		})
		var full *checkpoint.FullError
		switch {
		case errors.As(err, &full):
			err = e.storeFull(s, full.Used)
		case errors.Is(err, workspace.ErrOverLimit):
			err = quotaErr(err.Error())
		}
	}
	if f != nil {
		f.Remove(ckptFile)
	}
	d := map[string]any{"session": s.ID, "reason": why, "saved": len(info.Saved), "skipped": len(info.Skipped), "bytes": info.Bytes}
	if as != s.ID {
		d["as"] = as
	}
	var re *RequestError
	if errors.As(err, &re) {
		d["rule"] = re.Rule
	}
	e.rec.Record(audit.Entry{Event: "session.checkpoint", SessionID: s.Internal, UserID: s.Client, Success: err == nil, Error: audit.ErrText(err), Severity: severity(err), Details: d})
	if err != nil {
		return CheckpointInfo{}, err
	}
	return info, nil
}

func (e *Engine) storeFull(s *session.Session, used int64) error {
	return &RequestError{Rule: checkpoint.RuleCheckpointStore, Msg: fmt.Sprintf("the checkpoint of session %q does not fit the checkpoint store: the checkpoints of all sessions may take %s on the host together (sessions.checkpoint_store_quota) and %d bytes of it are taken; "+
		"destroy_session sessions whose checkpoints you no longer need (list_sessions lists them), or ask the operator to raise sessions.checkpoint_store_quota; nothing of this checkpoint is left on disk and the previous checkpoint, if any, is kept", s.ID, e.cfg.Sessions.CheckpointStoreQuota, max(used, 0))}
}

// RestoreSession brings a checkpoint back in a new kernel: the session's
// current kernel (if any) is replaced, the saved files are written back and
// the saved variables loaded.
func (e *Engine) RestoreSession(ctx context.Context, client, id string) (CheckpointInfo, session.View, error) {
	const tool = "restore_session"
	if session.CheckID(id) != nil {
		_, err := e.lookup(ctx, client, id, tool) // audits the invalid id
		return CheckpointInfo{}, session.View{}, err
	}
	// Another client's checkpoint of the same id lives under another client
	// key and is not even looked at. One found under client's key that
	// names someone else (a copied directory) answers like none, audited
	// apart.
	meta, err := e.ckpts.Get(client, id)
	switch {
	case errors.Is(err, checkpoint.ErrForeign):
		return CheckpointInfo{}, session.View{}, e.refuse(client, id, tool, &RequestError{Rule: checkpoint.RuleCheckpointOwner, Err: ErrNoSession,
			Msg: fmt.Sprintf("no checkpoint of session %q for this connection (checkpoint_session makes one; list_sessions lists yours)", id)}, nil)
	case err != nil:
		return CheckpointInfo{}, session.View{}, e.refuse(client, id, tool, &RequestError{Rule: checkpoint.RuleCheckpointNotFound, Err: ErrNoSession,
			Msg: fmt.Sprintf("no checkpoint of session %q for this connection (checkpoint_session makes one; list_sessions lists yours)", id)}, nil)
	}
	if e.checkpointCode(meta.Backend) == nil {
		return CheckpointInfo{}, session.View{}, e.refuse(client, id, tool, refusal.New(checkpoint.RuleCheckpointLanguage, "the checkpoint of session %q was made by backend %s, which is not loaded or reports no checkpoint code", id, meta.Backend), nil)
	}
	s, created, err := e.acquire(ctx, Request{Language: meta.Language, SessionID: id, Client: client}, meta.Backend, tool)
	if err != nil {
		return CheckpointInfo{}, session.View{}, e.refuse(client, id, tool, err, nil)
	}
	if err := e.refuseIfJob(s, tool); err != nil { // jobs.go
		return CheckpointInfo{}, session.View{}, err
	}
	s.Lock()
	defer s.Unlock()
	s.Pending = false // restored here, not by the next execute
	if !created && e.sessions.State(s) == session.StateGone {
		return CheckpointInfo{}, session.View{}, fmt.Errorf("restore session %q: it was destroyed meanwhile", id)
	}
	if meta.Kind == checkpoint.KindSnapshot {
		// A session made here (suspended, restarted) gets its
		// documentation and history back with its sandbox.
		info, err := e.restoreSnapshot(ctx, s, meta, !created, tool, created) // snapshot.go
		if err != nil {
			if created {
				e.sessions.Drop(s)
				e.removeWorkspace(s.Internal)
			}
			return CheckpointInfo{}, session.View{}, e.refuse(client, id, tool, fmt.Errorf("restore session %q: %w", id, err), nil)
		}
		return info, e.sessions.View(s), nil
	}
	if !created {
		err = e.reopen(ctx, s) // a new kernel, whatever the old one held
	} else if err = e.open(ctx, s, false); err != nil {
		e.sessions.Drop(s)
		e.removeWorkspace(s.Internal)
	}
	var info CheckpointInfo
	if err == nil {
		info, err = e.restoreLocked(ctx, s, meta, tool)
	}
	if err != nil {
		return CheckpointInfo{}, session.View{}, fmt.Errorf("restore session %q: %w", id, err)
	}
	return info, e.sessions.View(s), nil
}

// restoreLocked writes a checkpoint's files back into a session whose new
// kernel is up and loads its variables (caller holds s's lock).
func (e *Engine) restoreLocked(ctx context.Context, s *session.Session, meta checkpoint.Meta, why string) (CheckpointInfo, error) {
	cp := e.checkpointCode(s.Backend)
	if cp == nil {
		return CheckpointInfo{}, fmt.Errorf("backend %s reports no checkpoint code", s.Backend)
	}
	s.Wrote() // the checkpoint's files replace the workspace's
	e.sessions.SetState(s, session.StateBusy)
	var info CheckpointInfo
	f, err := e.checkpointFS(s.Internal)
	if err == nil {
		err = e.ckpts.Read(s.Client, s.ID, f.CopyIn)
	}
	if err == nil {
		var rep backend.CheckpointReport
		rep, err = e.runInKernel(ctx, s, cp.Load)
		if err != nil && cp.Missing != "" && strings.Contains(err.Error(), cp.Missing) {
			err = fmt.Errorf("%w: %s", err, cp.Hint)
		}
		if err == nil {
			err = checkLoaded(rep.Saved, meta.Saved)
		}
		if err == nil {
			info.Saved = rep.Saved
		}
	}
	if f != nil {
		f.Remove(ckptFile)
	}
	e.sessions.Update(s, func(s *session.Session) {
		if s.State == session.StateBusy {
			s.State = session.StateIdle
		}
		s.LastActive, s.Variables, s.VarsUpdated = time.Now(), nil, time.Time{}
	})
	e.rec.Record(audit.Entry{Event: "session.restore", SessionID: s.Internal, UserID: s.Client, Success: err == nil, Error: audit.ErrText(err), Severity: severity(err),
		Details: map[string]any{"session": s.ID, "by": why, "restored": len(info.Saved), "checkpoint_created": meta.Created}})
	out := meta
	out.Saved = info.Saved
	return out, err
}

// checkLoaded compares what a load reported with what the checkpoint
// recorded at its save: a name the save did not report, or one missing,
// means the namespace file is not the one saved.
func checkLoaded(loaded, saved []string) error {
	a, b := slices.Clone(loaded), slices.Clone(saved)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		return fmt.Errorf("the kernel reported loading %d variable(s) (%.200s), the checkpoint saved %d (%.200s): the namespace file is not the one saved",
			len(a), strings.Join(a, ", "), len(b), strings.Join(b, ", "))
	}
	return nil
}

// ExpireCheckpoints removes checkpoints made more than
// sessions.checkpoint_ttl ago (and leftovers of interrupted ones), each
// audited; it returns how many it removed.
func (e *Engine) ExpireCheckpoints(now time.Time) int {
	n := 0
	e.ckpts.Expire(now, time.Duration(e.cfg.Sessions.CheckpointTTL)*time.Second, func(m checkpoint.Meta, err error) {
		e.rec.Record(audit.Entry{Event: checkpoint.EventCheckpointExpired, SessionID: auditID(m.Client, m.SessionID), UserID: m.Client, Success: err == nil, Error: audit.ErrText(err), Severity: severity(err),
			Details: map[string]any{"session": m.SessionID, "created": m.Created, "ttl_s": e.cfg.Sessions.CheckpointTTL, "bytes": m.Bytes}})
		if err == nil {
			e.log.Info("removed an expired checkpoint", "session", m.SessionID, "client", m.Client, "created", m.Created)
			n++
		}
	})
	return n
}

// restorePending restores the checkpoint a new session was created over
// (caller holds s's lock, the kernel is up) and returns the notice the
// result carries. A failure leaves the session empty but the checkpoint in
// place: restore_session can try again.
func (e *Engine) restorePending(ctx context.Context, s *session.Session) string {
	s.Pending = false
	meta, ok := e.readCheckpoint(s.Client, s.ID)
	if !ok {
		return fmt.Sprintf("session %q had a checkpoint, removed before it could be restored: the session starts empty", s.ID)
	}
	info, err := e.restoreLocked(ctx, s, meta, "first execute")
	if err != nil {
		return fmt.Sprintf("session %q has a checkpoint of %s that could not be restored (%v): this run started in an empty session; restore_session tries again, destroy_session removes it",
			s.ID, meta.Created.Format(time.RFC3339), err)
	}
	return RestoreNotice(info)
}

// RestoreNotice is the sentence an agent reads after a restore.
func RestoreNotice(info CheckpointInfo) string { return checkpoint.RestoreNotice(info) }
