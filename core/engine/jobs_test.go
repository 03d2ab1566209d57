package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/jobs"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// gate is a backend run that writes a line, then waits to be released,
// interrupted or cancelled.
type gate struct {
	release, interrupted chan struct{}
	started              chan struct{}
	once                 sync.Once
}

func newGate() *gate {
	return &gate{release: make(chan struct{}), interrupted: make(chan struct{}), started: make(chan struct{}, 8)}
}

func (g *gate) interrupt(string) { g.once.Do(func() { close(g.interrupted) }) }

func (g *gate) run(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	g.started <- struct{}{}
	if emit != nil {
		emit(backend.StreamEvent{Name: host.Stdout, Text: "step 1\n"})
	}
	select {
	case <-g.release:
		return backend.ExecuteResult{Success: true, Stdout: "step 1\nstep 2\n", StdoutBytes: 14, ResultRepr: "42"}, nil
	case <-g.interrupted:
		return backend.ExecuteResult{Stdout: "step 1\n", Error: &backend.ExecError{Name: "KeyboardInterrupt"}}, nil
	case <-ctx.Done():
		return backend.ExecuteResult{}, ctx.Err()
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
	old := cancelGrace
	cancelGrace = 300 * time.Millisecond
	t.Cleanup(func() { cancelGrace = old })

	t.Run("stateless job runs past its call and keeps its result", func(t *testing.T) {
		r := newRig(t, nil, nil)
		g := newGate()
		r.snake.Run = g.run
		ctx, cancel := context.WithCancel(context.Background())
		rec, err := r.e.StartJob(ctx, Request{Language: "python", Code: "long()", Client: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		cancel() // the call answered: the job goes on
		<-g.started
		if got, _ := r.e.Job("c1", rec.ID, "t"); got.State != jobs.Running {
			t.Fatalf("state %s, want running", got.State)
		}
		close(g.release)
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
		if _, err := r.exec(t, Request{Language: "python", SessionID: "a", Code: "x = 1"}); err != nil {
			t.Fatal(err)
		}
		g := newGate()
		r.kernel.Run, r.kernel.OnInterrupt = g.run, g.interrupt
		rec, err := r.e.StartJob(context.Background(), Request{Language: "python", SessionID: "a", Code: "train()", Client: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		<-g.started
		_, err = r.exec(t, Request{Language: "python", SessionID: "a", Code: "x"})
		if rule := refusedBy(t, err); rule != RuleSessionJob || !strings.Contains(err.Error(), rec.ID) {
			t.Fatalf("second call: rule %s: %v", rule, err)
		}
		if _, err := r.e.StartJob(context.Background(), Request{Language: "python", SessionID: "a", Code: "y", Client: "c1"}); refusedBy(t, err) != RuleSessionJob {
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
		r.kernel.Run = nil
		if _, err := r.exec(t, Request{Language: "python", SessionID: "a", Code: "x"}); err != nil {
			t.Fatalf("the session is not free after its job: %v", err)
		}
		v, _ := r.e.View(context.Background(), "c1", "a", false)
		if v.State != "idle" || v.Job != "" {
			t.Fatalf("session %s, job %q", v.State, v.Job)
		}
	})

	t.Run("a job may run past a call's max_timeout, not past the background maximum", func(t *testing.T) {
		r := newRig(t, func(c *config.Config) { c.Execution.MaxTimeout, c.Execution.MaxBackgroundTimeout = 60, 600 }, nil)
		if _, err := r.exec(t, Request{Language: "python", Timeout: 120}); refusedBy(t, err) != RuleTimeoutMax {
			t.Fatalf("a call over max_timeout: %v", err)
		}
		var got time.Duration
		r.snake.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
			got = req.Timeout
			return backend.ExecuteResult{Success: true}, nil
		}
		rec, err := r.e.StartJob(context.Background(), Request{Language: "python", Code: "1", Client: "c1", Timeout: 120})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, r, "c1", rec.ID, jobs.Done)
		if got != 120*time.Second {
			t.Fatalf("the backend got timeout %s", got)
		}
		if _, err := r.e.StartJob(context.Background(), Request{Language: "python", Code: "1", Client: "c1", Timeout: 601}); refusedBy(t, err) != RuleTimeoutMax {
			t.Fatalf("a job over max_background_timeout: %v", err)
		}
	})

	t.Run("jobs.max_per_client bounds running jobs, finished ones make room", func(t *testing.T) {
		r := newRig(t, func(c *config.Config) { c.Jobs.MaxPerClient = 2 }, nil)
		g := newGate()
		r.snake.Run = g.run
		a, err := r.e.StartJob(context.Background(), Request{Language: "python", Code: "1", Client: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.e.StartJob(context.Background(), Request{Language: "python", Code: "2", Client: "c1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.e.StartJob(context.Background(), Request{Language: "python", Code: "3", Client: "c1"}); refusedBy(t, err) != jobs.RuleJobsMax {
			t.Fatalf("third job: %v", err)
		}
		other, err := r.e.StartJob(context.Background(), Request{Language: "python", Code: "3", Client: "c2"})
		if err != nil {
			t.Fatalf("another client is bounded by c1's jobs: %v", err)
		}
		close(g.release)
		waitState(t, r, "c1", a.ID, jobs.Done)
		for _, j := range r.e.Jobs("c1") {
			waitState(t, r, "c1", j.ID, jobs.Done)
		}
		d, err := r.e.StartJob(context.Background(), Request{Language: "python", Code: "4", Client: "c1"})
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
		g := newGate()
		r.snake.Run = g.run
		rec, err := r.e.StartJob(context.Background(), Request{Language: "python", Code: "1", Client: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		<-g.started
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
