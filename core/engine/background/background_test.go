package background

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/cancelled"
	"github.com/mcp-forge/mcp-forge/core/engine/enginerig"
	"github.com/mcp-forge/mcp-forge/core/engine/enginetest"
	"github.com/mcp-forge/mcp-forge/core/engine/limits"
	"github.com/mcp-forge/mcp-forge/core/jobs"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// rig is an engine with its background jobs, e as the MCP layer sees them.
type rig struct {
	*enginerig.Rig
	e struct {
		*engine.Engine
		*Runner
	}
}

func newRig(t *testing.T, mutate func(*config.Config), plugins func(*enginerig.Rig)) *rig {
	t.Helper()
	r := &rig{Rig: enginerig.New(t, mutate, plugins)}
	j, err := New(r.Cfg, r.E, r.Rec)
	if err != nil {
		t.Fatal(err)
	}
	r.E.SetJobs(j)
	r.e.Engine, r.e.Runner = r.E, j
	return r
}

var refusedBy = enginerig.RefusedBy

// docs/audit.md lists the events of jobs.
func TestJobEventsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "audit.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []string{EventJobLost, EventJobCancel} {
		if !strings.Contains(string(doc), "`"+ev+"`") {
			t.Errorf("docs/audit.md does not list %s", ev)
		}
	}
}

func waitState(t *testing.T, r *rig, client, id string, want jobs.State) jobs.Record {
	t.Helper()
	rec, err := r.e.WaitJob(context.Background(), client, id, 5)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != want {
		t.Fatalf("job %s is %s (%s), want %s", id, rec.State, rec.Reason, want)
	}
	return rec
}

