package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
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
