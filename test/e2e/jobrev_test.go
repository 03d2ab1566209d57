package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Hostile review of background jobs (issue 25): what an outside client can
// do to a session a job holds, and whether the job's limits hold.

type revJob struct {
	JobID  string `json:"job_id"`
	State  string `json:"state"`
	Reason string `json:"reason"`
	Result *struct {
		Success bool   `json:"success"`
		Stdout  string `json:"stdout"`
	} `json:"result"`
}

// callWithin calls a tool and reports whether it answered within d.
func callWithin(t *testing.T, cs *mcp.ClientSession, d time.Duration, tool string, args map[string]any) (*mcp.CallToolResult, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	return res, time.Since(start), err
}

// A job holds its session: every other call in it is refused (rule
// session-job) rather than waiting behind a run of up to hours. The
// session tools that take the operation lock directly must refuse too,
// not hang for the job's whole run.
func TestJobRevSessionToolsDuringJob(t *testing.T) {
	s := testenv.StartServer(t, "")
	testenv.Call(t, s.Session, "execute_python", map[string]any{"code": "x = 1", "session_id": "held"}, nil)
	var j revJob
	testenv.Call(t, s.Session, "execute_python", map[string]any{"code": "import time\ntime.sleep(40)", "session_id": "held", "background": true}, &j)
	if j.JobID == "" {
		t.Fatal("no job id")
	}
	time.Sleep(2 * time.Second)
	note := "n"
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"execute_python", map[string]any{"code": "1", "session_id": "held"}},
		{"document_state", map[string]any{"session_id": "held", "note": note}},
		{"checkpoint_session", map[string]any{"session_id": "held"}},
		{"fork_session", map[string]any{"session_id": "held"}},
	} {
		res, took, err := callWithin(t, s.Session, 10*time.Second, c.tool, c.args)
		switch {
		case err != nil:
			t.Errorf("%s in a session a job holds: no answer after %s (%v): it waits for the job's whole run instead of refusing with session-job", c.tool, took.Round(time.Second), err)
		case !res.IsError:
			t.Errorf("%s in a session a job holds was not refused", c.tool)
		case !strings.Contains(testenv.Text(res), "running background job "+j.JobID):
			// session-job's refusal names the job to wait for or cancel; a
			// "busy" refusal (checkpoint-state) does not.
			t.Errorf("%s in a session a job holds: refused without naming job %s (rule session-job): %s", c.tool, j.JobID, testenv.Text(res))
		default:
			t.Logf("%s refused in %s", c.tool, took.Round(time.Millisecond))
		}
	}
	testenv.Call(t, s.Session, "cancel_job", map[string]any{"job_id": j.JobID}, nil)
}

// A job's timeout is enforced: timeout 5 stops the run at ~5 s.
func TestJobRevTimeoutEnforced(t *testing.T) {
	s := testenv.StartServer(t, "")
	var j revJob
	start := time.Now()
	testenv.Call(t, s.Session, "execute_python", map[string]any{"code": "import time\ntime.sleep(60)", "background": true, "timeout": 5}, &j)
	testenv.Call(t, s.Session, "wait_job", map[string]any{"job_id": j.JobID, "timeout": 40}, &j)
	took := time.Since(start)
	if j.State == "running" || j.State == "queued" || took > 15*time.Second {
		t.Fatalf("job with timeout 5: %s after %s", j.State, took)
	}
	if j.State == "done" {
		t.Fatalf("a job stopped by its timeout is done: %+v", j)
	}
	t.Logf("timeout 5: %s after %s: %s", j.State, took.Round(100*time.Millisecond), j.Reason)
}

// A background job's result is what the same code returns in the foreground.
func TestJobRevResultEqualsForeground(t *testing.T) {
	s := testenv.StartServer(t, "")
	code := "import sys\nprint('out')\nprint('err', file=sys.stderr)\n1/0"
	var fg struct {
		Success bool   `json:"success"`
		Stdout  string `json:"stdout"`
		Stderr  string `json:"stderr"`
	}
	fres := testenv.Call(t, s.Session, "execute_python", map[string]any{"code": code}, &fg)
	var j revJob
	testenv.Call(t, s.Session, "execute_python", map[string]any{"code": code, "background": true}, &j)
	wres := testenv.Call(t, s.Session, "wait_job", map[string]any{"job_id": j.JobID, "timeout": 60}, &j)
	if j.Result == nil || j.Result.Stdout != fg.Stdout || j.Result.Success != fg.Success || wres.IsError != fres.IsError || j.State != "failed" {
		t.Fatalf("foreground %+v isError %v; job %+v result %+v isError %v", fg, fres.IsError, j, j.Result, wres.IsError)
	}
	if !strings.Contains(j.Reason, "ZeroDivision") {
		t.Logf("job reason: %q", j.Reason)
	}
}

