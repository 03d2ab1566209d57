package cancelled_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/cancelled"
	"github.com/mcp-forge/mcp-forge/core/engine/enginerig"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// A cancelled call is handled as a timeout: the session's code is
// interrupted and the run ends with the kernel's own answer (state kept,
// the session idle at once), a kernel that ignores the interrupt is stopped
// after cancelled.Grace (state lost, said on the next call), a stateless run is
// stopped; each is audited as execution.cancelled with its outcome.
func TestCancelledRuns(t *testing.T) {
	old := cancelled.Grace
	cancelled.Grace = 300 * time.Millisecond
	t.Cleanup(func() { cancelled.Grace = old })
	cases := []struct {
		name        string
		session     bool
		obeys       bool // the code stops on interrupt
		wantOutcome string
		wantState   string // the session's state after the call
		wantErr     bool   // Execute returns an error (nothing to answer)
	}{
		{"session code interrupted, state kept", true, true, "interrupted", "idle", false},
		{"kernel ignoring the interrupt is stopped", true, false, "kernel stopped", "dead", false},
		{"stateless run stopped", false, false, "stopped", "absent", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil, nil)
			req := engine.Request{Language: "python", Code: "while True: pass", Client: "c1"}
			be := r.Snake
			if tc.session {
				req.SessionID, be = "a", r.Kernel
				if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "a", Code: "x = 1"}); err != nil {
					t.Fatal(err)
				}
			}
			stop := make(chan struct{})
			var once sync.Once
			end := func(string) { once.Do(func() { close(stop) }) }
			if tc.obeys {
				r.Kernel.OnInterrupt = end
			}
			r.Kernel.OnClose = end
			started := make(chan struct{})
			be.Run = func(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
				close(started)
				select {
				case <-stop:
					return backend.ExecuteResult{Stdout: "step 1\n", Error: &backend.ExecError{Name: "KeyboardInterrupt"}}, nil
				case <-ctx.Done(): // a stateless backend stops on the call's context
					return backend.ExecuteResult{}, ctx.Err()
				case <-time.After(time.Minute):
					return backend.ExecuteResult{Success: true}, nil
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			type answer struct {
				res engine.Result
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := r.E.Execute(ctx, req, nil)
				done <- answer{res, err}
			}()
			<-started
			cancel()
			var a answer
			select {
			case a = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("a cancelled call did not end")
			}
			if (a.err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", a.err, tc.wantErr)
			}
			if tc.session {
				if a.res.Success || a.res.Error == nil || a.res.Error.Name != cancelled.ErrorName || a.res.ExitCode == 0 || !strings.Contains(a.res.Error.Message, "the client cancelled the call") {
					t.Fatalf("result %+v %+v", a.res, a.res.Error)
				}
				if tc.obeys && (a.res.Stdout != "step 1\n" || !strings.Contains(a.res.Error.Message, "state is kept")) {
					t.Fatalf("the interrupted run's own answer is lost: %+v", a.res)
				}
			}
			if got := r.state(t, "c1", "a"); got != tc.wantState {
				t.Fatalf("session state %s, want %s", got, tc.wantState)
			}
			var stopped, complete *audit.Entry
			for _, e := range r.Audit() {
				switch e.Event {
				case cancelled.Event:
					stopped = &e
				case audit.ExecutionComplete:
					complete = &e
				}
			}
			if stopped == nil || stopped.Details["outcome"] != tc.wantOutcome || stopped.Details["reason"] != "cancelled" || stopped.Details["run_id"] == "" {
				t.Fatalf("execution.cancelled: %+v", stopped)
			}
			if complete == nil || complete.Details["reason"] != "cancelled" || complete.Severity == audit.Error {
				t.Fatalf("execution.complete: %+v", complete)
			}
			if !tc.session {
				return
			}
			// The next call runs in the same session at once: the kept
			// kernel without a restart, or a new one with a notice.
			be.Run = nil
			opens := strings.Count(strings.Join(r.Kernel.Log(), ","), "open a")
			res, err := r.Exec(t, engine.Request{Language: "python", SessionID: "a", Code: "x"})
			if err != nil || !res.Success {
				t.Fatalf("next call: %v %+v", err, res)
			}
			reopened := strings.Count(strings.Join(r.Kernel.Log(), ","), "open a") > opens
			if reopened != (tc.wantState == "dead") || reopened != (len(res.Notices) > 0 && strings.Contains(strings.Join(res.Notices, " "), "restarted")) {
				t.Fatalf("reopened %v, notices %v, events %v", reopened, res.Notices, r.Kernel.Log())
			}
		})
	}
}

type rig struct{ *enginerig.Rig }

func newRig(t *testing.T, mutate func(*config.Config), plugins func(*enginerig.Rig)) *rig {
	t.Helper()
	return &rig{enginerig.New(t, mutate, plugins)}
}

// state is the state of client's session id, "absent" when it has none.
func (r *rig) state(t *testing.T, client, id string) string {
	t.Helper()
	for _, v := range r.E.Sessions(client, false) {
		if v.ID == id {
			return v.State
		}
	}
	return "absent"
}

// docs/audit.md lists the event of a cancelled run.
func TestCancelledEventIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "audit.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "`"+cancelled.Event+"`") {
		t.Errorf("docs/audit.md does not list %s", cancelled.Event)
	}
}
