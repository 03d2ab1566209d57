package httpe2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/procid"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Background jobs over HTTP through the official TypeScript SDK
// (test/node/jobs-http.mjs): a job outlives its client's connection and is
// found again by the same tenant, is invisible to another, and holds its
// tenant's run slot.
func TestHTTPJobsTypeScriptSDK(t *testing.T) {
	testenv.Require(t)
	dir := filepath.Join(testenv.RepoRoot(), "test", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the TypeScript SDK is not installed: run `npm ci` in test/node (make test does)")
	}
	tenants, keys := testenv.TenantKeys(t, "bob", "alice")
	s := testenv.StartHTTP(t, tenants+"max_concurrent_runs = 1\n") // alice's table is the last
	cmd := exec.Command("node", "jobs-http.mjs", s.URL)
	cmd.Env = append(os.Environ(), "ALICE_KEY="+keys["alice"], "BOB_KEY="+keys["bob"])
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok: job=") {
		t.Fatalf("TypeScript client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// A job running when the server is killed is reported lost, with the
// reason, by the next server on the same base path, to its owner only; the
// restart is audited (job.lost).
func TestHTTPJobLostAcrossRestart(t *testing.T) {
	testenv.Require(t)
	tenants, keys := testenv.TenantKeys(t, "alice", "bob")
	base := testenv.BaseDir(t)
	s := testenv.StartHTTPAt(t, base, tenants)
	cs := s.MustConnect(t, keys["alice"])
	var started struct {
		JobID string `json:"job_id"`
	}
	testenv.Call(t, cs, "execute_python", map[string]any{"code": "import time\nprint('begun', flush=True)\ntime.sleep(600)", "background": true}, &started)
	if started.JobID == "" {
		t.Fatal("no job id")
	}
	testenv.WaitFor(t, "the job to run", time.Minute, func() bool {
		var v struct {
			State string `json:"state"`
		}
		testenv.Call(t, cs, "wait_job", map[string]any{"job_id": started.JobID, "timeout": 1}, &v)
		return v.State == "running" // its record says so: it was past its run slot
	})
	cs.Close()
	// The first server's name as every record gives it, read while it lives.
	first := procid.Of(s.Cmd.Process.Pid)
	s.Cmd.Process.Signal(syscall.SIGKILL)
	s.Exited(time.Minute)

	s2 := testenv.StartHTTPAt(t, base, tenants)
	type job struct {
		JobID  string `json:"job_id"`
		State  string `json:"state"`
		Reason string `json:"reason"`
	}
	var list struct {
		Jobs []job `json:"jobs"`
	}
	testenv.Call(t, s2.MustConnect(t, keys["alice"]), "list_jobs", map[string]any{}, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].JobID != started.JobID || list.Jobs[0].State != "lost" || !strings.Contains(list.Jobs[0].Reason, "stopped while the job was running") {
		t.Fatalf("alice's jobs after the restart: %+v", list.Jobs)
	}
	list.Jobs = nil
	testenv.Call(t, s2.MustConnect(t, keys["bob"]), "list_jobs", map[string]any{}, &list)
	if len(list.Jobs) != 0 {
		t.Fatalf("bob sees %+v", list.Jobs)
	}
	b, _ := os.ReadFile(s2.AuditLog)
	var lost []string
	for _, line := range strings.Split(string(b), "\n") {
		var e struct {
			Event   string         `json:"event"`
			Details map[string]any `json:"details"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Event == "job.lost" {
			lost = append(lost, fmt.Sprint(e.Details["server"]))
		}
	}
	// The server is named as containers and workspaces name it, not by a
	// bare pid that a later process may hold.
	if len(lost) != 1 || lost[0] != first {
		t.Fatalf("job.lost lines name servers %q, want one naming %q", lost, first)
	}
}

// MCP Tasks over HTTP through the TypeScript SDK's own task API
// (test/node/tasks.mjs): as over stdio, and a task outlives its client's
// connection (a new one lists it and gets its result), and another tenant
// finds none of it.
func TestHTTPTasksTypeScriptSDK(t *testing.T) {
	testenv.Require(t)
	dir := filepath.Join(testenv.RepoRoot(), "test", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the TypeScript SDK is not installed: run `npm ci` in test/node (make test does)")
	}
	tenants, keys := testenv.TenantKeys(t, "alice", "bob")
	s := testenv.StartHTTP(t, tenants)
	cmd := exec.Command("node", "tasks.mjs", "http", s.URL)
	cmd.Env = append(os.Environ(), "KEY="+keys["alice"], "OTHER_KEY="+keys["bob"])
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok: tasks over http") {
		t.Fatalf("TypeScript client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
