// Package checkpoints saves sessions and brings them back: a session's
// namespace (the backend's checkpoint code, run in its kernel) with its
// working directory, or where the runtime can, its whole sandbox
// (snapshot.go), kept in the checkpoint store (core/checkpoint) across
// restarts; restored by restore_session or a session's first execute,
// copied into a new session (fork.go), and idle sessions suspended into
// it (SuspendIdle). Every save and restore is audited.
package checkpoints

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/files"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Engine is what checkpoints need of the engine: its sessions and their
// kernels, opened, reopened and closed as it does, admitted as it admits
// them, and refusals audited as it audits them.
type Engine interface {
	Registry() *session.Registry
	Lookup(ctx context.Context, client, id, tool string) (*session.Session, error)
	Acquire(ctx context.Context, req engine.Request, backendName, tool string) (*session.Session, bool, error)
	Open(ctx context.Context, s *session.Session, restart bool) error
	Reopen(ctx context.Context, s *session.Session) error
	DestroyLocked(ctx context.Context, s *session.Session, why string, closed bool) error
	SessionBackend(ctx context.Context, name string) (backend.SessionBackend, error)
	CloseGrant(s *session.Session)
	RemoveWorkspace(internal string)
	PluginStatuses() []plugins.Status
	LanguageName(language string) string
	RefuseIfJob(s *session.Session, tool string) error
	Refuse(client, sessionID, tool string, err error, details map[string]any) error
}

// Replicas say whether another replica serves a session (handover.Replicas).
type Replicas interface {
	LostTo(ctx context.Context, s *session.Session) bool
}

// Workdirs reaches a session's working directory (files.Files).
type Workdirs interface {
	Workdir(internal string) (files.SessionFS, error)
}

// CheckpointFS is a session's working directory as a checkpoint copies
// it out and back in.
type CheckpointFS interface {
	files.SessionFS
	RegularSize(rel string) (int64, error)
	Remove(rel string) error
	// CopyOut copies the tree into dst on the core's host, at most limit
	// bytes, and names what it left out (links, pipes).
	CopyOut(dst string, limit int64, skip func(string) bool) (left []string, used int64, err error)
	// CopyIn writes the regular files of src (as CopyOut made it) back.
	CopyIn(src string) error
}

// Keeper keeps the checkpoints of an engine's sessions.
type Keeper struct {
	eng      Engine
	sessions *session.Registry
	dirs     Workdirs
	replicas Replicas
	cfg      config.Config
	ws       *workspace.Manager
	rec      audit.Recorder
	log      hclog.Logger
	ckpts    checkpoint.Store
	snaps    SessionSnapshots // snapshot.go; nil: checkpoints keep variables
}

// Option changes how New builds the checkpoints.
type Option func(*Keeper)

// WithStore keeps checkpoints in store instead of the default directory
// under volumes.base_path (checkpoint.Dir): where several servers share
// sessions, a store they all reach.
func WithStore(store checkpoint.Store) Option {
	return func(c *Keeper) { c.ckpts = store }
}

// New returns the checkpoints of eng's sessions, whose working directories
// dirs reaches, and which replicas may serve instead of this one.
func New(cfg config.Config, eng Engine, dirs Workdirs, replicas Replicas, ws *workspace.Manager, rec audit.Recorder, log hclog.Logger, opts ...Option) *Keeper {
	c := &Keeper{eng: eng, sessions: eng.Registry(), dirs: dirs, replicas: replicas, cfg: cfg, ws: ws, rec: rec, log: log}
	for _, o := range opts {
		o(c)
	}
	if c.ckpts == nil {
		c.ckpts = checkpoint.NewDir(checkpointRoot(cfg), int64(cfg.Sessions.CheckpointStoreQuota)).
			WithClientQuota(func(client string) int64 { return int64(cfg.Tenants[client].CheckpointQuotaMB) << 20 }) // over HTTP a client is its tenant
	}
	return c
}

