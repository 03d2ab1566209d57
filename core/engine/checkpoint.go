package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
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

// ckptMarker prefixes the line the save and load code print.
const ckptMarker = "__FORGE_CKPT__"

// ckptFile is where the kernel writes and reads its namespace, relative to
// its working directory; the core moves it to the state directory.
const ckptFile = ".forge-checkpoint"

// checkpointer is how one language saves and loads its namespace.
//
// A shortcut: this table keys code by language, which the engine otherwise
// never does. It belongs in the kernel plugins' Spec (next to InspectCode)
// behind a Checkpoint capability; that needs a protocol change the SDK
// owners should make. Until then a language without an entry refuses with
// checkpoint-language.
type checkpointer struct {
	save, load string
	// missing is what the kernel says when the image lacks what save and
	// load need, and hint what to do about it.
	missing, hint string
}

var checkpointers = map[string]checkpointer{
	// dill pickles what pickle cannot (functions and lambdas defined in the
	// session, by value; modules by reference). Each variable is tried on
	// its own, so one that cannot be saved is reported, not fatal. Open
	// files are left out on purpose: their position and the file behind
	// them would not come back as they were.
	"python": {
		save: `def _forge_ckpt():
    import dill, io, json
    dill.settings['recurse'] = True
    keep, skipped = {}, {}
    for k, v in list(globals().items()):
        if k.startswith('_') or k in ('In', 'Out', 'exit', 'quit', 'get_ipython'):
            continue
        if isinstance(v, io.IOBase):
            skipped[k] = 'an open file handle (%s): reopen it after restoring' % type(v).__name__
            continue
        try:
            dill.dumps(v)
            keep[k] = v
        except Exception as e:
            skipped[k] = ('%s: %s' % (type(e).__name__, e))[:300]
    with open('` + ckptFile + `', 'wb') as f:
        dill.dump(keep, f)
    print('` + ckptMarker + `' + json.dumps({'saved': sorted(keep), 'skipped': skipped}))
_forge_ckpt()
del _forge_ckpt`,
		load: `def _forge_restore():
    import dill, json
    with open('` + ckptFile + `', 'rb') as f:
        d = dill.load(f)
    globals().update(d)
    print('` + ckptMarker + `' + json.dumps({'saved': sorted(d)}))
_forge_restore()
del _forge_restore`,
		missing: "No module named 'dill'",
		hint:    "the session's image lacks python3-dill, which checkpoints need: rebuild the images (make setup; images/python/packages.txt lists it)",
	},
	// save() of every variable but connections: save.image without what
	// cannot come back.
	"r": {
		save: `local({
  nm <- ls(globalenv())
  isconn <- vapply(nm, function(n) inherits(get(n, envir = globalenv()), "connection"), logical(1))
  ok <- nm[!isconn]; bad <- nm[isconn]
  save(list = ok, file = "` + ckptFile + `", envir = globalenv())
  q <- function(x) encodeString(x, quote = '"')
  cat("` + ckptMarker + `", '{"saved":[', paste(q(ok), collapse = ","), '],"skipped":{',
      paste0(q(bad), ':"an open connection: reopen it after restoring"', collapse = ","), '}}', "\n", sep = "")
})`,
		load: `local({
  nm <- load("` + ckptFile + `", envir = globalenv())
  cat("` + ckptMarker + `", '{"saved":[', paste(encodeString(nm, quote = '"'), collapse = ","), ']}', "\n", sep = "")
})`,
	},
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

// checkpointDir is where a session's checkpoint lives: the forge's state
// directory, named like its workspace (so two servers sharing a base path
// keep theirs apart).
func (e *Engine) checkpointDir(id string) string {
	return filepath.Join(e.cfg.Volumes.BasePath, "state", "checkpoints", e.ws.SessionName(id))
}

// runInKernel runs internal code in a session's kernel (caller holds s.op)
// and returns what it printed after the marker.
func (e *Engine) runInKernel(ctx context.Context, s *Session, code string, into any) error {
	sb, err := e.sessionBackend(ctx, s.Backend)
	if err != nil {
		return err
	}
	res, err := sb.ExecuteInSession(ctx, backend.ExecuteRequest{Code: code, Language: s.Language, SessionID: s.Internal, RunID: newID(),
		Timeout: time.Duration(e.cfg.Execution.MaxTimeout) * time.Second, MaxOutputBytes: e.limits.output, MaxImageBytes: e.limits.image}, nil)
	if err != nil {
		return err
	}
	if res.Error != nil {
		return fmt.Errorf("%s: %s", res.Error.Name, res.Error.Message)
	}
	for _, line := range strings.Split(res.Stdout, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), ckptMarker); ok {
			return json.Unmarshal([]byte(rest), into)
		}
	}
	return fmt.Errorf("the kernel did not report what it saved (stdout: %.200q, stderr: %.200q)", res.Stdout, res.Stderr)
}