// A session job printing 600 KB in 100-byte flushed lines (each its own
// stream event) must not cost the server far
// more than the same run in the foreground (the job keeps a tail of each
// stream; see core/jobs TestJobRevTailIsLinear).
func TestJobRevBigOutput(t *testing.T) {
	s := testenv.StartServer(t, "")
	code := "for i in range(6000):\n    print('x' * 99, flush=True)\n"
	start := time.Now()
	testenv.Call(t, s.Session, "execute_python", map[string]any{"code": code, "timeout": 280, "session_id": "fg"}, nil)
	fg := time.Since(start)
	var j revJob
	start = time.Now()
	testenv.Call(t, s.Session, "execute_python", map[string]any{"code": code, "background": true, "timeout": 280, "session_id": "bg"}, &j)
	testenv.Call(t, s.Session, "wait_job", map[string]any{"job_id": j.JobID, "timeout": 290}, &j)
	bg := time.Since(start)
	t.Logf("600 KB of output: foreground %s, background %s (%s)", fg.Round(100*time.Millisecond), bg.Round(100*time.Millisecond), j.State)
	if bg > 3*fg+5*time.Second {
		t.Fatalf("the job took %s against %s in the foreground", bg, fg)
	}
}

// Another tenant who knows (or guesses) a job id gets nothing of it: not
// its state, not a cancel, not a read; hostile ids and URIs are refused
// without touching anything. (Subscriptions are refused over this HTTP
// transport, which is stateless.)
func TestJobRevOwnership(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice", "bob")
	s := testenv.StartHTTP(t, tenants)
	alice, bob := s.MustConnect(t, keys["alice"]), s.MustConnect(t, keys["bob"])
	var j revJob
	testenv.Call(t, alice, "execute_python", map[string]any{"code": "import time\ntime.sleep(60)", "background": true}, &j)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range []string{j.JobID, "../../state/jobs/" + j.JobID, strings.Repeat("é", 1<<16), "job-" + strings.Repeat("0", 16)} {
		for _, tool := range []string{"wait_job", "cancel_job"} {
			res, err := bob.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"job_id": id, "timeout": 1}})
			if err != nil || !res.IsError {
				t.Errorf("bob's %s of %.40q: %v %+v", tool, id, err, res)
			}
		}
	}
	for _, uri := range []string{"mcp://forge/jobs/" + j.JobID, "mcp://forge/jobs/../jobs/" + j.JobID, "mcp://forge/jobs/%6aob-" + j.JobID[4:], "mcp://forge/jobs/" + j.JobID + "/"} {
		if r, err := bob.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("bob reads %s: %+v", uri, r.Contents[0].Text)
		}
	}
	var after revJob
	testenv.Call(t, alice, "wait_job", map[string]any{"job_id": j.JobID, "timeout": 1}, &after)
	if after.State != "running" && after.State != "queued" {
		t.Fatalf("alice's job after bob's attempts: %+v", after)
	}
	testenv.Call(t, alice, "cancel_job", map[string]any{"job_id": j.JobID}, nil)
}