// workdir is the working directory of session internal, for a checkpoint.
func (c *Keeper) workdir(internal string) (CheckpointFS, error) {
	f, err := c.dirs.Workdir(internal)
	if err != nil {
		return nil, err
	}
	w, ok := f.(CheckpointFS)
	if !ok {
		return nil, workspace.ErrRemote
	}
	return w, nil
}

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
func (c *Keeper) checkpointCode(backendName string) *backend.Checkpoint {
	for _, st := range c.eng.PluginStatuses() {
		if st.Name == backendName && st.Error == "" {
			return st.Capabilities.Checkpoint
		}
	}
	return nil
}

// Get returns client's checkpoint of id, if there is one. A checkpoint
// whose record names another client (a hash collision, a copied
// directory) is not client's: ok is false.
func (c *Keeper) Get(client, id string) (checkpoint.Meta, bool) {
	m, err := c.ckpts.Get(client, id)
	return m, err == nil
}

// Remove removes client's checkpoint of id, if there is one (its session
// is destroyed).
func (c *Keeper) Remove(client, id string) bool { return c.ckpts.Remove(client, id) }

// SaveAtShutdown checkpoints live idle session s (caller holds its lock)
// as the server shuts down, with sessions.checkpoint_on_shutdown, so that
// its client finds it again after a restart.
func (c *Keeper) SaveAtShutdown(ctx context.Context, s *session.Session) {
	if !c.cfg.Sessions.CheckpointOnShutdown || c.checkpointCode(s.Backend) == nil || c.sessions.State(s) != session.StateIdle {
		return
	}
	if info, err := c.checkpointLocked(ctx, s, "server shutdown"); err != nil {
		c.log.Warn("could not checkpoint a session at shutdown", "session", s.ID, "client", s.Client, "error", err)
	} else {
		c.log.Info("checkpointed a session at shutdown", "session", s.ID, "client", s.Client, "saved", len(info.Saved), "bytes", info.Bytes)
	}
}

// Checkpoints lists client's checkpoints (restore_session, or the first
// execute with the session_id, brings one back), newest first.
func (c *Keeper) Checkpoints(client string) []CheckpointInfo { return c.ckpts.List(client) }

