package checkpoints

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/enginerig"
	"github.com/mcp-forge/mcp-forge/core/engine/enginetest"
	"github.com/mcp-forge/mcp-forge/core/jobs"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// What a fork refuses before it touches any kernel.
func TestForkRefusals(t *testing.T) {
	r := newRig(t, nil, nil)
	ctx := context.Background()
	if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.ForkSession(ctx, "c1", "s", "f"); refusedBy(t, err) != checkpoint.RuleCheckpointLanguage {
		t.Fatalf("fork of a backend without checkpoint code: %v", err)
	}
	r.Kernel.Caps.Checkpoint = &backend.Checkpoint{Save: "save", Load: "load"}
	r.PM.Add("kernel", r.Kernel) // statuses are read at Add
	if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "other"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, client, from, to, rule string
	}{
		{"another client's session", "c2", "s", "f", session.RuleSessionNotFound},
		{"an unknown session", "c1", "nope", "f", session.RuleSessionNotFound},
		{"an invalid new id", "c1", "s", "../x", session.RuleSessionID},
		{"into a live session", "c1", "s", "other", RuleForkTarget},
		{"into itself", "c1", "s", "s", RuleForkTarget},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := r.e.ForkSession(ctx, c.client, c.from, c.to); refusedBy(t, err) != c.rule {
				t.Fatalf("want %s, got %v", c.rule, err)
			}
		})
	}
	// The refusal of a fork into a taken id names the source session in
	// the audit log (as itself: "source" is a key the log hashes as code).
	var named bool
	for _, a := range r.Audit() {
		if a.Details["rule"] == RuleForkTarget && a.Details["tool"] == "fork_session" {
			named = true
			if a.Details["source_session"] != "s" {
				t.Errorf("a fork-target refusal without the source session: %v", a.Details)
			}
		}
	}
	if !named {
		t.Error("no fork-target refusal in the audit log")
	}
	fakeCheckpoint(t, r.e, "c1", "kept", "python", time.Now())
	if _, err := r.e.ForkSession(ctx, "c1", "s", "kept"); refusedBy(t, err) != RuleForkTarget {
		t.Fatalf("a fork over a checkpoint: %v", err)
	}
	if got := forkID(strings.Repeat("a", 128)); len(got) > 128 || session.CheckID(got) != nil || !strings.Contains(got, "-fork-") {
		t.Fatalf("generated fork id %q", got)
	}
}

// A fork of a busy session is refused at once (checkpoint-state), before
// it is admitted: it does not wait, holding a session slot and out of its
// caller's reach, for a run that may last execution.max_timeout.
func TestForkOfBusySessionRefused(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	r := newRig(t, nil, func(r *enginerig.Rig) {
		r.Kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
			if req.Code == "long" {
				close(started)
				<-release
			}
			return backend.ExecuteResult{Success: true}, nil
		}
	})
	r.Kernel.Caps.Checkpoint = &backend.Checkpoint{Save: "save", Load: "load"}
	r.PM.Add("kernel", r.Kernel) // statuses are read at Add
	if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.e.Execute(context.Background(), engine.Request{Language: "python", SessionID: "s", Client: "c1", Code: "long"}, nil)
		done <- err
	}()
	<-started
	forked := make(chan error, 1)
	go func() {
		_, err := r.e.ForkSession(context.Background(), "c1", "s", "f")
		forked <- err
	}()
	select {
	case err := <-forked:
		if refusedBy(t, err) != checkpoint.RuleCheckpointState || !strings.Contains(err.Error(), "busy") {
			t.Errorf("fork of a busy session: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the fork of a busy session waited for its run")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r.e.sessions.Live("c1", "f") {
		t.Error("a refused fork left its session")
	}
}

// A fork of a session a background job holds is refused with session-job,
// naming the job (docs/jobs.md), as execute and checkpoint_session are: the
// job's run makes the session busy, and a checkpoint-state "busy" refusal
// would not say which job to wait for or cancel.
func TestForkOfJobSessionRefusedWithJob(t *testing.T) {
	r := newRig(t, nil, nil)
	r.Kernel.Caps.Checkpoint = &backend.Checkpoint{Save: "save", Load: "load"}
	r.PM.Add("kernel", r.Kernel) // statuses are read at Add
	if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	g := enginetest.NewGate()
	r.Kernel.Run, r.Kernel.OnInterrupt = g.Run, g.Interrupt
	rec, err := r.e.StartJob(context.Background(), engine.Request{Language: "python", SessionID: "s", Code: "train()", Client: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.Started
	_, err = r.e.ForkSession(context.Background(), "c1", "s", "f")
	if rule := refusedBy(t, err); rule != engine.RuleSessionJob || !strings.Contains(err.Error(), rec.ID) {
		t.Fatalf("fork of a session job %s holds: rule %s: %v", rec.ID, rule, err)
	}
	if r.e.sessions.Live("c1", "f") {
		t.Error("a refused fork left its session")
	}
	close(g.Release)
	if done, err := r.e.WaitJob(context.Background(), "c1", rec.ID, 5); err != nil || done.State != jobs.Done {
		t.Fatalf("job %s is %s (%s), want %s: %v", rec.ID, done.State, done.Reason, jobs.Done, err)
	}
}