// CheckpointSession saves a session's namespace and working directory to
// the state directory, replacing its previous checkpoint.
func (e *Engine) CheckpointSession(ctx context.Context, client, id string) (CheckpointInfo, error) {
	const tool = "checkpoint_session"
	s, err := e.lookup(client, id, tool)
	if err != nil {
		return CheckpointInfo{}, err
	}
	cp, ok := checkpointers[s.Language]
	if !ok {
		return CheckpointInfo{}, e.refuse(client, id, tool, refusal(RuleCheckpointLanguage, "sessions of %s cannot be checkpointed yet", e.LanguageName(s.Language)), nil)
	}
	s.op.Lock()
	defer s.op.Unlock()
	if st := e.stateOf(s); st != StateIdle {
		return CheckpointInfo{}, e.refuse(client, id, tool, refusal(RuleCheckpointState, "session %q is %s: only a live, idle session can be checkpointed (run code in it first)", id, st), nil)
	}
	info := CheckpointInfo{SessionID: id, Language: s.Language, Backend: s.Backend, Owner: client, Created: time.Now()}
	err = e.runInKernel(ctx, s, cp.save, &info)
	if err != nil && cp.missing != "" && strings.Contains(err.Error(), cp.missing) {
		err = fmt.Errorf("%w: %s", err, cp.hint)
	}
	f, ferr := e.ws.SessionFiles(s.Internal)
	if err == nil {
		err = ferr
	}
	if err == nil {
		// Built beside the old one and swapped in, so a failure keeps it.
		dir := e.checkpointDir(s.Internal)
		tmp := dir + ".new"
		os.RemoveAll(tmp)
		var left []string
		if left, err = f.CopyOut(filepath.Join(tmp, "work"), e.ws.Quota(), nil); err == nil {
			info.FilesLeft = left
			info.Bytes = dirSize(tmp)
			meta, _ := json.MarshalIndent(struct {
				CheckpointInfo
				Owner string `json:"owner"`
			}{info, client}, "", "  ")
			if err = os.WriteFile(filepath.Join(tmp, "meta.json"), meta, 0o600); err == nil {
				os.RemoveAll(dir)
				err = os.Rename(tmp, dir)
			}
		}
		if err != nil {
			os.RemoveAll(tmp)
		}
	}
	if f != nil {
		f.Remove(ckptFile)
	}
	e.rec.Record(audit.Entry{Event: "session.checkpoint", SessionID: id, UserID: client, Success: err == nil, Error: audit.ErrText(err), Severity: severity(err),
		Details: map[string]any{"saved": len(info.Saved), "skipped": len(info.Skipped), "bytes": info.Bytes}})
	if err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint session %q: %w", id, err)
	}
	return info, nil
}

func dirSize(dir string) int64 {
	var n int64
	filepathWalk(dir, func(size int64) { n += size })
	return n
}

