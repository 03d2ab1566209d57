package engine

import (
	"context"
	"errors"
	"github.com/mcp-forge/mcp-forge/core/session"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// fakeRuns stands for the sandbox manager's run tracking: a run's
// container outlives its answer until the test removes it.
type fakeRuns struct {
	mu   sync.Mutex
	gone map[string]chan struct{}
	runs []string // in the order the backend saw them
}

func (f *fakeRuns) started(run string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gone[run] = make(chan struct{})
	f.runs = append(f.runs, run)
}

func (f *fakeRuns) remove(run string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.gone[run])
}

func (f *fakeRuns) RunGone(run string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gone[run]
}

// A stateless run's slot (execution.max_concurrent_runs) is held after its
// answer until its container is gone: with one slot, a second call waits
// for the first run's container, not for its answer.
func TestRunSlotHeldUntilContainersGone(t *testing.T) {
	r := newRig(t, func(c *config.Config) { c.Execution.MaxConcurrentRuns = 1 }, nil)
	runs := &fakeRuns{gone: map[string]chan struct{}{}}
	r.e.RunGone = runs.RunGone
	r.snake.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		runs.started(req.RunID) // the answer comes back, the container stays
		return backend.ExecuteResult{Success: true}, nil
	}
	if _, err := r.exec(t, Request{Language: "python"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := r.e.Execute(ctx, Request{Language: "python", Code: "1", Client: "c1"}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second run got the slot while the first run's container was there: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.exec(t, Request{Language: "python"}); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("the waiting run went ahead before the container was removed: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	runs.remove(runs.runs[0])
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the slot did not come back when the run's container was removed")
	}
	// A run without containers left (a session run, a cold run that removed
	// its own) gives its slot back at once.
	r.e.RunGone = func(string) <-chan struct{} { c := make(chan struct{}); close(c); return c }
	runs.remove(runs.runs[1])
	for i := range 3 {
		if _, err := r.exec(t, Request{Language: "python", SessionID: "s"}); err != nil {
			t.Fatalf("session run %d: %v", i, err)
		}
	}
}

// A tenant's max_sessions is asked where every live session is admitted:
// a new session_id of an execute and restore_session of a session that is
// gone alike. Replacing the kernel of a live session creates none.
func TestSessionQuotaCoversRestore(t *testing.T) {
	r := ckptRig(t, nil, func(nonce string) string { return backend.CheckpointMarker + nonce + `{"saved":["x"]}` + "\n" }, false)
	cfg := config.Default()
	cfg.Tenants = map[string]config.Tenant{"bob": {APIKeySHA256: []string{tenant.HashKey("kb")}, MaxSessions: 2}}
	rec := &quotaLog{}
	r.e.SessionQuota = tenant.New(cfg).SessionQuota(rec, nil)
	ctx := context.Background()
	for _, id := range []string{"s1", "s2"} {
		if _, err := r.exec(t, Request{Language: "python", SessionID: id, Client: "bob"}); err != nil {
			t.Fatalf("session %s: %v", id, err)
		}
	}
	fakeCheckpoint(t, r.e, "bob", "reaped", "python", time.Now())
	quota := func(err error) string {
		var qe *tenant.QuotaError
		if !errors.As(err, &qe) {
			return ""
		}
		return qe.Field
	}
	for _, c := range []struct {
		name string
		call func() error
		want string // the quota that refuses it, "" none
	}{
		{"execute with a new session", func() error {
			_, err := r.exec(t, Request{Language: "python", SessionID: "s3", Client: "bob"})
			return err
		}, "tenants.bob.max_sessions"},
		{"restore of a reaped session", func() error {
			_, _, err := r.e.RestoreSession(ctx, "bob", "reaped")
			return err
		}, "tenants.bob.max_sessions"},
		{"execute in a live session", func() error {
			_, err := r.exec(t, Request{Language: "python", SessionID: "s1", Client: "bob"})
			return err
		}, ""},
		{"restart of a live session", func() error {
			_, err := r.e.RestartSession(ctx, "bob", "s2")
			return err
		}, ""},
		{"a tenant without a quota of its own", func() error {
			_, err := r.exec(t, Request{Language: "python", SessionID: "s9", Client: "conn-1"})
			return err
		}, ""},
	} {
		err := c.call()
		if got := quota(err); got != c.want || (c.want == "" && err != nil) {
			t.Errorf("%s: %v, want refusal by %q", c.name, err, c.want)
		}
	}
	if n := len(r.e.Sessions("bob", false)); n != 2 {
		t.Fatalf("bob has %d live sessions, quota 2", n)
	}
	if got := rec.rules(); len(got) != 2 || got[0] != "tenants.bob.max_sessions/execute_python" || got[1] != "tenants.bob.max_sessions/restore_session" {
		t.Fatalf("quota refusals audited: %v", got)
	}
	// With room again, the restore admits the session (its kernel's
	// working directory is the host services' to make: made here).
	if err := r.e.DestroySession(ctx, "bob", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(r.ws.SessionPath(session.InternalID("bob", "reaped")), workspace.SessionWorkDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.e.RestoreSession(ctx, "bob", "reaped"); err != nil {
		t.Fatalf("restore within the quota: %v", err)
	}
	if n := len(r.e.Sessions("bob", false)); n != 2 {
		t.Fatalf("bob has %d live sessions after the restore, want 2", n)
	}
}

type quotaLog struct {
	mu      sync.Mutex
	entries []audit.Entry
}

func (q *quotaLog) Record(e audit.Entry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.entries = append(q.entries, e)
}

func (q *quotaLog) rules() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for _, e := range q.entries {
		if e.Event == tenant.QuotaRefused {
			out = append(out, e.Details["rule"].(string)+"/"+e.Details["tool"].(string))
		}
	}
	return out
}
