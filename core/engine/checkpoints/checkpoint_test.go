package checkpoints

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/enginerig"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// fakeCheckpoint stores a checkpoint with an empty work directory, as if
// checkpointLocked had made it, and returns its directory.
func fakeCheckpoint(t *testing.T, e assembled, owner, id, lang string, created time.Time) string {
	t.Helper()
	m := checkpoint.Meta{SessionID: id, Language: lang, Backend: "kernel", Created: created, Saved: []string{"x"}, Client: owner}
	if _, err := e.ckpts.Put(m, 0, func(dir string, _ int64) ([]string, error) { return nil, os.MkdirAll(dir, 0o700) }); err != nil {
		t.Fatal(err)
	}
	return ckptDir(e, owner, id)
}

// ckptDir is where the engine's store keeps owner's checkpoint of id.
func ckptDir(e assembled, owner, id string) string { return e.ckpts.(*checkpoint.Dir).Path(owner, id) }

// docs/audit.md lists every rule a checkpoint request can break.
func TestCheckpointRulesAreDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "audit.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{checkpoint.RuleCheckpointLanguage, checkpoint.RuleCheckpointNotFound, checkpoint.RuleCheckpointOwner, checkpoint.RuleCheckpointState, checkpoint.RuleCheckpointQuota} {
		if !strings.Contains(string(doc), "| `"+rule+"` |") {
			t.Errorf("docs/audit.md does not list rule %s", rule)
		}
	}
}

// Checkpoints are listed to their owner only, under 0700 directories that
// do not carry the owner's name.
func TestCheckpointsPerOwner(t *testing.T) {
	r := newRig(t, nil, nil)
	now := time.Now()
	fakeCheckpoint(t, r.e, "tenant:alice", "main", "python", now.Add(-time.Minute))
	fakeCheckpoint(t, r.e, "tenant:alice", "second", "python", now)
	fakeCheckpoint(t, r.e, "tenant:bob", "main", "python", now)
	got := r.e.Checkpoints("tenant:alice")
	if len(got) != 2 || got[0].SessionID != "second" || got[1].SessionID != "main" {
		t.Fatalf("alice's checkpoints, newest first: %+v", got)
	}
	if got := r.e.Checkpoints("tenant:bob"); len(got) != 1 {
		t.Fatalf("bob's checkpoints: %+v", got)
	}
	if got := r.e.Checkpoints("tenant:carol"); len(got) != 0 {
		t.Fatalf("carol sees %+v", got)
	}
	for _, d := range []string{filepath.Join(r.e.cfg.Volumes.BasePath, "state"), checkpointRoot(r.e.cfg), filepath.Dir(ckptDir(r.e, "tenant:alice", "main"))} {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want 0700", d, fi.Mode(), err)
		}
		if strings.Contains(d, "alice") {
			t.Errorf("the owner's name is a path: %s", d)
		}
	}
	// Bob cannot restore alice's "second": he has none of that name.
	if _, _, err := r.e.RestoreSession(context.Background(), "tenant:bob", "second"); refusedBy(t, err) != checkpoint.RuleCheckpointNotFound {
		t.Fatalf("bob restores alice's checkpoint: %v", err)
	}
}

// An execute with the id of a checkpoint of another language is refused,
// not started over it.
func TestExecuteOverCheckpointOfAnotherLanguage(t *testing.T) {
	r := newRig(t, nil, nil)
	fakeCheckpoint(t, r.e, "c1", "s", "r", time.Now())
	_, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s", Client: "c1"})
	if refusedBy(t, err) != session.RuleSessionLanguage || !strings.Contains(err.Error(), "checkpoint") {
		t.Fatalf("want session-language naming the checkpoint, got %v", err)
	}
}

// destroy_session removes a checkpoint whose session is gone (after a
// restart), and only the caller's.
func TestDestroyRemovesLoneCheckpoint(t *testing.T) {
	r := newRig(t, nil, nil)
	mine := fakeCheckpoint(t, r.e, "c1", "s", "python", time.Now())
	theirs := fakeCheckpoint(t, r.e, "c2", "s", "python", time.Now())
	if err := r.e.DestroySession(context.Background(), "c1", "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine); !os.IsNotExist(err) {
		t.Error("the checkpoint is left after destroy_session")
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Error("another owner's checkpoint was removed")
	}
	if err := r.e.DestroySession(context.Background(), "c1", "s"); refusedBy(t, err) != session.RuleSessionNotFound {
		t.Fatalf("second destroy: %v", err)
	}
}