// RestoreSession brings a checkpoint back in a new kernel: the session's
// current kernel (if any) is replaced, the saved files are written back and
// the saved variables loaded.
func (e *Engine) RestoreSession(ctx context.Context, client, id string) (CheckpointInfo, SessionView, error) {
	const tool = "restore_session"
	// Keyed like the session's workspace: by owner and id.
	dir := e.checkpointDir(internalID(client, id))
	var meta struct {
		CheckpointInfo
		Owner string `json:"owner"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err == nil {
		err = json.Unmarshal(raw, &meta)
	}
	switch {
	case workspaceIDErr(id) != nil:
		_, err := e.lookup(client, id, tool) // audits the invalid id
		return CheckpointInfo{}, SessionView{}, err
	case err != nil:
		return CheckpointInfo{}, SessionView{}, e.refuse(client, id, tool, &RequestError{Rule: RuleCheckpointNotFound, Err: ErrNoSession,
			Msg: fmt.Sprintf("no checkpoint of session %q for this connection (checkpoint_session makes one)", id)}, nil)
	case meta.Owner != client:
		return CheckpointInfo{}, SessionView{}, e.refuse(client, id, tool, &RequestError{Rule: RuleCheckpointOwner, Err: ErrNoSession,
			Msg: fmt.Sprintf("no checkpoint of session %q for this connection (checkpoint_session makes one)", id)}, nil)
	}
	cp, ok := checkpointers[meta.Language]
	if !ok {
		return CheckpointInfo{}, SessionView{}, e.refuse(client, id, tool, refusal(RuleCheckpointLanguage, "sessions of %s cannot be restored", e.LanguageName(meta.Language)), nil)
	}
	s, created, err := e.acquire(Request{Language: meta.Language, SessionID: id, Client: client}, meta.Backend)
	if err != nil {
		return CheckpointInfo{}, SessionView{}, e.refuse(client, id, tool, err, nil)
	}
	s.op.Lock()
	defer s.op.Unlock()
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
		e.setState(s, StateBusy)
		f, ferr := e.ws.SessionFiles(internalID(client, id))
		err = ferr
		if err == nil {
			err = f.CopyIn(filepath.Join(dir, "work"))
		}
		if err == nil {
			err = e.runInKernel(ctx, s, cp.load, &info)
			if err != nil && cp.missing != "" && strings.Contains(err.Error(), cp.missing) {
				err = fmt.Errorf("%w: %s", err, cp.hint)
			}
		}
		if f != nil {
			f.Remove(ckptFile)
		}
		e.mu.Lock()
		s.State, s.LastActive, s.Variables, s.VarsUpdated = StateIdle, time.Now(), nil, time.Time{}
		e.mu.Unlock()
	}
	e.rec.Record(audit.Entry{Event: "session.restore", SessionID: id, UserID: client, Success: err == nil, Error: audit.ErrText(err), Severity: severity(err),
		Details: map[string]any{"restored": len(info.Saved), "checkpoint_created": meta.Created}})
	if err != nil {
		return CheckpointInfo{}, SessionView{}, fmt.Errorf("restore session %q: %w", id, err)
	}
	meta.CheckpointInfo.Saved = info.Saved
	e.mu.Lock()
	defer e.mu.Unlock()
	return meta.CheckpointInfo, s.view(), nil
}

// removeCheckpoint deletes a session's checkpoint (with the session).
func (e *Engine) removeCheckpoint(id string) {
	if workspaceIDErr(id) == nil {
		os.RemoveAll(e.checkpointDir(id))
	}
}

// removeAllCheckpoints deletes this server's checkpoints (shutdown): their
// names carry the server's tag, which the next server does not share, so
// none could be restored and they would only fill the disk.
func (e *Engine) removeAllCheckpoints() {
	tag := strings.TrimPrefix(filepath.Base(e.ws.SessionPath("x")), "x")
	dirs, _ := filepath.Glob(filepath.Join(e.cfg.Volumes.BasePath, "state", "checkpoints", "*"+tag))
	for _, d := range dirs {
		os.RemoveAll(d)
	}
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

// filepathWalk calls fn with the size of every regular file under dir.
func filepathWalk(dir string, fn func(int64)) {
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				fn(info.Size())
			}
		}
		return nil
	})
}