func TestBackgroundJobs(t *testing.T) {
	old := cancelled.Grace
	cancelled.Grace = 300 * time.Millisecond
	t.Cleanup(func() { cancelled.Grace = old })

	t.Run("stateless job runs past its call and keeps its result", func(t *testing.T) {
		r := newRig(t, nil, nil)
		g := enginetest.NewGate()
		r.Snake.Run = g.Run
		ctx, cancel := context.WithCancel(context.Background())
		rec, err := r.e.StartJob(ctx, engine.Request{Language: "python", Code: "long()", Client: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		cancel() // the call answered: the job goes on
		<-g.Started
		if got, _ := r.e.Job("c1", rec.ID, "t"); got.State != jobs.Running {
			t.Fatalf("state %s, want running", got.State)
		}
		close(g.Release)
		done := waitState(t, r, "c1", rec.ID, jobs.Done)
		res, ok := JobResult(done)
		if !ok || res.ResultRepr != "42" || !res.Success {
			t.Fatalf("result %+v (ok %v)", res, ok)
		}
		if _, err := r.e.Job("c2", rec.ID, "t"); refusedBy(t, err) != jobs.RuleJobNotFound {
			t.Fatalf("another client sees the job: %v", err)
		}
		if n := len(r.e.Jobs("c2")); n != 0 {
			t.Fatalf("another client lists %d jobs", n)
		}
	})

	t.Run("a session job holds its session; cancel keeps its state", func(t *testing.T) {
		r := newRig(t, nil, nil)
		if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "a", Code: "x = 1"}); err != nil {
			t.Fatal(err)
		}
		g := enginetest.NewGate()
		r.Kernel.Run, r.Kernel.OnInterrupt = g.Run, g.Interrupt
		rec, err := r.e.StartJob(context.Background(), engine.Request{Language: "python", SessionID: "a", Code: "train()", Client: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		<-g.Started
		_, err = r.Exec(t, engine.Request{Language: "python", SessionID: "a", Code: "x"})
		if rule := refusedBy(t, err); rule != engine.RuleSessionJob || !strings.Contains(err.Error(), rec.ID) {
			t.Fatalf("second call: rule %s: %v", rule, err)
		}
		if _, err := r.e.StartJob(context.Background(), engine.Request{Language: "python", SessionID: "a", Code: "y", Client: "c1"}); refusedBy(t, err) != engine.RuleSessionJob {
			t.Fatalf("second job: %v", err)
		}
		got, err := r.e.CancelJob(context.Background(), "c1", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != jobs.Cancelled || !strings.Contains(got.Reason, "cancel_job was called") {
			t.Fatalf("after cancel_job: %s: %s", got.State, got.Reason)
		}
		if got.Stdout != "step 1\n" || got.Progress != 1 {
			t.Fatalf("output tail %q, progress %d", got.Stdout, got.Progress)
		}
		r.Kernel.Run = nil
		if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "a", Code: "x"}); err != nil {
			t.Fatalf("the session is not free after its job: %v", err)
		}
		v, _ := r.e.View(context.Background(), "c1", "a", false)
		if v.State != "idle" || v.Job != "" {
			t.Fatalf("session %s, job %q", v.State, v.Job)
		}
	})

	t.Run("a job may run past a call's max_timeout, not past the background maximum", func(t *testing.T) {
		r := newRig(t, func(c *config.Config) { c.Execution.MaxTimeout, c.Execution.MaxBackgroundTimeout = 60, 600 }, nil)
		if _, err := r.Exec(t, engine.Request{Language: "python", Timeout: 120}); refusedBy(t, err) != limits.RuleTimeoutMax {
			t.Fatalf("a call over max_timeout: %v", err)
		}
		var got time.Duration
		r.Snake.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
			got = req.Timeout
			return backend.ExecuteResult{Success: true}, nil
		}
		rec, err := r.e.StartJob(context.Background(), engine.Request{Language: "python", Code: "1", Client: "c1", Timeout: 120})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, r, "c1", rec.ID, jobs.Done)
		if got != 120*time.Second {
			t.Fatalf("the backend got timeout %s", got)
		}
		if _, err := r.e.StartJob(context.Background(), engine.Request{Language: "python", Code: "1", Client: "c1", Timeout: 601}); refusedBy(t, err) != limits.RuleTimeoutMax {
			t.Fatalf("a job over max_background_timeout: %v", err)
		}
	})

	t.Run("jobs.max_per_client bounds running jobs, finished ones make room", func(t *testing.T) {
		r := newRig(t, func(c *config.Config) { c.Jobs.MaxPerClient = 2 }, nil)
		g := enginetest.NewGate()
		r.Snake.Run = g.Run
		a, err := r.e.StartJob(context.Background(), engine.Request{Language: "python", Code: "1", Client: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.e.StartJob(context.Background(), engine.Request{Language: "python", Code: "2", Client: "c1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.e.StartJob(context.Background(), engine.Request{Language: "python", Code: "3", Client: "c1"}); refusedBy(t, err) != jobs.RuleJobsMax {
			t.Fatalf("third job: %v", err)
		}
		other, err := r.e.StartJob(context.Background(), engine.Request{Language: "python", Code: "3", Client: "c2"})
		if err != nil {
			t.Fatalf("another client is bounded by c1's jobs: %v", err)
		}
		close(g.Release)
		waitState(t, r, "c1", a.ID, jobs.Done)
		for _, j := range r.e.Jobs("c1") {
			waitState(t, r, "c1", j.ID, jobs.Done)
		}
		d, err := r.e.StartJob(context.Background(), engine.Request{Language: "python", Code: "4", Client: "c1"})
		if err != nil {
			t.Fatalf("a finished job did not make room: %v", err)
		}
		waitState(t, r, "c1", d.ID, jobs.Done)
		waitState(t, r, "c2", other.ID, jobs.Done)
		if n := len(r.e.Jobs("c1")); n != 2 {
			t.Fatalf("c1 holds %d jobs, want 2", n)
		}
	})

	t.Run("a job running at shutdown is lost, and said so after the restart", func(t *testing.T) {
		base := t.TempDir()
		at := func(c *config.Config) { c.Volumes.BasePath = base }
		r := newRig(t, at, nil)
		g := enginetest.NewGate()
		r.Snake.Run = g.Run
		rec, err := r.e.StartJob(context.Background(), engine.Request{Language: "python", Code: "1", Client: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		<-g.Started
		r.e.CloseAll(context.Background())
		if got, _ := r.e.Job("c1", rec.ID, "t"); got.State != jobs.Lost {
			t.Fatalf("at shutdown: %s", got.State)
		}
		r2 := newRig(t, at, nil)
		got, err := r2.e.Job("c1", rec.ID, "t")
		if err != nil {
			t.Fatal(err)
		}
		if got.State != jobs.Lost || !strings.Contains(got.Reason, "shut down") {
			t.Fatalf("after restart: %s: %s", got.State, got.Reason)
		}
	})
}
