package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Rules a checkpoint request can break (see docs/audit.md).
const (
	RuleCheckpointLanguage = "checkpoint-language"
	RuleCheckpointNotFound = "checkpoint-not-found"
	RuleCheckpointOwner    = "checkpoint-owner"
	RuleCheckpointState    = "checkpoint-state"
)

// ckptMarker prefixes the line the save and load code print, and ckptFile
// is where the kernel writes and reads its namespace, relative to its
// working directory; the core moves it to the state directory.
const (
	ckptMarker = backend.CheckpointMarker
	ckptFile   = backend.CheckpointFile
)

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

// CheckpointInfo describes a checkpoint.
type CheckpointInfo struct {
	SessionID string            `json:"session_id"`
	Language  string            `json:"language,omitempty"`
	Backend   string            `json:"backend,omitempty"`
	Owner     string            `json:"-"`
	Created   time.Time         `json:"created,omitzero"`
	Saved     []string          `json:"saved,omitempty" jsonschema:"variables saved"`
	Skipped   map[string]string `json:"skipped,omitempty" jsonschema:"variables that could not be saved → why"`
	FilesLeft []string          `json:"files_left_out,omitempty" jsonschema:"entries of the working directory not saved (links, pipes)"`
	Bytes     int64             `json:"bytes,omitempty" jsonschema:"size of the checkpoint (namespace and files)"`
}

// ckptMeta is a checkpoint's meta.json: its description and its owner.
type ckptMeta struct {
	CheckpointInfo
	Owner string `json:"owner"`
}

// Rules of checkpoint storage.
const (
	RuleCheckpointQuota = "checkpoint-quota"
	// RuleCheckpointStore: the checkpoint would pass
	// sessions.checkpoint_store_quota, the bound of all checkpoints on the
	// host together.
	RuleCheckpointStore = "checkpoint-store-full"
	// EventCheckpointExpired is the audit event of a checkpoint removed
	// after sessions.checkpoint_ttl.
	EventCheckpointExpired = "session.checkpoint_expired"
)

// checkpointRoot is the forge's checkpoint store: <base>/state/checkpoints.
// Checkpoints live there across server restarts (unlike workspaces, whose
// names carry the server's tag).
func (e *Engine) checkpointRoot() string {
	return filepath.Join(e.cfg.Volumes.BasePath, "state", "checkpoints")
}

// ownerKey names an owner's directory of checkpoints: a hash, so that an
// owner's name (a tenant, a connection) never becomes a path, and stable
// across restarts so the same owner finds its checkpoints again.
func ownerKey(owner string) string {
	h := sha256.Sum256([]byte("forge-checkpoint-owner\x00" + owner))
	return hex.EncodeToString(h[:16])
}

// checkpointDir is where owner's checkpoint of session id lives. id must be
// valid (workspace.CheckSessionID): it is a path component.
func (e *Engine) checkpointDir(owner, id string) string {
	return filepath.Join(e.checkpointRoot(), ownerKey(owner), id)
}

