package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// snapshotSetup holds, in a Python session, what a variables checkpoint
// loses: an open file half read, a listening socket, a half-consumed
// generator, a lambda, a thread's result, 8 MB of random bytes, and the
// execution count.
const snapshotSetup = `import hashlib, os, socket, threading
with open("lines.txt", "w") as w:
    w.write("one\ntwo\nthree\n")
fh = open("lines.txt")
first = fh.readline()
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
port = srv.getsockname()[1]
gen = (i * i for i in range(10))
_ = [next(gen) for _ in range(3)]
add41 = lambda x: x + 41
box = []
t = threading.Thread(target=lambda: box.append("thread")); t.start(); t.join()
blob = os.urandom(8 << 20)
digest = hashlib.sha256(blob).hexdigest()
`

// snapshotCheck answers what the session holds, as one line.
const snapshotCheck = `c = socket.create_connection(("127.0.0.1", port)); a, _ = srv.accept(); c.sendall(b"ok")
print(fh.readline().strip(), next(gen), add41(1), box[0], hashlib.sha256(blob).hexdigest() == digest, a.recv(2).decode(), get_ipython().execution_count, "changed" in globals())`

// A gVisor session's checkpoint is a snapshot of its whole sandbox: after
// the session changed, restore_session brings back what it held (the open
// file at its offset, the listening socket, the generator where it was,
// the lambda, the data, the execution count) and not the change; a fork
// gets the same and diverges; a snapshot whose files were changed is
// refused by its seal; the snapshot survives a server restart and the
// first call restores it.
func TestSnapshotKeepsEverything(t *testing.T) {
	testenv.RequireGVisor(t)
	base := testenv.BaseDir(t)
	s1 := testenv.StartServerAt(t, base, "")
	cs := s1.Session
	run := func(cs *mcp.ClientSession, sid, code string) out {
		t.Helper()
		var o out
		if res := testenv.Call(t, cs, "execute_python", map[string]any{"code": code, "session_id": sid}, &o); res.IsError || !o.Success {
			t.Fatalf("%s\n%+v", testenv.Text(res), o)
		}
		return o
	}
	call := func(cs *mcp.ClientSession, tool, sid string) mcpserver.CheckpointOutput {
		t.Helper()
		var o mcpserver.CheckpointOutput
		if res := testenv.Call(t, cs, tool, map[string]any{"session_id": sid}, &o); res.IsError {
			t.Fatalf("%s: %s", tool, testenv.Text(res))
		}
		return o
	}
	run(cs, "snap", snapshotSetup)
	ck := call(cs, "checkpoint_session", "snap")
	if ck.Kind != "snapshot" || ck.Bytes < 8<<20 {
		t.Fatalf("checkpoint of a gVisor session: %+v; want a snapshot holding at least the 8 MB of data", ck)
	}
	// The execution count at the snapshot: the setup was cell 1.
	run(cs, "snap", "changed = 1\n_ = next(gen)\nfh.readline()")
	r := call(cs, "restore_session", "snap")
	if !strings.Contains(r.Notice, "snapshot") || r.Kind != "snapshot" {
		t.Fatalf("restore: %+v", r)
	}
	const want = "two 9 42 thread True ok 2 False"
	if got := strings.TrimSpace(run(cs, "snap", snapshotCheck).Stdout); got != want {
		t.Fatalf("after restore_session: %q, want %q (line, generator, lambda, thread, data, socket, execution count, the later change gone)", got, want)
	}

	// A fork holds the source's sandbox as it is now, then diverges.
	var fk struct {
		SessionID string `json:"session_id"`
		Kind      string `json:"kind"`
	}
	if res := testenv.Call(t, cs, "fork_session", map[string]any{"session_id": "snap", "new_session_id": "snapfork"}, &fk); res.IsError || fk.Kind != "snapshot" {
		t.Fatalf("fork: %s %+v", testenv.Text(res), fk)
	}
	if got := strings.TrimSpace(run(cs, "snapfork", "print(fh.readline().strip(), next(gen), add41(1), hashlib.sha256(blob).hexdigest() == digest)").Stdout); got != "three 16 42 True" {
		t.Errorf("the fork: %q, want the source's state as it was at the fork", got)
	}
	run(cs, "snapfork", "only_in_fork = 1")
	if got := run(cs, "snap", "'only_in_fork' in globals()").ResultRepr; got != "False" {
		t.Errorf("the fork's change reached its source: %q", got)
	}
	// Two at once from one snapshot, each its own sandbox.
	var fks struct {
		Forks []string `json:"session_ids"`
		Kind  string   `json:"kind"`
	}
	if res := testenv.Call(t, cs, "fork_session", map[string]any{"session_id": "snap", "new_session_id": "two", "count": 2}, &fks); res.IsError || fks.Kind != "snapshot" || len(fks.Forks) != 2 {
		t.Fatalf("fork count 2: %s %+v", testenv.Text(res), fks)
	}
	for _, id := range fks.Forks {
		if got := strings.TrimSpace(run(cs, id, "print(fh.readline().strip(), add41(1), hashlib.sha256(blob).hexdigest() == digest)").Stdout); got != "three 42 True" {
			t.Errorf("fork %s: %q, want the source's open file, lambda and data", id, got)
		}
	}
	run(cs, fks.Forks[0], "only_in_first = 1")
	if got := run(cs, fks.Forks[1], "'only_in_first' in globals()").ResultRepr; got != "False" {
		t.Errorf("one fork's change reached the other: %q", got)
	}
	for _, id := range append(fks.Forks, "snapfork") {
		call(cs, "destroy_session", id)
	}

	// A snapshot whose files changed is refused by its seal, audited.
	call(cs, "checkpoint_session", "snap")
	pages, _ := filepath.Glob(filepath.Join(base, "state", "checkpoints", "*", "snap", "work", "sandbox", "*"))
	if len(pages) == 0 {
		t.Fatal("no snapshot files in the checkpoint store")
	}
	orig, err := os.ReadFile(pages[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pages[0], append(append([]byte{}, orig...), 0), 0o600); err != nil {
		t.Fatal(err)
	}
	var bad mcpserver.CheckpointOutput
	if res := testenv.Call(t, cs, "restore_session", map[string]any{"session_id": "snap"}, &bad); !res.IsError || !strings.Contains(testenv.Text(res), "seal") {
		t.Fatalf("a tampered snapshot was restored: %s", testenv.Text(res))
	}
	if !auditHas(t, s1.AuditLog, "snapshot-seal") {
		t.Error("the seal's refusal is not in the audit log with its rule")
	}
	if err := os.WriteFile(pages[0], orig, 0o600); err != nil {
		t.Fatal(err)
	}
	call(cs, "restore_session", "snap") // as sealed again: it restores

	// Across a restart: the shutdown's snapshot, restored by the first call.
	run(cs, "snap", "after_restore = 7")
	for _, e := range auditEntries(t, s1.AuditLog) {
		if (e.Event == "session.checkpoint" || e.Event == "session.restore") && e.Details["kind"] == "snapshot" && e.Success {
			t.Logf("%s (%v): %v ms, %v bytes", e.Event, e.Details["reason"], e.Details["duration_ms"], e.Details["bytes"])
		}
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("the server did not exit cleanly: %v", err)
	}
	s2 := testenv.StartServerAt(t, base, "")
	o := run(s2.Session, "snap", "print(after_restore, add41(1), next(gen))")
	if got := strings.TrimSpace(o.Stdout); got != "7 42 16" || !strings.Contains(strings.Join(o.Notices, " "), "snapshot") {
		t.Fatalf("after the restart: %q, notices %q", got, o.Notices)
	}
}

// auditHas says whether a line of the audit log at path names rule.
func auditHas(t *testing.T, path, rule string) bool {
	t.Helper()
	for _, e := range auditEntries(t, path) {
		if e.Details["rule"] == rule {
			return true
		}
	}
	return false
}

// A gVisor session idle past sessions.suspend_after is suspended: its
// sandbox is snapshotted and removed (list_sessions lists it as a
// suspended snapshot, no container of it is left); the next call resumes
// it whole, with a notice and the time it took, its documentation and
// history kept.
func TestSuspendIdleSession(t *testing.T) {
	testenv.RequireGVisor(t)
	s := testenv.StartServer(t, "[sessions]\nsuspend_after = 2\ncleanup_interval = 1\n")
	var o out
	if res := testenv.Call(t, s.Session, "execute_python", map[string]any{"code": "gen = iter(range(5)); next(gen); blob = bytes(4 << 20); x = 41", "session_id": "idle"}, &o); res.IsError || !o.Success {
		t.Fatal(testenv.Text(res))
	}
	if res := testenv.Call(t, s.Session, "document_state", map[string]any{"session_id": "idle", "variables": map[string]any{"x": "the answer, less one"}}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	var l mcpserver.SessionsOutput
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		l = listSessions(t, s.Session)
		if len(l.Sessions) == 0 && len(l.Checkpoints) == 1 && l.Checkpoints[0].Suspended && l.Checkpoints[0].Kind == "snapshot" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle session was not suspended: %+v", l)
		}
	}
	suspended := false
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == "session.suspend" && e.Success {
			suspended = true
			t.Logf("suspended after %v s idle in %v ms, %v bytes", e.Details["idle_s"], e.Details["suspend_ms"], e.Details["bytes"])
		}
	}
	if !suspended {
		t.Error("no session.suspend line in the audit log")
	}
	if ids := sessionContainers(t, s.Base, "idle"); len(ids) != 0 {
		t.Errorf("the suspended session still has containers: %v", ids)
	}
	// Its resources show it suspended, and reading them does not resume it.
	for _, leaf := range []string{"state", "variables"} {
		rr, err := s.Session.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "mcp://forge/sessions/idle/" + leaf})
		if err != nil || len(rr.Contents) != 1 || !strings.Contains(rr.Contents[0].Text, "suspended") {
			t.Fatalf("the %s resource of a suspended session: %v %+v", leaf, err, rr)
		}
	}
	if ids := sessionContainers(t, s.Base, "idle"); len(ids) != 0 {
		t.Errorf("reading the resources resumed the session: %v", ids)
	}
	res := testenv.Call(t, s.Session, "execute_python", map[string]any{"code": "print(x + 1, next(gen), len(blob))", "session_id": "idle"}, &o)
	notices := strings.Join(o.Notices, " ")
	if res.IsError || strings.TrimSpace(o.Stdout) != "42 1 4194304" || !strings.Contains(notices, "suspended") || !strings.Contains(notices, "ms") {
		t.Fatalf("the first call after the suspend: %s %q, notices %q", testenv.Text(res), o.Stdout, notices)
	}
	var v mcpserver.SessionView
	if res := testenv.Call(t, s.Session, "document_state", map[string]any{"session_id": "idle", "variables": map[string]any{"gen": "a range"}}, &v); res.IsError || v.Documented["x"] == "" {
		t.Errorf("the documentation after the resume: %s %+v", testenv.Text(res), v)
	}
}