// Checkpoints older than sessions.checkpoint_ttl are removed and audited;
// younger ones stay.
func TestExpireCheckpoints(t *testing.T) {
	r := newRig(t, func(c *config.Config) { c.Sessions.CheckpointTTL = 3600 }, nil)
	now := time.Now()
	old := fakeCheckpoint(t, r.e, "c1", "old", "python", now.Add(-2*time.Hour))
	young := fakeCheckpoint(t, r.e, "c1", "young", "python", now.Add(-30*time.Minute))
	if n := r.e.ExpireCheckpoints(now); n != 1 {
		t.Fatalf("expired %d, want 1", n)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Error("the expired checkpoint is still there")
	}
	if _, err := os.Stat(young); err != nil {
		t.Error("a young checkpoint was removed")
	}
	var found bool
	for _, e := range r.Audit() {
		if e.Event == checkpoint.EventCheckpointExpired && e.UserID == "c1" && e.Details["session"] == "old" && e.Severity == audit.Info {
			found = true
		}
	}
	if !found {
		t.Errorf("no %s audit entry: %+v", checkpoint.EventCheckpointExpired, r.Audit())
	}
}

// Shutdown keeps checkpoints: the next server gives them back.
func TestShutdownKeepsCheckpoints(t *testing.T) {
	r := newRig(t, nil, nil)
	dir := fakeCheckpoint(t, r.e, "c1", "s", "python", time.Now())
	r.e.CloseAll(context.Background())
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("shutdown removed a checkpoint: %v", err)
	}
}

// ckptRig is a rig whose kernel runs checkpoint code by script: save
// answers what stdout returns for the nonce the core put in the code (and
// writes the namespace file unless noFile), load reports the names saved.
func ckptRig(t *testing.T, mutate func(*config.Config), stdout func(nonce string) string, noFile bool) *rig {
	t.Helper()
	return newRig(t, mutate, func(r *enginerig.Rig) {
		r.Kernel.Caps.Checkpoint = &backend.Checkpoint{Save: "save " + backend.CheckpointNonce, Load: "load " + backend.CheckpointNonce}
		r.Kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
			work := filepath.Join(r.WS.SessionPath(req.SessionID), workspace.SessionWorkDir)
			os.MkdirAll(work, 0o755)
			if nonce, ok := strings.CutPrefix(req.Code, "save "); ok {
				if !noFile {
					os.WriteFile(filepath.Join(work, backend.CheckpointFile), []byte("namespace"), 0o644)
				}
				return backend.ExecuteResult{Success: true, Stdout: stdout(nonce)}, nil
			}
			if nonce, ok := strings.CutPrefix(req.Code, "load "); ok {
				return backend.ExecuteResult{Success: true, Stdout: backend.CheckpointMarker + nonce + `{"saved":["x"]}` + "\n"}, nil
			}
			return backend.ExecuteResult{Success: true}, nil
		}
		r.PM.Add("kernel", r.Kernel) // the capabilities as loaded
	})
}

// The kernel's output never sets a checkpoint's time, session or size: a
// line the user's code printed is ignored, a report with such fields is
// refused, and so is one without the namespace file behind it.
func TestCheckpointReportFromTheKernel(t *testing.T) {
	forged := backend.CheckpointMarker + `{"saved":["__forged__"],"created":"2099-01-01T00:00:00Z","session_id":"other","bytes":1}` + "\n"
	for _, c := range []struct {
		name   string
		stdout func(nonce string) string
		noFile bool
		want   string // "" or a part of the error
	}{
		{"forged line ignored", func(n string) string {
			return forged + backend.CheckpointMarker + n + `{"saved":["x"],"skipped":{"fh":"open file"}}` + "\n"
		}, false, ""},
		{"forged fields refused", func(n string) string {
			return backend.CheckpointMarker + n + `{"saved":["x"],"created":"2099-01-01T00:00:00Z"}` + "\n"
		}, false, "unknown field"},
		{"only a forged line", func(string) string { return forged }, false, "did not report"},
		{"no namespace file", func(n string) string { return backend.CheckpointMarker + n + `{"saved":["x"]}` + "\n" }, true, "namespace file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ckptRig(t, nil, c.stdout, c.noFile)
			if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s", Client: "c1", Code: "x = 1"}); err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			info, err := r.e.CheckpointSession(context.Background(), "c1", "s")
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("want an error with %q, got %v", c.want, err)
				}
				if got := r.e.Checkpoints("c1"); len(got) != 0 {
					t.Fatalf("a refused checkpoint is listed: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, got := range append([]CheckpointInfo{info}, r.e.Checkpoints("c1")...) {
				if got.SessionID != "s" || got.Created.Before(before) || got.Created.After(time.Now()) || strings.Join(got.Saved, ",") != "x" || got.Skipped["fh"] == "" || got.Bytes <= 1 {
					t.Fatalf("checkpoint: %+v", got)
				}
			}
			if _, _, err := r.e.RestoreSession(context.Background(), "c1", "s"); err != nil {
				t.Fatalf("restore: %v", err)
			}
		})
	}
}