// A graceful stop with a session job running: the server exits promptly,
// the job is recorded lost, and checkpoint_on_shutdown still saves the
// session (its state before the job) for the client after the restart.
func TestJobRevShutdownWithSessionJob(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice")
	base := testenv.BaseDir(t)
	cfg := tenants + "[sessions]\ncheckpoint_on_shutdown = true\n"
	s := testenv.StartHTTPAt(t, base, cfg)
	cs := s.MustConnect(t, keys["alice"])
	testenv.Call(t, cs, "execute_python", map[string]any{"code": "x = 42", "session_id": "ck"}, nil)
	var j revJob
	testenv.Call(t, cs, "execute_python", map[string]any{"code": "import time\nprint('begun', flush=True)\ntime.sleep(600)", "session_id": "ck", "background": true}, &j)
	testenv.WaitFor(t, "the job to run", time.Minute, func() bool {
		var v revJob
		testenv.Call(t, cs, "wait_job", map[string]any{"job_id": j.JobID, "timeout": 1}, &v)
		return v.State == "running"
	})
	time.Sleep(2 * time.Second)
	start := time.Now()
	_ = s.Stop(t)
	took := time.Since(start)
	t.Logf("SIGTERM with a session job running: exited after %s", took.Round(100*time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("shutdown took %s with a session job running", took)
	}
	s2 := testenv.StartHTTPAt(t, base, cfg)
	cs2 := s2.MustConnect(t, keys["alice"])
	var after revJob
	testenv.Call(t, cs2, "wait_job", map[string]any{"job_id": j.JobID, "timeout": 1}, &after)
	if after.State != "lost" {
		t.Errorf("the job after a graceful stop: %+v", after)
	}
	var out struct {
		Stdout string `json:"stdout"`
	}
	testenv.Call(t, cs2, "execute_python", map[string]any{"code": "print(x)", "session_id": "ck"}, &out)
	if strings.TrimSpace(out.Stdout) != "42" {
		t.Errorf("session ck after the restart (checkpoint_on_shutdown): stdout %q, want 42", out.Stdout)
	}
}

// destroy_session and restart_session while a job runs in the session:
// the job must end saying what happened to it, not as the code's own
// failure.
func TestJobRevSessionOpsEndJob(t *testing.T) {
	s := testenv.StartServer(t, "")
	for _, tool := range []string{"restart_session", "destroy_session"} {
		sid := "ops-" + strings.TrimSuffix(tool, "_session")
		testenv.Call(t, s.Session, "execute_python", map[string]any{"code": "x = 1", "session_id": sid}, nil)
		var j revJob
		testenv.Call(t, s.Session, "execute_python", map[string]any{"code": "import time\ntime.sleep(60)", "session_id": sid, "background": true}, &j)
		time.Sleep(3 * time.Second)
		res, took, err := callWithin(t, s.Session, 30*time.Second, tool, map[string]any{"session_id": sid})
		if err != nil {
			t.Errorf("%s with a job: %v after %s", tool, err, took)
			continue
		}
		var after revJob
		testenv.Call(t, s.Session, "wait_job", map[string]any{"job_id": j.JobID, "timeout": 20}, &after)
		t.Logf("%s (isError %v, %s) -> job %s: %q", tool, res.IsError, took.Round(100*time.Millisecond), after.State, after.Reason)
		if !res.IsError && (after.State == "failed" && !strings.Contains(after.Reason, tool)) {
			t.Errorf("%s ended the session's job as %s with reason %q: it does not say %s stopped it (a job holds its session: refuse, or end it cancelled naming the tool)", tool, after.State, after.Reason, tool)
		}
	}
}

// mcp://forge/jobs is advertised and its subscription accepted: a job of
// the list starting and ending must be heard of there, as the job's own
// URI is (the control).
func TestJobRevSubscribeStdio(t *testing.T) {
	testenv.Require(t)
	base := testenv.BaseDir(t)
	cmd := exec.Command(testenv.Binary(t), "serve")
	cmd.Env = append(append(os.Environ(), "FORGE_VOLUMES_BASE_PATH="+base, "FORGE_SECURITY_AUDIT_LOG="+filepath.Join(base, "audit.log")), testenv.RuntimeEnv(t)...)
	got := make(chan string, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "jobrev", Version: "1"}, &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
		got <- r.Params.URI
	}}).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	t.Logf("protocol %s", cs.InitializeResult().ProtocolVersion)
	var j revJob
	testenv.Call(t, cs, "execute_python", map[string]any{"code": "import time\ntime.sleep(3)\nprint(1)", "background": true}, &j)
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "mcp://forge/jobs/" + j.JobID}); err != nil {
		t.Fatal(err)
	}
	_ = cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "mcp://forge/jobs"})
	testenv.Call(t, cs, "wait_job", map[string]any{"job_id": j.JobID, "timeout": 60}, &j)
	time.Sleep(2 * time.Second)
	heard := map[string]bool{}
	for len(got) > 0 {
		heard[<-got] = true
	}
	t.Logf("heard %v", heard)
	if !heard["mcp://forge/jobs/"+j.JobID] {
		t.Errorf("stdio: no notification for the subscribed job")
	}
	if !heard["mcp://forge/jobs"] {
		t.Errorf("stdio: subscribed to mcp://forge/jobs, a job of the list started and ended: no notification for the list")
	}
}

// A job that creates its session, and whose kernel then dies: the job ends
// failed and the session is free again for the next call.
func TestJobRevJobKernelDies(t *testing.T) {
	s := testenv.StartServer(t, "")
	var j revJob
	testenv.Call(t, s.Session, "execute_python", map[string]any{"code": "import os, time\ntime.sleep(2)\nos._exit(3)", "session_id": "dies", "background": true}, &j)
	wres := testenv.Call(t, s.Session, "wait_job", map[string]any{"job_id": j.JobID, "timeout": 60}, &j)
	t.Logf("job %s (isError %v): %q", j.State, wres.IsError, j.Reason)
	if j.State != "failed" || !wres.IsError {
		t.Errorf("a job whose kernel died: %+v isError %v", j, wres.IsError)
	}
	var out struct {
		Stdout string `json:"stdout"`
	}
	res := testenv.Call(t, s.Session, "execute_python", map[string]any{"code": "print('alive')", "session_id": "dies"}, &out)
	if res.IsError || strings.TrimSpace(out.Stdout) != "alive" {
		t.Errorf("the session after its job's kernel died: isError %v stdout %q %+v", res.IsError, out.Stdout, res.Content)
	}
}