// runInKernel runs a backend's checkpoint code in a session's kernel
// (caller holds s's lock) and returns its report: the one line carrying
// this run's nonce (backend.ParseCheckpointReport), so that a marker line
// the user's code prints meanwhile (a __getstate__, an R active binding)
// is ignored. The report gives names only: times, sizes and ids are the
// core's.
func (c *Keeper) runInKernel(ctx context.Context, s *session.Session, code string) (backend.CheckpointReport, error) {
	var rep backend.CheckpointReport
	sb, err := c.eng.SessionBackend(ctx, s.Backend)
	if err != nil {
		return rep, err
	}
	code, nonce, err := backend.PrepareCheckpointCode(code)
	if err != nil {
		return rep, fmt.Errorf("backend %s: %w", s.Backend, err)
	}
	res, err := sb.ExecuteInSession(ctx, backend.ExecuteRequest{Code: code, Language: s.Language, SessionID: s.Internal, RunID: engine.NewID(),
		Timeout: time.Duration(c.cfg.Execution.MaxTimeout) * time.Second, MaxOutputBytes: int64(c.cfg.Execution.MaxOutput), MaxImageBytes: int64(c.cfg.Execution.MaxImageSize)}, nil)
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
func (c *Keeper) CheckpointSession(ctx context.Context, client, id string) (CheckpointInfo, error) {
	const tool = "checkpoint_session"
	s, err := c.eng.Lookup(ctx, client, id, tool)
	if err != nil {
		return CheckpointInfo{}, err
	}
	if c.checkpointCode(s.Backend) == nil {
		return CheckpointInfo{}, c.eng.Refuse(client, id, tool, refusal.New(checkpoint.RuleCheckpointLanguage, "sessions of %s in backend %s cannot be checkpointed: the backend reports no checkpoint code", c.eng.LanguageName(s.Language), s.Backend), nil)
	}
	if err := c.eng.RefuseIfJob(s, tool); err != nil {
		return CheckpointInfo{}, err
	}
	s.Lock()
	defer s.Unlock()
	if st := c.sessions.State(s); st != session.StateIdle {
		return CheckpointInfo{}, c.eng.Refuse(client, id, tool, refusal.New(checkpoint.RuleCheckpointState, "session %q is %s: only a live, idle session can be checkpointed (run code in it first)", id, st), nil)
	}
	info, err := c.checkpointLocked(ctx, s, "requested")
	if err != nil {
		return CheckpointInfo{}, c.eng.Refuse(client, id, tool, fmt.Errorf("checkpoint session %q: %w", id, err), nil)
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
func (c *Keeper) checkpointLocked(ctx context.Context, s *session.Session, why string) (CheckpointInfo, error) {
	return c.saveLocked(ctx, s, s.ID, why)
}

// saveLocked is checkpointLocked storing the checkpoint as the client's
// checkpoint of session id as: s's own id, or the id of a fork that
// restores from it (fork.go).
func (c *Keeper) saveLocked(ctx context.Context, s *session.Session, as, why string) (CheckpointInfo, error) {
	snap, err := c.snapshotLocked(ctx, s, as, why) // snapshot.go
	if !errors.Is(err, sandbox.ErrNoSnapshot) {
		return snap, err
	}
	notWhole := ""
	if c.snaps != nil {
		// A runtime that could: say why this one was not.
		notWhole = strings.TrimPrefix(err.Error(), sandbox.ErrNoSnapshot.Error()+": ")
	}
	cp := c.checkpointCode(s.Backend)
	if cp == nil {
		return CheckpointInfo{}, fmt.Errorf("backend %s reports no checkpoint code", s.Backend)
	}
	info := CheckpointInfo{SessionID: as, Language: s.Language, Backend: s.Backend, Client: s.Client, Created: time.Now(), NotWhole: notWhole}
	quotaErr := func(detail string) error {
		return &refusal.Error{Rule: checkpoint.RuleCheckpointQuota, Msg: fmt.Sprintf("the checkpoint of session %q does not fit the session quota of %s (volumes.session_quota), which a checkpoint counts against (%s; a file counts at its apparent size even if sparse, or its allocated size if larger): "+
			"delete large variables (del x in Python, rm(x) in R) or files of the working directory, then checkpoint again; nothing of this checkpoint is left on disk and the previous checkpoint, if any, is kept", s.ID, c.cfg.Volumes.SessionQuota, detail)}
	}
	rep, err := c.runInKernel(ctx, s, cp.Save)
	switch {
	case err != nil && strings.Contains(err.Error(), "No space left on device"):
		err = quotaErr("the namespace and files together fill the working directory")
	case err != nil && cp.Missing != "" && strings.Contains(err.Error(), cp.Missing):
		err = fmt.Errorf("%w: %s", err, cp.Hint)
	}
	if err == nil {
		info.Saved, info.Skipped = rep.Saved, rep.Skipped
	}
	f, ferr := c.workdir(s.Internal)
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
		info, err = c.ckpts.Put(info, c.ws.Quota(), func(dir string, budget int64) ([]string, error) {
			left, _, err := f.CopyOut(dir, budget, nil)
			return left, err
		})
		var full *checkpoint.FullError
		switch {
		case errors.As(err, &full):
			err = c.storeFull(s, full)
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
	var re *refusal.Error
	if errors.As(err, &re) {
		d["rule"] = re.Rule
	}
	c.rec.Record(audit.Entry{Event: "session.checkpoint", SessionID: s.Internal, UserID: s.Client, Success: err == nil, Error: audit.ErrText(err), Severity: audit.ErrSeverity(err), Details: d})
	if err != nil {
		return CheckpointInfo{}, err
	}
	return info, nil
}

func (c *Keeper) storeFull(s *session.Session, full *checkpoint.FullError) error {
	if full.Client {
		return &refusal.Error{Rule: checkpoint.RuleCheckpointStore, Msg: fmt.Sprintf("the checkpoint of session %q does not fit your share of the checkpoint store: your checkpoints and suspended sessions may take %s together (tenants.%s.checkpoint_quota_mb) and %d bytes of it are taken; "+
			"destroy_session sessions whose checkpoints you no longer need (list_sessions lists them), or ask the operator to raise your checkpoint_quota_mb; nothing of this checkpoint is left on disk and the previous checkpoint, if any, is kept", s.ID, config.Size(full.Quota), s.Client, max(full.Used, 0))}
	}
	return &refusal.Error{Rule: checkpoint.RuleCheckpointStore, Msg: fmt.Sprintf("the checkpoint of session %q does not fit the checkpoint store: the checkpoints of all sessions may take %s on the host together (sessions.checkpoint_store_quota) and %d bytes of it are taken; "+
		"destroy_session sessions whose checkpoints you no longer need (list_sessions lists them), or ask the operator to raise sessions.checkpoint_store_quota; nothing of this checkpoint is left on disk and the previous checkpoint, if any, is kept", s.ID, c.cfg.Sessions.CheckpointStoreQuota, max(full.Used, 0))}
}

// RestoreSession brings a checkpoint back in a new kernel: the session's
// current kernel (if any) is replaced, the saved files are written back and
// the saved variables loaded.
func (c *Keeper) RestoreSession(ctx context.Context, client, id string) (CheckpointInfo, session.View, error) {
	const tool = "restore_session"
	if session.CheckID(id) != nil {
		_, err := c.eng.Lookup(ctx, client, id, tool) // audits the invalid id
		return CheckpointInfo{}, session.View{}, err
	}
	// Another client's checkpoint of the same id lives under another client
	// key and is not even looked at. One found under client's key that
	// names someone else (a copied directory) answers like none, audited
	// apart.
	meta, err := c.ckpts.Get(client, id)
	switch {
	case errors.Is(err, checkpoint.ErrForeign):
		return CheckpointInfo{}, session.View{}, c.eng.Refuse(client, id, tool, &refusal.Error{Rule: checkpoint.RuleCheckpointOwner, Err: session.ErrNoSession,
			Msg: fmt.Sprintf("no checkpoint of session %q for this connection (checkpoint_session makes one; list_sessions lists yours)", id)}, nil)
	case err != nil:
		return CheckpointInfo{}, session.View{}, c.eng.Refuse(client, id, tool, &refusal.Error{Rule: checkpoint.RuleCheckpointNotFound, Err: session.ErrNoSession,
			Msg: fmt.Sprintf("no checkpoint of session %q for this connection (checkpoint_session makes one; list_sessions lists yours)", id)}, nil)
	}
	if c.checkpointCode(meta.Backend) == nil {
		return CheckpointInfo{}, session.View{}, c.eng.Refuse(client, id, tool, refusal.New(checkpoint.RuleCheckpointLanguage, "the checkpoint of session %q was made by backend %s, which is not loaded or reports no checkpoint code", id, meta.Backend), nil)
	}
	s, created, err := c.eng.Acquire(ctx, engine.Request{Language: meta.Language, SessionID: id, Client: client}, meta.Backend, tool)
	if err != nil {
		return CheckpointInfo{}, session.View{}, c.eng.Refuse(client, id, tool, err, nil)
	}
	if err := c.eng.RefuseIfJob(s, tool); err != nil {
		return CheckpointInfo{}, session.View{}, err
	}
	s.Lock()
	defer s.Unlock()
	s.Pending = false // restored here, not by the next execute
	if !created && c.sessions.State(s) == session.StateGone {
		return CheckpointInfo{}, session.View{}, fmt.Errorf("restore session %q: it was destroyed meanwhile", id)
	}
	if meta.Kind == checkpoint.KindSnapshot {
		// A session made here (suspended, restarted) gets its
		// documentation and history back with its sandbox.
		info, err := c.restoreSnapshot(ctx, s, meta, !created, tool, created) // snapshot.go
		if err != nil {
			if created {
				c.sessions.Drop(s)
				c.eng.RemoveWorkspace(s.Internal)
			}
			return CheckpointInfo{}, session.View{}, c.eng.Refuse(client, id, tool, fmt.Errorf("restore session %q: %w", id, err), nil)
		}
		return info, c.sessions.View(s), nil
	}
	if !created {
		err = c.eng.Reopen(ctx, s) // a new kernel, whatever the old one held
	} else if err = c.eng.Open(ctx, s, false); err != nil {
		c.eng.CloseGrant(s) // Open may have granted it its tenant's isolation
		c.sessions.Drop(s)
		c.eng.RemoveWorkspace(s.Internal)
	}
	var info CheckpointInfo
	if err == nil {
		info, err = c.restoreLocked(ctx, s, meta, tool)
	}
	if err != nil {
		return CheckpointInfo{}, session.View{}, fmt.Errorf("restore session %q: %w", id, err)
	}
	return info, c.sessions.View(s), nil
}

// restoreLocked writes a checkpoint's files back into a session whose new
// kernel is up and loads its variables (caller holds s's lock).
func (c *Keeper) restoreLocked(ctx context.Context, s *session.Session, meta checkpoint.Meta, why string) (CheckpointInfo, error) {
	cp := c.checkpointCode(s.Backend)
	if cp == nil {
		return CheckpointInfo{}, fmt.Errorf("backend %s reports no checkpoint code", s.Backend)
	}
	s.Wrote() // the checkpoint's files replace the workspace's
	c.sessions.SetState(s, session.StateBusy)
	var info CheckpointInfo
	f, err := c.workdir(s.Internal)
	if err == nil {
		err = c.ckpts.Read(s.Client, meta.SessionID, f.CopyIn) // a fork's is the first fork's copy
	}
	if err == nil {
		var rep backend.CheckpointReport
		rep, err = c.runInKernel(ctx, s, cp.Load)
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
	c.sessions.Update(s, func(s *session.Session) {
		if s.State == session.StateBusy {
			s.State = session.StateIdle
		}
		s.LastActive, s.Variables, s.VarsUpdated = time.Now(), nil, time.Time{}
	})
	c.rec.Record(audit.Entry{Event: "session.restore", SessionID: s.Internal, UserID: s.Client, Success: err == nil, Error: audit.ErrText(err), Severity: audit.ErrSeverity(err),
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
func (c *Keeper) ExpireCheckpoints(now time.Time) int {
	n := 0
	c.ckpts.Expire(now, time.Duration(c.cfg.Sessions.CheckpointTTL)*time.Second, func(m checkpoint.Meta, err error) {
		c.rec.Record(audit.Entry{Event: checkpoint.EventCheckpointExpired, SessionID: engine.AuditID(m.Client, m.SessionID), UserID: m.Client, Success: err == nil, Error: audit.ErrText(err), Severity: audit.ErrSeverity(err),
			Details: map[string]any{"session": m.SessionID, "created": m.Created, "ttl_s": c.cfg.Sessions.CheckpointTTL, "bytes": m.Bytes}})
		if err == nil {
			c.log.Info("removed an expired checkpoint", "session", m.SessionID, "client", m.Client, "created", m.Created)
			n++
		}
	})
	return n
}

// RestorePending restores the checkpoint a new session was created over
// (caller holds s's lock, the kernel is up) and returns the notice the
// result carries. A failure leaves the session empty but the checkpoint in
// place: restore_session can try again.
func (c *Keeper) RestorePending(ctx context.Context, s *session.Session) string {
	s.Pending = false
	meta, ok := c.Get(s.Client, s.ID)
	if !ok {
		return fmt.Sprintf("session %q had a checkpoint, removed before it could be restored: the session starts empty", s.ID)
	}
	info, err := c.restoreLocked(ctx, s, meta, "first execute")
	if err != nil {
		return fmt.Sprintf("session %q has a checkpoint of %s that could not be restored (%v): this run started in an empty session; restore_session tries again, destroy_session removes it",
			s.ID, meta.Created.Format(time.RFC3339), err)
	}
	return RestoreNotice(info)
}

// RestoreNotice is the sentence an agent reads after a restore.
func RestoreNotice(info CheckpointInfo) string { return checkpoint.RestoreNotice(info) }
