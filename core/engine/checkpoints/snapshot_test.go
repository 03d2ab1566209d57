package checkpoints

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// fakeSnapshots saves a "sandbox" as a file and restores it as a new
// container, recording the calls; whyNot, when set, is why none can be.
type fakeSnapshots struct {
	mu       sync.Mutex
	whyNot   string
	calls    []string
	restores int
}

func (f *fakeSnapshots) log(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeSnapshots) CanSnapshot(plugin, container string) (int64, error) {
	if f.whyNot != "" {
		return 0, fmt.Errorf("%w: %s", sandbox.ErrNoSnapshot, f.whyNot)
	}
	return 1 << 20, nil
}

func (f *fakeSnapshots) Snapshot(_ context.Context, plugin, container, dir string, _ int64, stop bool) error {
	f.log("snapshot %s %s stop=%v", plugin, container, stop)
	if err := os.MkdirAll(filepath.Join(dir, "sandbox"), 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sandbox", "pages.img"), []byte("memory of "+container), 0o600)
}

func (f *fakeSnapshots) Restore(_ context.Context, plugin, sess, dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "sandbox", "pages.img"))
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	f.restores++
	n := f.restores
	f.mu.Unlock()
	f.log("restore %s %s from %q", plugin, sess, data)
	return fmt.Sprintf("restored-%d", n), nil
}

func (f *fakeSnapshots) Remove(_ context.Context, plugin, container string) error {
	f.log("remove %s %s", plugin, container)
	return nil
}

func (f *fakeSnapshots) Running(context.Context, string, string) (bool, error) { return true, nil }

func (f *fakeSnapshots) has(prefix string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(f.calls, func(c string) bool { return strings.HasPrefix(c, prefix) })
}

func snapRig(t *testing.T, mutate func(*config.Config)) (*rig, *fakeSnapshots) {
	t.Helper()
	r := ckptRig(t, mutate, func(n string) string { return backend.CheckpointMarker + n + `{"saved":["x"]}` + "\n" }, false)
	r.Kernel.Resumable = true
	f := &fakeSnapshots{}
	r.e.SetSnapshots(f)
	if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s", Client: "c1", Code: "x = 1"}); err != nil {
		t.Fatal(err)
	}
	return r, f
}

// A session the runtime can save whole is checkpointed as a sealed
// snapshot, restored by its plugin resuming the restored container; a
// snapshot whose files changed is refused by its seal (audited with the
// rule) and the session keeps its kernel; where it cannot be saved whole,
// the checkpoint holds variables and says why.
func TestSnapshotCheckpoint(t *testing.T) {
	ctx := context.Background()
	r, f := snapRig(t, nil)
	info, err := r.e.CheckpointSession(ctx, "c1", "s")
	if err != nil || info.Kind != checkpoint.KindSnapshot || len(info.Saved) != 0 || !f.has("snapshot kernel ctr-") {
		t.Fatalf("checkpoint: %+v %v %v", info, err, f.calls)
	}
	page := filepath.Join(ckptDir(r.e, "c1", "s"), "work", "sandbox", "pages.img")
	orig, _ := os.ReadFile(page)
	os.WriteFile(page, []byte("forged memory"), 0o600)
	_, _, err = r.e.RestoreSession(ctx, "c1", "s")
	if refusedBy(t, err) != checkpoint.RuleSnapshotSeal || f.has("restore") {
		t.Fatalf("a tampered snapshot: %v, calls %v", err, f.calls)
	}
	if st := r.e.sessions.State(r.e.sessions.Get("c1", "s")); st != session.StateIdle {
		t.Fatalf("the session after a refused restore is %s, want idle with its kernel", st)
	}
	if !slices.ContainsFunc(r.Audit(), func(e audit.Entry) bool { return e.Details["rule"] == checkpoint.RuleSnapshotSeal }) {
		t.Error("the seal's refusal is not audited with its rule")
	}
	os.WriteFile(page, orig, 0o600)
	if _, _, err := r.e.RestoreSession(ctx, "c1", "s"); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if !f.has("restore kernel s-") || !slices.ContainsFunc(r.Kernel.Log(), func(e string) bool { return strings.HasPrefix(e, "resume ") && strings.Contains(e, "restored-1") }) {
		t.Fatalf("the restore did not resume the restored container: %v %v", f.calls, r.Kernel.Log())
	}
	// Another client has no such snapshot.
	if _, _, err := r.e.RestoreSession(ctx, "c2", "s"); refusedBy(t, err) != checkpoint.RuleCheckpointNotFound {
		t.Fatalf("another client's restore: %v", err)
	}
	f.whyNot = "it runs under runc"
	info, err = r.e.CheckpointSession(ctx, "c1", "s")
	if err != nil || info.Kind != "" || info.NotWhole != "it runs under runc" || strings.Join(info.Saved, ",") != "x" {
		t.Fatalf("a session that cannot be saved whole: %+v %v", info, err)
	}
}

// A session idle past sessions.suspend_after is snapshotted and dropped,
// listed as a suspended checkpoint; its next call resumes it, with its
// documentation, and says so.
func TestSuspendIdle(t *testing.T) {
	ctx := context.Background()
	r, f := snapRig(t, func(c *config.Config) { c.Sessions.SuspendAfter = 60 })
	if _, err := r.e.DocumentState(ctx, "c1", "s", map[string]string{"x": "one"}, nil, false); err != nil {
		t.Fatal(err)
	}
	if n := r.e.SuspendIdle(ctx); n != 0 {
		t.Fatalf("a session active now was suspended (%d)", n)
	}
	s := r.e.sessions.Get("c1", "s")
	r.e.sessions.Update(s, func(s *session.Session) { s.LastActive = time.Now().Add(-time.Hour) })
	if n := r.e.SuspendIdle(ctx); n != 1 || r.e.sessions.Live("c1", "s") {
		t.Fatalf("suspended %d, live %v", n, r.e.sessions.Live("c1", "s"))
	}
	ck := r.e.Checkpoints("c1")
	if len(ck) != 1 || !ck[0].Suspended || ck[0].Kind != checkpoint.KindSnapshot {
		t.Fatalf("checkpoints after the suspend: %+v", ck)
	}
	res, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s", Client: "c1", Code: "x"})
	if err != nil || !strings.Contains(strings.Join(res.Notices, " "), "suspended") || !f.has("restore kernel") {
		t.Fatalf("the call after the suspend: %+v %v %v", res.Notices, err, f.calls)
	}
	v, err := r.e.View(ctx, "c1", "s", false)
	if err != nil || v.Documented["x"] != "one" {
		t.Fatalf("the documentation after the resume: %+v %v", v, err)
	}
}