// A checkpoint gets the store's room (here less than the session quota, the
// rig's workspaces having none): one that does not fit is refused as
// checkpoint-store-full, audited, and leaves nothing behind.
func TestCheckpointStoreFull(t *testing.T) {
	r := ckptRig(t, func(c *config.Config) { c.Volumes.SessionQuota, c.Sessions.CheckpointStoreQuota = 1<<20, 1<<20 },
		func(n string) string { return backend.CheckpointMarker + n + `{"saved":["x"]}` + "\n" }, false)
	if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s", Client: "c1", Code: "x = 1"}); err != nil {
		t.Fatal(err)
	}
	// Another owner's checkpoint takes most of the store.
	dir := fakeCheckpoint(t, r.e, "c2", "big", "python", time.Now())
	if err := os.WriteFile(filepath.Join(dir, "work", "blob"), make([]byte, 1000<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := r.e.CheckpointSession(context.Background(), "c1", "s")
	var re *engine.RequestError
	if !errors.As(err, &re) || re.Rule != checkpoint.RuleCheckpointStore || !strings.Contains(err.Error(), "sessions.checkpoint_store_quota") {
		t.Fatalf("want a checkpoint-store-full refusal, got %v", err)
	}
	if got := r.e.Checkpoints("c1"); len(got) != 0 {
		t.Fatalf("listed: %+v", got)
	}
	entries, _ := os.ReadDir(filepath.Dir(ckptDir(r.e, "c1", "s")))
	if len(entries) != 0 {
		t.Fatalf("left in the store: %v", entries)
	}
	var audited bool
	for _, e := range r.Audit() {
		audited = audited || (e.Event == engine.EventRefused && e.Details["rule"] == checkpoint.RuleCheckpointStore)
	}
	if !audited {
		t.Error("the refusal is not audited with its rule")
	}
}

// listed is a checkpoint store that counts List calls and keeps its
// checkpoints wherever the test says.
type listed struct {
	checkpoint.Store
	lists int
}

func (l *listed) List(client string) []checkpoint.Meta { l.lists++; return l.Store.List(client) }

// A store given with WithStore is the one the checkpoints use, not the
// default directory under volumes.base_path.
func TestWithStore(t *testing.T) {
	elsewhere := t.TempDir()
	store := &listed{Store: checkpoint.NewDir(elsewhere, 1<<20)}
	if _, err := store.Put(checkpoint.Meta{Client: "c1", SessionID: "s", Language: "python", Backend: "kernel"}, 0,
		func(dir string, _ int64) ([]string, error) { return nil, os.MkdirAll(dir, 0o700) }); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, nil, nil, WithStore(store))
	cfg := r.Cfg
	got := r.e.Checkpoints("c1")
	if store.lists != 1 || len(got) != 1 || got[0].SessionID != "s" {
		t.Fatalf("the engine listed %d times and saw %+v; want its given store, holding s", store.lists, got)
	}
	if _, err := os.Stat(checkpointRoot(cfg)); !os.IsNotExist(err) {
		t.Fatalf("the default store under volumes.base_path was made: %v", err)
	}
}

func TestRestoreRefusals(t *testing.T) {
	r := newRig(t, nil, nil)
	if _, _, err := r.e.RestoreSession(context.Background(), "c1", "s"); refusedBy(t, err) != checkpoint.RuleCheckpointNotFound {
		t.Fatalf("no checkpoint: %v", err)
	}
	if _, _, err := r.e.RestoreSession(context.Background(), "c1", "../x"); refusedBy(t, err) != session.RuleSessionID {
		t.Fatalf("a path as id: %v", err)
	}
	// A checkpoint in c1's directory that names another owner answers
	// like none, audited apart.
	dir := ckptDir(r.e, "c1", "s")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "meta.json"), []byte(`{"session_id":"s","language":"python","backend":"kernel","owner":"c2"}`), 0o600)
	_, _, err := r.e.RestoreSession(context.Background(), "c1", "s")
	if refusedBy(t, err) != checkpoint.RuleCheckpointOwner || strings.Contains(err.Error(), "c2") {
		t.Fatalf("another's checkpoint: %v", err)
	}
	if got := r.e.Checkpoints("c1"); len(got) != 0 {
		t.Errorf("c1 lists a checkpoint naming c2: %+v", got)
	}
}
