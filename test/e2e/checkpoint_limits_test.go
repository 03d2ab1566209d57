package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// storeWatch samples the checkpoint store's size on the host (apparent or
// allocated, the larger, of everything in it) every few milliseconds until
// stopped, and returns the largest it saw: a copy that writes past its
// limit and removes it afterwards is caught while it writes.
func storeWatch(base string) (stop func() int64) {
	dir := filepath.Join(base, "state", "checkpoints")
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if n := hostUsage(dir); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() int64 {
		close(done)
		wg.Wait()
		if n := hostUsage(dir); n > peak.Load() {
			peak.Store(n)
		}
		return peak.Load()
	}
}

// hostUsage is what dir takes on the host: for each file or directory its
// apparent or allocated size, the larger (the test's own count, not the
// core's).
func hostUsage(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil {
			n += max(fi.Size(), fi.Sys().(*syscall.Stat_t).Blocks*512)
		}
		return nil
	})
	return n
}

// refusedWith reports whether the audit log holds a refusal of tool with rule.
func refusedWith(t *testing.T, auditLog, tool, rule string) bool {
	t.Helper()
	for _, e := range auditEntries(t, auditLog) {
		if e.Event == "request.refused" && e.Details["tool"] == tool && e.Details["rule"] == rule {
			return true
		}
	}
	return false
}

// checkpointEvents are the session.checkpoint entries of the audit log.
func checkpointEvents(t *testing.T, auditLog string) []audit.Entry {
	t.Helper()
	var out []audit.Entry
	for _, e := range auditEntries(t, auditLog) {
		if e.Event == "session.checkpoint" {
			out = append(out, e)
		}
	}
	return out
}

// sparseCode makes 24 sparse files of 63 MiB: 0 bytes used of the
// workspace, 1.5 GB if copied whole.
const sparseCode = "for i in range(24):\n    with open('sparse%02d' % i, 'wb') as f:\n        f.truncate(63 << 20)\nx = 1"

// The defect: a session holding 24 sparse files of 63 MiB in a 64 MiB
// workspace made checkpoint_session write about 1.5 GB to the host before
// refusing. The copy now stops at the session quota: the checkpoint is
// refused with a tool error naming the limit, audited with its rule, the
// store never grows past the limit, and nothing of it is left on disk. The
// same holds for the checkpoint at shutdown.
func TestCheckpointSparseFilesStopAtTheQuota(t *testing.T) {
	const quota = 64 << 20
	var base string
	p := testenv.NewInProcess(t, func(c *config.Config) {
		c.Volumes.SessionQuota = 64 << 20
		base = c.Volumes.BasePath
	})
	cs := p.Connect(t)
	execIn(t, cs, "python", "sparse", sparseCode)

	stop := storeWatch(base)
	var o mcpserver.CheckpointOutput
	res := testenv.Call(t, cs, "checkpoint_session", map[string]any{"session_id": "sparse"}, &o)
	peak := stop()
	text := testenv.Text(res)
	if !res.IsError || !strings.Contains(text, "volumes.session_quota") || !strings.Contains(text, "64m") {
		t.Fatalf("checkpoint of 24 sparse files of 63 MiB in a 64 MiB session: want a refusal naming the quota, got %v %q", res.IsError, text)
	}
	t.Logf("refusal: %s", text)
	if peak > quota {
		t.Fatalf("the checkpoint store grew to %d bytes while copying, past the %d-byte quota", peak, quota)
	}
	if !refusedWith(t, filepath.Join(base, "audit.log"), "checkpoint_session", "checkpoint-quota") {
		t.Error("the refusal is not audited with rule checkpoint-quota")
	}
	if l := listSessions(t, cs); len(l.Checkpoints) != 0 {
		t.Errorf("a refused checkpoint is listed: %+v", l.Checkpoints)
	}
	if n := hostUsage(filepath.Join(base, "state", "checkpoints")); n > 64<<10 {
		t.Errorf("the refused checkpoint left %d bytes in the store", n)
	}

	// The checkpoint at shutdown goes the same way.
	stop = storeWatch(base)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.Forge.Engine.CloseAll(ctx)
	if peak := stop(); peak > quota {
		t.Fatalf("the shutdown checkpoint grew the store to %d bytes, past the %d-byte quota", peak, quota)
	}
	var shut *audit.Entry
	for _, e := range checkpointEvents(t, filepath.Join(base, "audit.log")) {
		if e.Details["reason"] == "server shutdown" {
			shut = &e
		}
	}
	if shut == nil || shut.Success || shut.Details["rule"] != "checkpoint-quota" {
		t.Fatalf("shutdown checkpoint: want a failure with rule checkpoint-quota, got %+v", shut)
	}
	entries, _ := os.ReadDir(filepath.Join(base, "state", "checkpoints"))
	for _, o := range entries {
		if cks, _ := os.ReadDir(filepath.Join(base, "state", "checkpoints", o.Name())); len(cks) != 0 {
			t.Errorf("left in the store after the refused shutdown checkpoint: %v", cks)
		}
	}
}

