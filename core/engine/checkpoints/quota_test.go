package checkpoints

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

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
		if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: id, Client: "bob"}); err != nil {
			t.Fatalf("session %s: %v", id, err)
		}
	}
	fakeCheckpoint(t, r.e, "bob", "reaped", "python", time.Now())
	quota := func(err error) string {
		re, _ := tenant.QuotaOf(err)
		if re == nil {
			return ""
		}
		return re.Rule
	}
	for _, c := range []struct {
		name string
		call func() error
		want string // the quota that refuses it, "" none
	}{
		{"execute with a new session", func() error {
			_, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s3", Client: "bob"})
			return err
		}, "tenants.bob.max_sessions"},
		{"restore of a reaped session", func() error {
			_, _, err := r.e.RestoreSession(ctx, "bob", "reaped")
			return err
		}, "tenants.bob.max_sessions"},
		{"execute in a live session", func() error {
			_, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s1", Client: "bob"})
			return err
		}, ""},
		{"restart of a live session", func() error {
			_, err := r.e.RestartSession(ctx, "bob", "s2")
			return err
		}, ""},
		{"a tenant without a quota of its own", func() error {
			_, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s9", Client: "conn-1"})
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
	// The quota audited its refusals: the engine, through which they
	// passed, does not audit them again as a tool's.
	for _, e := range r.Audit() {
		if e.Event == engine.EventRefused {
			t.Errorf("a quota's refusal audited again: %+v", e)
		}
	}
	// With room again, the restore admits the session (its kernel's
	// working directory is the host services' to make: made here).
	if err := r.e.DestroySession(ctx, "bob", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(r.WS.SessionPath(session.InternalID("bob", "reaped")), workspace.SessionWorkDir), 0o700); err != nil {
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