// A snapshot in a checkpoint store two servers share (sessions.
// checkpoint_dir, as replicas of a core share one) restores on the server
// that did not take it: the same image, the seal's key in the store, the
// same client; the restored session holds everything, and the two diverge.
func TestSnapshotMovesBetweenServers(t *testing.T) {
	testenv.RequireGVisor(t)
	store := filepath.Join(testenv.BaseDir(t), "shared-checkpoints")
	cfg := "[sessions]\ncheckpoint_dir = \"" + store + "\"\n"
	a, b := testenv.StartServer(t, cfg), testenv.StartServer(t, cfg)
	run := func(cs *mcp.ClientSession, code string) string {
		t.Helper()
		var o out
		if res := testenv.Call(t, cs, "execute_python", map[string]any{"code": code, "session_id": "moved"}, &o); res.IsError || !o.Success {
			t.Fatalf("%s\n%+v", testenv.Text(res), o)
		}
		return strings.TrimSpace(o.Stdout)
	}
	run(a.Session, snapshotSetup)
	var ck mcpserver.CheckpointOutput
	if res := testenv.Call(t, a.Session, "checkpoint_session", map[string]any{"session_id": "moved"}, &ck); res.IsError || ck.Kind != "snapshot" {
		t.Fatalf("checkpoint on the first server: %s %+v", testenv.Text(res), ck)
	}
	var r mcpserver.CheckpointOutput
	if res := testenv.Call(t, b.Session, "restore_session", map[string]any{"session_id": "moved"}, &r); res.IsError || r.Kind != "snapshot" {
		t.Fatalf("restore on the second server: %s %+v", testenv.Text(res), r)
	}
	if got := run(b.Session, snapshotCheck); got != "two 9 42 thread True ok 2 False" {
		t.Fatalf("the moved session: %q", got)
	}
	run(b.Session, "changed = 'on b'")
	if got := run(a.Session, "print('changed' in globals(), next(gen))"); got != "False 9" {
		t.Errorf("the first server's session after the move: %q, want it untouched", got)
	}
}
