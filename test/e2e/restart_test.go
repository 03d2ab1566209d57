package e2e

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// execIn runs code in a session and fails the test on any error.
func execIn(t *testing.T, cs *mcp.ClientSession, lang, sid, code string) out {
	t.Helper()
	var o out
	if res := testenv.Call(t, cs, "execute_"+lang, map[string]any{"code": code, "session_id": sid}, &o); res.IsError || !o.Success {
		t.Fatalf("execute_%s in %s: %s\n%+v", lang, sid, testenv.Text(res), o)
	}
	return o
}

func listSessions(t *testing.T, cs *mcp.ClientSession) mcpserver.SessionsOutput {
	t.Helper()
	var l mcpserver.SessionsOutput
	if res := testenv.Call(t, cs, "list_sessions", map[string]any{}, &l); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	return l
}

func checkpointIDs(l mcpserver.SessionsOutput) []string {
	var ids []string
	for _, c := range l.Checkpoints {
		ids = append(ids, c.SessionID)
	}
	slices.Sort(ids)
	return ids
}

// A Python session (DataFrame, function, open file handle, an uploaded
// file) and an R session (data.frame, function, connection) survive a real
// restart of the mcp-forge process on the same state directory: the stdio
// client finds them listed, and its first execute restores each with a
// notice of what came back and what did not.
func TestSessionsSurviveServerRestart(t *testing.T) {
	base := testenv.BaseDir(t)
	s1 := testenv.StartServerAt(t, base, "")
	cs := s1.Session
	execIn(t, cs, "python", "pyrs", "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\ndef double(x):\n    return x * 2\nfh = open('notes.txt', 'w')")
	var up fileOut
	if res := testenv.Call(t, cs, "upload_file", map[string]any{"session_id": "pyrs", "path": "in/data.csv", "content": "a,b\n1,2\n"}, &up); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	var ck mcpserver.CheckpointOutput
	res := testenv.Call(t, cs, "checkpoint_session", map[string]any{"session_id": "pyrs"}, &ck)
	if res.IsError || ck.Skipped["fh"] == "" || !slices.Contains(ck.Saved, "df") || !slices.Contains(ck.Saved, "double") {
		t.Fatalf("checkpoint: %s %+v", testenv.Text(res), ck)
	}
	// Changed after the explicit checkpoint: the shutdown one must hold it.
	execIn(t, cs, "python", "pyrs", "late = 5")
	execIn(t, cs, "r", "rrs", "d <- data.frame(x = 1:3)\nf <- function(v) v * 10\ncon <- file('c.txt', 'w')")

	// A graceful stop: the client closes stdin, as MCP hosts do.
	start := time.Now()
	if err := cs.Close(); err != nil {
		t.Fatalf("the server did not exit cleanly: %v", err)
	}
	t.Logf("server stopped (shutdown checkpoints included) in %v", time.Since(start).Round(time.Millisecond))
	if st := s1.Cmd.ProcessState; st == nil || !st.Exited() || st.ExitCode() != 0 {
		t.Fatalf("server exit: %v", st)
	}

	s2 := testenv.StartServerAt(t, base, "")
	cs = s2.Session
	if l := listSessions(t, cs); len(l.Sessions) != 0 || !slices.Equal(checkpointIDs(l), []string{"pyrs", "rrs"}) {
		t.Fatalf("after the restart, want no live sessions and checkpoints pyrs, rrs: %+v", l)
	}
	o := execIn(t, cs, "python", "pyrs", "double(int(df.a.sum())) + late")
	notices := strings.Join(o.Notices, "\n")
	if o.ResultRepr != "17" || !strings.Contains(notices, "restored") || !strings.Contains(notices, "fh") {
		t.Fatalf("python after the restart: %q, notices %q", o.ResultRepr, notices)
	}
	var d fileOut
	if res := testenv.Call(t, cs, "download_file", map[string]any{"session_id": "pyrs", "path": "in/data.csv"}, &d); res.IsError || d.Content != "a,b\n1,2\n" {
		t.Fatalf("the uploaded file after the restart: %s %+v", testenv.Text(res), d)
	}
	if o := execIn(t, cs, "python", "pyrs", "'fh' in globals()"); o.ResultRepr != "False" {
		t.Errorf("the open handle came back: %q", o.ResultRepr)
	}
	// Restored once: the second call has no notice.
	if o := execIn(t, cs, "python", "pyrs", "1"); strings.Contains(strings.Join(o.Notices, " "), "restored") {
		t.Errorf("restored twice: %q", o.Notices)
	}
	o = execIn(t, cs, "r", "rrs", "f(sum(d$x))")
	if notices := strings.Join(o.Notices, "\n"); o.ResultRepr != "[1] 60" || !strings.Contains(notices, "restored") || !strings.Contains(notices, "con") {
		t.Fatalf("R after the restart: %q, notices %q", o.ResultRepr, notices)
	}
	// destroy_session takes the checkpoint with it: a later restart does not bring it back.
	if res := testenv.Call(t, cs, "destroy_session", map[string]any{"session_id": "rrs"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if ids := checkpointIDs(listSessions(t, cs)); slices.Contains(ids, "rrs") {
		t.Fatalf("destroyed session's checkpoint listed: %v", ids)
	}
}

// Over HTTP the owner is the tenant: after a restart each tenant finds its
// own checkpoints and never another's, even under the same session id.
func TestCheckpointTenantsAcrossRestart(t *testing.T) {
	testenv.Require(t)
	tenants, keys := testenv.TenantKeys(t, "alice", "bob")
	base := testenv.BaseDir(t)
	h1 := testenv.StartHTTPAt(t, base, tenants)
	alice, bob := h1.MustConnect(t, keys["alice"]), h1.MustConnect(t, keys["bob"])
	execIn(t, alice, "python", "main", "x = 41")
	execIn(t, alice, "python", "solo", "secret = 'alice'")
	execIn(t, bob, "python", "main", "x = 1")
	if err := h1.Stop(t); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}

	h2 := testenv.StartHTTPAt(t, base, tenants)
	alice, bob = h2.MustConnect(t, keys["alice"]), h2.MustConnect(t, keys["bob"])
	if ids := checkpointIDs(listSessions(t, alice)); !slices.Equal(ids, []string{"main", "solo"}) {
		t.Fatalf("alice's checkpoints: %v", ids)
	}
	if ids := checkpointIDs(listSessions(t, bob)); !slices.Equal(ids, []string{"main"}) {
		t.Fatalf("bob's checkpoints: %v", ids)
	}
	var ck mcpserver.CheckpointOutput
	if res := testenv.Call(t, bob, "restore_session", map[string]any{"session_id": "solo"}, &ck); !res.IsError || ck.Error == nil || ck.Error.Type != "RequestError" {
		t.Fatalf("bob restored alice's checkpoint: %s", testenv.Text(res))
	}
	if o := execIn(t, bob, "python", "solo", "'secret' in globals()"); o.ResultRepr != "False" || strings.Contains(strings.Join(o.Notices, " "), "restored") {
		t.Fatalf("bob's new session solo holds alice's state: %+v", o)
	}
	if o := execIn(t, alice, "python", "main", "x + 1"); o.ResultRepr != "42" {
		t.Fatalf("alice's main: %+v", o)
	}
	if o := execIn(t, bob, "python", "main", "x + 1"); o.ResultRepr != "2" {
		t.Fatalf("bob's main: %+v", o)
	}
	if o := execIn(t, alice, "python", "solo", "secret"); o.ResultRepr != "'alice'" {
		t.Fatalf("alice's solo: %+v", o)
	}
}

// A checkpoint older than sessions.checkpoint_ttl is removed by the
// periodic cleanup, and the removal audited.
func TestCheckpointExpiry(t *testing.T) {
	s := testenv.StartServer(t, "[sessions]\ncheckpoint_ttl = 2\ncleanup_interval = 1\n")
	execIn(t, s.Session, "python", "exp", "y = 3")
	var ck mcpserver.CheckpointOutput
	if res := s.Call(t, "checkpoint_session", map[string]any{"session_id": "exp"}, &ck); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if ids := checkpointIDs(listSessions(t, s.Session)); !slices.Equal(ids, []string{"exp"}) {
		t.Fatalf("checkpoint not listed: %v", ids)
	}
	testenv.WaitFor(t, "the checkpoint to expire", 30*time.Second, func() bool {
		return len(listSessions(t, s.Session).Checkpoints) == 0
	})
	if res := s.Call(t, "restore_session", map[string]any{"session_id": "exp"}, &ck); !res.IsError {
		t.Fatal("an expired checkpoint was restored")
	}
	// The line follows the removal (the sweep audits what it removed):
	// an empty listing may be seen a moment before it.
	testenv.WaitFor(t, "the expiry in the audit log", 10*time.Second, func() bool {
		raw, _ := os.ReadFile(s.AuditLog)
		for _, line := range strings.Split(string(raw), "\n") {
			var e struct {
				Event   string         `json:"event"`
				Details map[string]any `json:"details"`
			}
			if json.Unmarshal([]byte(line), &e) == nil && e.Event == "session.checkpoint_expired" && e.Details["session"] == "exp" {
				return true
			}
		}
		return false
	})
}

// A checkpoint counts against the session quota: one that does not fit is
// refused with a clear error and the earlier checkpoint kept.
func TestCheckpointQuota(t *testing.T) {
	s := testenv.StartServer(t, "[volumes]\nsession_quota = \"32m\"\n")
	execIn(t, s.Session, "python", "big", "small = 1")
	var ck mcpserver.CheckpointOutput
	if res := s.Call(t, "checkpoint_session", map[string]any{"session_id": "big"}, &ck); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	execIn(t, s.Session, "python", "big", "import os\nblob = os.urandom(40 * 1024 * 1024)")
	res := s.Call(t, "checkpoint_session", map[string]any{"session_id": "big"}, &ck)
	if !res.IsError || ck.Error == nil || ck.Error.Type != "RequestError" || !strings.Contains(ck.Error.Message, "session_quota") {
		t.Fatalf("an over-quota checkpoint: %s %+v", testenv.Text(res), ck)
	}
	l := listSessions(t, s.Session)
	if len(l.Checkpoints) != 1 || slices.Contains(l.Checkpoints[0].Saved, "blob") {
		t.Fatalf("the earlier checkpoint is not kept: %+v", l.Checkpoints)
	}
	// The namespace file did not stay behind to fill the workspace.
	var d fileOut
	testenv.Call(t, s.Session, "download_file", map[string]any{"session_id": "big", "path": ".forge-checkpoint"}, &d)
	if d.Error == nil {
		t.Error("the namespace file was left in the working directory")
	}
}