// mkOwnerDir creates the store and owner's directory, each 0700: checkpoints
// hold users' data, readable by the server alone.
func (e *Engine) mkOwnerDir(owner string) (string, error) {
	dir := filepath.Join(e.checkpointRoot(), ownerKey(owner))
	for _, d := range []string{filepath.Join(e.cfg.Volumes.BasePath, "state"), e.checkpointRoot(), dir} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// readCheckpoint returns owner's checkpoint of id, if there is one. A
// checkpoint whose meta names another owner (a hash collision, a copied
// directory) is not owner's: ok is false.
func (e *Engine) readCheckpoint(owner, id string) (ckptMeta, bool) {
	m, ok := e.readMeta(owner, id)
	return m, ok && m.Owner == owner && m.SessionID == id
}

// readMeta reads the meta.json in owner's directory for id, whoever it names.
func (e *Engine) readMeta(owner, id string) (ckptMeta, bool) {
	var m ckptMeta
	if workspaceIDErr(id) != nil {
		return m, false
	}
	raw, err := os.ReadFile(filepath.Join(e.checkpointDir(owner, id), "meta.json"))
	if err != nil || json.Unmarshal(raw, &m) != nil {
		return m, false
	}
	m.CheckpointInfo.Owner = m.Owner
	return m, true
}

// Checkpoints lists owner's checkpoints (restore_session, or the first
// execute with the session_id, brings one back), newest first.
func (e *Engine) Checkpoints(owner string) []CheckpointInfo {
	out := []CheckpointInfo{}
	dirs, _ := os.ReadDir(filepath.Join(e.checkpointRoot(), ownerKey(owner)))
	for _, d := range dirs {
		if !d.IsDir() || strings.HasSuffix(d.Name(), ".new") {
			continue
		}
		if m, ok := e.readCheckpoint(owner, d.Name()); ok {
			out = append(out, m.CheckpointInfo)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out
}

// runInKernel runs a backend's checkpoint code in a session's kernel
// (caller holds s.op) and returns its report: the one line carrying this
// run's nonce (backend.ParseCheckpointReport), so that a marker line the
// user's code prints meanwhile (a __getstate__, an R active binding) is
// ignored. The report gives names only: times, sizes and ids are the core's.
func (e *Engine) runInKernel(ctx context.Context, s *Session, code string) (backend.CheckpointReport, error) {
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
// the state directory, replacing its previous checkpoint.
func (e *Engine) CheckpointSession(ctx context.Context, client, id string) (CheckpointInfo, error) {
	const tool = "checkpoint_session"
	s, err := e.lookup(client, id, tool)
	if err != nil {
		return CheckpointInfo{}, err
	}
	if e.checkpointCode(s.Backend) == nil {
		return CheckpointInfo{}, e.refuse(client, id, tool, refusal(RuleCheckpointLanguage, "sessions of %s in backend %s cannot be checkpointed: the backend reports no checkpoint code", e.LanguageName(s.Language), s.Backend), nil)
	}
	s.op.Lock()
	defer s.op.Unlock()
	if st := e.stateOf(s); st != StateIdle {
		return CheckpointInfo{}, e.refuse(client, id, tool, refusal(RuleCheckpointState, "session %q is %s: only a live, idle session can be checkpointed (run code in it first)", id, st), nil)
	}
	info, err := e.checkpointLocked(ctx, s, "requested")
	if err != nil {
		return CheckpointInfo{}, e.refuse(client, id, tool, fmt.Errorf("checkpoint session %q: %w", id, err), nil)
	}
	return info, nil
}

// checkpointLocked saves a live idle session (caller holds s.op). A
// checkpoint counts against the session quota: one larger than
// volumes.session_quota is refused (checkpoint-quota), as is one that would
// bring the store past sessions.checkpoint_store_quota
// (checkpoint-store-full); either way the copy stops at the limit, what was
// copied is removed and the previous checkpoint kept. Its description is
// the core's own (session, time, sizes, files): only the variables' names
// come from the kernel, checked (runInKernel).
func (e *Engine) checkpointLocked(ctx context.Context, s *Session, why string) (CheckpointInfo, error) {
	cp := e.checkpointCode(s.Backend)
	if cp == nil {
		return CheckpointInfo{}, fmt.Errorf("backend %s reports no checkpoint code", s.Backend)
	}
	info := CheckpointInfo{SessionID: s.ID, Language: s.Language, Backend: s.Backend, Owner: s.Owner, Created: time.Now()}
	quotaErr := func(detail string) error {
		return &RequestError{Rule: RuleCheckpointQuota, Msg: fmt.Sprintf("the checkpoint of session %q does not fit the session quota of %s (volumes.session_quota), which a checkpoint counts against (%s; a file counts at its apparent size even if sparse, or its allocated size if larger): "+
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
	f, ferr := e.ws.SessionFiles(s.Internal)
	if err == nil {
		err = ferr
	}
	if err == nil {
		// What the core can see of the save: the namespace file is there.
		if _, serr := f.RegularSize(ckptFile); serr != nil {
			err = fmt.Errorf("the kernel reported %d variable(s) saved but its namespace file is not there: %w", len(info.Saved), serr)
		}
	}
	var owner string
	if err == nil {
		owner, err = e.mkOwnerDir(s.Owner)
	}
	if err == nil {
		// Built beside the old one and swapped in, so a failure keeps it.
		dir := filepath.Join(owner, s.ID)
		tmp := dir + ".new"
		os.RemoveAll(tmp)
		var budget int64
		var release func()
		budget, release, err = e.reserveCheckpoint(s, tmp)
		if err == nil {
			var left []string
			if left, _, err = f.CopyOut(filepath.Join(tmp, "work"), budget, nil); err == nil {
				info.FilesLeft = left
				meta, _ := json.MarshalIndent(ckptMeta{info, s.Owner}, "", "  ")
				err = os.WriteFile(filepath.Join(tmp, "meta.json"), meta, 0o600)
			}
			if err == nil {
				// Bytes is the whole checkpoint as it lies on the host
				// (meta.json and directories included), within the budget.
				if info.Bytes = workspace.DiskUsage(tmp, nil); info.Bytes > budget {
					err = fmt.Errorf("%w: the checkpoint takes %d bytes with its description, over its limit of %d", workspace.ErrOverLimit, info.Bytes, budget)
				}
			}
			if err == nil {
				// meta.json again, now with the size.
				meta, _ := json.MarshalIndent(ckptMeta{info, s.Owner}, "", "  ")
				if err = os.WriteFile(filepath.Join(tmp, "meta.json"), meta, 0o600); err == nil {
					os.RemoveAll(dir)
					err = os.Rename(tmp, dir)
				}
			}
			if errors.Is(err, workspace.ErrOverLimit) {
				err = e.overLimit(s, budget, err, quotaErr)
			}
			if err != nil {
				os.RemoveAll(tmp)
			}
			release()
		}
	}
	if f != nil {
		f.Remove(ckptFile)
	}
	d := map[string]any{"session": s.ID, "reason": why, "saved": len(info.Saved), "skipped": len(info.Skipped), "bytes": info.Bytes}
	var re *RequestError
	if errors.As(err, &re) {
		d["rule"] = re.Rule
	}
	e.rec.Record(audit.Entry{Event: "session.checkpoint", SessionID: s.Internal, UserID: s.Owner, Success: err == nil, Error: audit.ErrText(err), Severity: severity(err), Details: d})
	if err != nil {
		return CheckpointInfo{}, err
	}
	return info, nil
}

// ckptStore is the room reserved in the checkpoint store by checkpoints
// being built, so that two built at once (the shutdown checkpoints) cannot
// together pass sessions.checkpoint_store_quota.
type ckptStore struct {
	mu       sync.Mutex
	building map[string]int64 // directory being built → bytes reserved for it
}

// reserveCheckpoint reserves the bytes s's checkpoint, built in tmp, may
// take: the session quota, or less if the store has less room left. What
// the store holds is measured on disk (workspace.DiskUsage), the session's
// previous checkpoint included: it is on disk until the new one replaces
// it. release gives the reservation back.
func (e *Engine) reserveCheckpoint(s *Session, tmp string) (int64, func(), error) {
	st := &e.store
	st.mu.Lock()
	defer st.mu.Unlock()
	var reserved int64
	for _, n := range st.building {
		reserved += n
	}
	used := workspace.DiskUsage(e.checkpointRoot(), func(p string) bool { _, ok := st.building[p]; return ok }) + reserved
	room := e.limits.ckptStore - used
	budget := e.ws.Quota()
	if budget <= 0 || room < budget {
		budget = room
	}
	if budget <= 0 {
		return 0, nil, e.storeFull(s, used)
	}
	if st.building == nil {
		st.building = map[string]int64{}
	}
	st.building[tmp] = budget
	return budget, func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		delete(st.building, tmp)
	}, nil
}

// overLimit is the refusal of a copy that stopped at budget: the session
// quota's, or the store's if the store had less room.
func (e *Engine) overLimit(s *Session, budget int64, err error, quotaErr func(string) error) error {
	if q := e.ws.Quota(); q > 0 && budget >= q {
		return quotaErr(err.Error())
	}
	return e.storeFull(s, e.limits.ckptStore-budget)
}

func (e *Engine) storeFull(s *Session, used int64) error {
	return &RequestError{Rule: RuleCheckpointStore, Msg: fmt.Sprintf("the checkpoint of session %q does not fit the checkpoint store: the checkpoints of all sessions may take %s on the host together (sessions.checkpoint_store_quota) and %d bytes of it are taken; "+
		"destroy_session sessions whose checkpoints you no longer need (list_sessions lists them), or ask the operator to raise sessions.checkpoint_store_quota; nothing of this checkpoint is left on disk and the previous checkpoint, if any, is kept", s.ID, e.cfg.Sessions.CheckpointStoreQuota, max(used, 0))}
}

// RestoreSession brings a checkpoint back in a new kernel: the session's
// current kernel (if any) is replaced, the saved files are written back and
// the saved variables loaded.
func (e *Engine) RestoreSession(ctx context.Context, client, id string) (CheckpointInfo, SessionView, error) {
	const tool = "restore_session"
	if workspaceIDErr(id) != nil {
		_, err := e.lookup(client, id, tool) // audits the invalid id
		return CheckpointInfo{}, SessionView{}, err
	}
	// Another owner's checkpoint of the same id lives under another owner
	// key and is not even looked at. One found under client's key that
	// names someone else (a copied directory) answers like none, audited
	// apart.
	meta, found := e.readMeta(client, id)
	switch {
	case !found:
		return CheckpointInfo{}, SessionView{}, e.refuse(client, id, tool, &RequestError{Rule: RuleCheckpointNotFound, Err: ErrNoSession,
			Msg: fmt.Sprintf("no checkpoint of session %q for this connection (checkpoint_session makes one; list_sessions lists yours)", id)}, nil)
	case meta.Owner != client || meta.SessionID != id:
		return CheckpointInfo{}, SessionView{}, e.refuse(client, id, tool, &RequestError{Rule: RuleCheckpointOwner, Err: ErrNoSession,
			Msg: fmt.Sprintf("no checkpoint of session %q for this connection (checkpoint_session makes one; list_sessions lists yours)", id)}, nil)
	}
	if e.checkpointCode(meta.Backend) == nil {
		return CheckpointInfo{}, SessionView{}, e.refuse(client, id, tool, refusal(RuleCheckpointLanguage, "the checkpoint of session %q was made by backend %s, which is not loaded or reports no checkpoint code", id, meta.Backend), nil)
	}
	s, created, err := e.acquire(ctx, Request{Language: meta.Language, SessionID: id, Client: client}, meta.Backend, tool)
	if err != nil {
		return CheckpointInfo{}, SessionView{}, e.refuse(client, id, tool, err, nil)
	}
	s.op.Lock()
	defer s.op.Unlock()
	s.pending = false // restored here, not by the next execute
	if !created {
		if e.stateOf(s) == stateGone {
			return CheckpointInfo{}, SessionView{}, fmt.Errorf("restore session %q: it was destroyed meanwhile", id)
		}
		err = e.reopen(ctx, s) // a new kernel, whatever the old one held
	} else if err = e.open(ctx, s, false); err != nil {
		e.drop(s)
		e.removeWorkspace(s.Internal)
	}
	var info CheckpointInfo
	if err == nil {
		info, err = e.restoreLocked(ctx, s, meta, tool)
	}
	if err != nil {
		return CheckpointInfo{}, SessionView{}, fmt.Errorf("restore session %q: %w", id, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return info, s.view(), nil
}

// restoreLocked writes a checkpoint's files back into a session whose new
// kernel is up and loads its variables (caller holds s.op).
func (e *Engine) restoreLocked(ctx context.Context, s *Session, meta ckptMeta, why string) (CheckpointInfo, error) {
	cp := e.checkpointCode(s.Backend)
	if cp == nil {
		return CheckpointInfo{}, fmt.Errorf("backend %s reports no checkpoint code", s.Backend)
	}
	e.setState(s, StateBusy)
	var info CheckpointInfo
	f, err := e.ws.SessionFiles(s.Internal)
	if err == nil {
		err = f.CopyIn(filepath.Join(e.checkpointDir(s.Owner, s.ID), "work"))
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
	e.mu.Lock()
	if s.State == StateBusy {
		s.State = StateIdle
	}
	s.LastActive, s.Variables, s.VarsUpdated = time.Now(), nil, time.Time{}
	e.mu.Unlock()
	e.rec.Record(audit.Entry{Event: "session.restore", SessionID: s.Internal, UserID: s.Owner, Success: err == nil, Error: audit.ErrText(err), Severity: severity(err),
		Details: map[string]any{"session": s.ID, "by": why, "restored": len(info.Saved), "checkpoint_created": meta.Created}})
	out := meta.CheckpointInfo
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

// removeCheckpoint deletes owner's checkpoint of id (with the session); it
// reports whether there was one.
func (e *Engine) removeCheckpoint(owner, id string) bool {
	if workspaceIDErr(id) != nil {
		return false
	}
	dir := e.checkpointDir(owner, id)
	_, err := os.Stat(dir)
	os.RemoveAll(dir)
	os.RemoveAll(dir + ".new")
	return err == nil
}

// ExpireCheckpoints removes checkpoints made more than
// sessions.checkpoint_ttl ago (and leftovers of interrupted ones), each
// audited; it returns how many it removed.
func (e *Engine) ExpireCheckpoints(now time.Time) int {
	ttl := time.Duration(e.cfg.Sessions.CheckpointTTL) * time.Second
	n := 0
	owners, _ := os.ReadDir(e.checkpointRoot())
	for _, o := range owners {
		dir := filepath.Join(e.checkpointRoot(), o.Name())
		entries, _ := os.ReadDir(dir)
		for _, c := range entries {
			path := filepath.Join(dir, c.Name())
			var m ckptMeta
			raw, err := os.ReadFile(filepath.Join(path, "meta.json"))
			if err == nil {
				err = json.Unmarshal(raw, &m)
			}
			if err != nil {
				// No meta: an interrupted checkpoint (.new) or debris; kept
				// for one TTL after its last change, then removed.
				if fi, serr := os.Stat(path); serr == nil && now.Sub(fi.ModTime()) > ttl {
					os.RemoveAll(path)
				}
				continue
			}
			if now.Sub(m.Created) <= ttl {
				continue
			}
			err = os.RemoveAll(path)
			e.rec.Record(audit.Entry{Event: EventCheckpointExpired, SessionID: auditID(m.Owner, m.SessionID), UserID: m.Owner, Success: err == nil, Error: audit.ErrText(err), Severity: severity(err),
				Details: map[string]any{"session": m.SessionID, "created": m.Created, "ttl_s": e.cfg.Sessions.CheckpointTTL, "bytes": m.Bytes}})
			if err == nil {
				e.log.Info("removed an expired checkpoint", "session", m.SessionID, "owner", m.Owner, "created", m.Created)
				n++
			}
		}
	}
	return n
}

// restorePending restores the checkpoint a new session was created over
// (caller holds s.op, the kernel is up) and returns the notice the result
// carries. A failure leaves the session empty but the checkpoint in place:
// restore_session can try again.
func (e *Engine) restorePending(ctx context.Context, s *Session) string {
	s.pending = false
	meta, ok := e.readCheckpoint(s.Owner, s.ID)
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
func RestoreNotice(info CheckpointInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Session %s was restored in a new kernel from its checkpoint of %s: %d variable(s) back (%s).",
		info.SessionID, info.Created.Format(time.RFC3339), len(info.Saved), strings.Join(info.Saved, ", "))
	if len(info.Skipped) > 0 {
		names := make([]string, 0, len(info.Skipped))
		for k := range info.Skipped {
			names = append(names, k)
		}
		sort.Strings(names)
		var parts []string
		for _, k := range names {
			parts = append(parts, k+" ("+info.Skipped[k]+")")
		}
		fmt.Fprintf(&b, " Not saved at the checkpoint: %s.", strings.Join(parts, "; "))
	}
	return b.String()
}

func workspaceIDErr(id string) error { return workspace.CheckSessionID(id) }
