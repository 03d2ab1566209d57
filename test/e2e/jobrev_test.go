package e2e

import (
	"context"
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
	} {
		res, took, err := callWithin(t, s.Session, 10*time.Second, c.tool, c.args)
		switch {
		case err != nil:
			t.Errorf("%s in a session a job holds: no answer after %s (%v): it waits for the job's whole run instead of refusing with session-job", c.tool, took.Round(time.Second), err)
		case !res.IsError:
			t.Errorf("%s in a session a job holds was not refused", c.tool)
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

// The job list resource can be subscribed to; a subscription accepted must
// be heard from when a job of the list changes.
func TestJobRevJobListSubscription(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "alice")
	s := testenv.StartHTTP(t, tenants)
	got := make(chan string, 100)
	cs, err := s.Connect(t, keys["alice"], &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
		got <- r.Params.URI
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "mcp://forge/jobs"}); err != nil {
		t.Skipf("subscribe refused on this transport: %v", err)
	}
	var j revJob
	testenv.Call(t, cs, "execute_python", map[string]any{"code": "print(1)", "background": true}, &j)
	testenv.Call(t, cs, "wait_job", map[string]any{"job_id": j.JobID, "timeout": 60}, &j)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case u := <-got:
			if u == "mcp://forge/jobs" {
				return
			}
		case <-deadline:
			t.Fatalf("subscribed to mcp://forge/jobs, started and finished job %s (%s): no notifications/resources/updated for the list (ResourceUpdated is only sent for mcp://forge/jobs/{id})", j.JobID, j.State)
		}
	}
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

// A job printing 30 MB in 100-byte lines must not cost the server far
// more than the same run in the foreground (the job keeps a tail of each
// stream; see core/jobs TestJobRevTailIsLinear).
func TestJobRevBigOutput(t *testing.T) {
	s := testenv.StartServer(t, "")
	code := "import sys\nline = 'x' * 99 + '\\n'\nfor i in range(300000):\n    sys.stdout.write(line)\n"
	start := time.Now()
	testenv.Call(t, s.Session, "execute_python", map[string]any{"code": code, "timeout": 280}, nil)
	fg := time.Since(start)
	var j revJob
	start = time.Now()
	testenv.Call(t, s.Session, "execute_python", map[string]any{"code": code, "background": true, "timeout": 280}, &j)
	testenv.Call(t, s.Session, "wait_job", map[string]any{"job_id": j.JobID, "timeout": 290}, &j)
	bg := time.Since(start)
	t.Logf("30 MB of output: foreground %s, background %s (%s)", fg.Round(100*time.Millisecond), bg.Round(100*time.Millisecond), j.State)
	if bg > 3*fg+5*time.Second {
		t.Fatalf("the job took %s against %s in the foreground", bg, fg)
	}
}