// All checkpoints together are bounded by sessions.checkpoint_store_quota:
// a second session's checkpoint that would pass it is refused (rule
// checkpoint-store-full) while the first is kept, and fits once the first
// is destroyed.
func TestCheckpointStoreQuota(t *testing.T) {
	testenv.Parallel(t)
	var base string
	p := testenv.NewInProcess(t, func(c *config.Config) {
		c.Volumes.SessionQuota = 64 << 20
		c.Sessions.CheckpointStoreQuota = 96 << 20
		base = c.Volumes.BasePath
	})
	cs := p.Connect(t)
	const fill = "import os\nwith open('blob', 'wb') as f:\n    f.write(os.urandom(50 << 20))\nx = 1"
	for _, sid := range []string{"first", "second"} {
		execIn(t, cs, "python", sid, fill)
	}
	if _, res := ckptCall(t, cs, "checkpoint_session", "first"); res.IsError {
		t.Fatalf("the first checkpoint: %s", testenv.Text(res))
	}
	stop := storeWatch(base)
	_, res := ckptCall(t, cs, "checkpoint_session", "second")
	peak := stop()
	text := testenv.Text(res)
	if !res.IsError || !strings.Contains(text, "sessions.checkpoint_store_quota") || !strings.Contains(text, "96m") {
		t.Fatalf("a checkpoint past the store's quota: want a refusal naming it, got %v %q", res.IsError, text)
	}
	if peak > 96<<20 {
		t.Fatalf("the store grew to %d bytes, past its quota of 96 MiB", peak)
	}
	if !refusedWith(t, filepath.Join(base, "audit.log"), "checkpoint_session", "checkpoint-store-full") {
		t.Error("the refusal is not audited with rule checkpoint-store-full")
	}
	if ids := checkpointIDs(listSessions(t, cs)); !slices.Equal(ids, []string{"first"}) {
		t.Fatalf("checkpoints after the refusal: %v, want the first only", ids)
	}
	if res := testenv.Call(t, cs, "destroy_session", map[string]any{"session_id": "first"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if o, res := ckptCall(t, cs, "checkpoint_session", "second"); res.IsError || o.Bytes < 50<<20 || o.Bytes > 64<<20 {
		t.Fatalf("with room again: %s %+v", testenv.Text(res), o)
	}
}

func ckptCall(t *testing.T, cs *mcp.ClientSession, tool, sid string) (mcpserver.CheckpointOutput, *mcp.CallToolResult) {
	t.Helper()
	var o mcpserver.CheckpointOutput
	res := testenv.Call(t, cs, tool, map[string]any{"session_id": sid}, &o)
	return o, res
}

// The defect: a checkpoint of an R session with nothing to skip answered
// "invalid character ':' looking for beginning of object key string" (the
// save wrote "skipped":{:"…"}), so R sessions were never checkpointed, at
// shutdown neither. Now: names with quotes, backslashes and non-ASCII are
// saved and restored, a connection is listed as skipped, and an R session
// without one survives a server restart.
func TestCheckpointR(t *testing.T) {
	testenv.Parallel(t)
	base := testenv.BaseDir(t)
	s1 := testenv.StartServerAt(t, base, "")
	cs := s1.Session
	execIn(t, cs, "r", "rplain", "x <- 41\nassign('we\"ird\\\\name', 2)\nassign('caf\\u00e9', 3)\nf <- function(v) v * 10")
	o, res := ckptCall(t, cs, "checkpoint_session", "rplain")
	if res.IsError {
		t.Fatalf("checkpoint of an R session with nothing to skip: %s", testenv.Text(res))
	}
	if len(o.Skipped) != 0 || len(o.Saved) != 4 || !slices.Contains(o.Saved, "x") || !slices.Contains(o.Saved, `we"ird\name`) || !slices.Contains(o.Saved, "f") {
		t.Fatalf("saved %q skipped %v: want x, f, we\"ird\\name and café, nothing skipped", o.Saved, o.Skipped)
	}
	if res := testenv.Call(t, cs, "restart_session", map[string]any{"session_id": "rplain"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if r, res := ckptCall(t, cs, "restore_session", "rplain"); res.IsError || len(r.Saved) != 4 {
		t.Fatalf("restore: %s %+v", testenv.Text(res), r)
	}
	check := "cat(f(x + get('we\"ird\\\\name') + get('caf\\u00e9')), '\\n')"
	if got := execIn(t, cs, "r", "rplain", check); strings.TrimSpace(got.Stdout) != "460" {
		t.Fatalf("after restore: %q", got.Stdout)
	}

	// A connection cannot be saved: listed as skipped, the rest restored.
	execIn(t, cs, "r", "rconn", "y <- 7\ncon <- file('c.txt', 'w')")
	o, res = ckptCall(t, cs, "checkpoint_session", "rconn")
	if res.IsError || !strings.Contains(o.Skipped["con"], "connection") || !slices.Equal(o.Saved, []string{"y"}) {
		t.Fatalf("checkpoint with a connection: %s %+v", testenv.Text(res), o)
	}
	if r, res := ckptCall(t, cs, "restore_session", "rconn"); res.IsError || !strings.Contains(r.Notice, "con (") {
		t.Fatalf("restore: %s %+v", testenv.Text(res), r)
	}
	if got := execIn(t, cs, "r", "rconn", "cat(y, exists('con'), '\\n')"); strings.TrimSpace(got.Stdout) != "7 FALSE" {
		t.Fatalf("after restore: %q", got.Stdout)
	}

	// The shutdown checkpoint of an R session with nothing to skip, and
	// the session back after a restart.
	execIn(t, cs, "r", "rplain", "late <- 5")
	if err := cs.Close(); err != nil {
		t.Fatalf("the server did not exit cleanly: %v", err)
	}
	var shut []audit.Entry
	for _, e := range checkpointEvents(t, filepath.Join(base, "audit.log")) {
		if e.Details["reason"] == "server shutdown" {
			shut = append(shut, e)
		}
	}
	for _, e := range shut {
		if !e.Success {
			t.Errorf("shutdown checkpoint of %v failed: %s", e.Details["session"], e.Error)
		}
	}
	s2 := testenv.StartServerAt(t, base, "")
	if got := execIn(t, s2.Session, "r", "rplain", "cat(late + x, '\\n')"); strings.TrimSpace(got.Stdout) != "46" || !strings.Contains(strings.Join(got.Notices, " "), "restored") {
		t.Fatalf("the R session after a restart: %q %v", got.Stdout, got.Notices)
	}
}

// The defect: a value whose pickling printed a __FORGE_CKPT__ line made
// list_sessions show a checkpoint "created 2099-01-01" that never expired.
// The report is now the one line with the save's nonce, and times come
// from the core: the forged line changes nothing. R the same, with an
// active binding that prints the line when the save reads it.
func TestCheckpointForgedMarker(t *testing.T) {
	testenv.Parallel(t)
	p := testenv.NewInProcess(t, nil)
	cs := p.Connect(t)
	forged := `__FORGE_CKPT__{"saved":["__forged__"],"skipped":{},"created":"2099-01-01T00:00:00Z","session_id":"other","bytes":1}`
	for _, c := range []struct{ lang, sid, setup, check string }{
		{"python", "pyforge", "x = 41\nclass Forger:\n    def __getstate__(self):\n        print('" + forged + "')\n        return {'v': 1}\n    def __setstate__(self, st):\n        self.v = st['v']\nforger = Forger()",
			"print(x + forger.v)"},
		{"r", "rforge", "x <- 41\nmakeActiveBinding('forger', function() { cat('" + strings.ReplaceAll(forged, `"`, `\"`) + "\\n'); 1 }, globalenv())",
			"cat(x + forger, '\\n')"},
	} {
		t.Run(c.lang, func(t *testing.T) {
			execIn(t, cs, c.lang, c.sid, c.setup)
			before := time.Now()
			o, res := ckptCall(t, cs, "checkpoint_session", c.sid)
			after := time.Now()
			if res.IsError {
				t.Fatalf("checkpoint: %s", testenv.Text(res))
			}
			sane := func(what string, got mcpserverCheckpoint) {
				t.Helper()
				if got.SessionID != c.sid || got.Created.Before(before.Add(-time.Second)) || got.Created.After(after.Add(time.Second)) ||
					slices.Contains(got.Saved, "__forged__") || !slices.Contains(got.Saved, "x") || !slices.Contains(got.Saved, "forger") || got.Bytes <= 1 {
					t.Fatalf("%s: %+v, want session %s made between %s and %s with x and forger saved", what, got, c.sid, before.Format(time.RFC3339), after.Format(time.RFC3339))
				}
			}
			sane("checkpoint_session", mcpserverCheckpoint{o.SessionID, o.Created, o.Saved, o.Bytes})
			var listed bool
			for _, ck := range listSessions(t, cs).Checkpoints {
				if ck.SessionID == c.sid {
					listed = true
					sane("list_sessions", mcpserverCheckpoint{ck.SessionID, ck.Created, ck.Saved, ck.Bytes})
				}
			}
			if !listed {
				t.Fatal("the checkpoint is not listed")
			}
			if res := testenv.Call(t, cs, "restart_session", map[string]any{"session_id": c.sid}, nil); res.IsError {
				t.Fatal(testenv.Text(res))
			}
			if r, res := ckptCall(t, cs, "restore_session", c.sid); res.IsError || slices.Contains(r.Saved, "__forged__") {
				t.Fatalf("restore: %s %+v", testenv.Text(res), r)
			}
			if got := execIn(t, cs, c.lang, c.sid, c.check); strings.TrimSpace(got.Stdout) != "42" {
				t.Fatalf("after restore: %q", got.Stdout)
			}
		})
	}
}

type mcpserverCheckpoint struct {
	SessionID string
	Created   time.Time
	Saved     []string
	Bytes     int64
}
