package mcpserver

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine/cancelled"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// A run that writes nothing still sends progress at least every
// execution.progress_interval, stateless or in a session; output counts as
// progress (the next keep-alive is an interval after it); nothing follows
// the answer.
func TestProgressKeepAlive(t *testing.T) {
	cases := []struct {
		name    string
		session bool
		output  bool // the run writes a line after 600 ms
	}{
		{"stateless run", false, false},
		{"session run", true, false},
		{"session run with output", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pm, backends := fixture()
			r := newServer(t, pm, func(c *config.Config) { c.Execution.ProgressInterval = 1 })
			run := func(_ context.Context, _ backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
				if tc.output {
					time.Sleep(600 * time.Millisecond)
					if emit != nil {
						emit(backend.StreamEvent{Name: "stdout", Text: "half way\n"})
					}
				}
				rest := 2500 * time.Millisecond
				if tc.output {
					rest -= 600 * time.Millisecond
				}
				time.Sleep(rest)
				return backend.ExecuteResult{Success: true}, nil
			}
			backends["python"].Run, backends["jupyter"].Run = run, run
			type note struct {
				at  time.Time
				msg string
			}
			var mu sync.Mutex
			var got []note
			cs := r.connect(t, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				got = append(got, note{time.Now(), req.Params.Message})
				mu.Unlock()
			}})
			args := map[string]any{"code": "import time; time.sleep(2.5)"}
			if tc.session {
				args["session_id"] = "k"
			}
			params := &mcp.CallToolParams{Name: "execute_python", Arguments: args}
			params.SetProgressToken("tok")
			start := time.Now()
			if res, err := cs.CallTool(context.Background(), params); err != nil || res.IsError {
				t.Fatal(err, res)
			}
			answered := time.Now()
			time.Sleep(1200 * time.Millisecond) // a keep-alive after the answer would arrive now
			mu.Lock()
			defer mu.Unlock()
			prev := start
			var alive int
			for _, n := range got {
				if gap := n.at.Sub(prev); gap > 1300*time.Millisecond {
					t.Errorf("%s without progress before %q", gap, n.msg)
				}
				if n.at.After(answered) {
					t.Errorf("progress %q after the answer", n.msg)
				}
				if strings.HasPrefix(n.msg, "running: ") {
					alive++
				}
				prev = n.at
			}
			wantAlive := 2 // at 1 s and 2 s of a 2.5 s run
			if tc.output {
				wantAlive = 1 // at 1.6 s: an interval after the output
			}
			if answered.Sub(prev) > 1300*time.Millisecond || alive < wantAlive {
				t.Fatalf("keep-alives %d, notifications %+v", alive, got)
			}
			if tc.output && (len(got) < 2 || got[0].msg != "stdout: half way\n" || got[1].at.Sub(got[0].at) < 900*time.Millisecond) {
				t.Fatalf("output is not progress that delays the keep-alive: %+v", got)
			}
		})
	}
}

// The client's notifications/cancelled (the go-sdk sends it when the
// call's context ends) interrupts the session's code and is audited.
func TestCancelInterruptsSessionCode(t *testing.T) {
	r := newRig(t)
	interrupted := make(chan struct{})
	var once sync.Once
	r.backends["jupyter"].OnInterrupt = func(string) { once.Do(func() { close(interrupted) }) }
	started := make(chan struct{}, 1)
	r.backends["jupyter"].Run = func(ctx context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		if req.Code != "while True: pass" {
			return backend.ExecuteResult{Success: true}, nil
		}
		started <- struct{}{}
		select {
		case <-interrupted:
			return backend.ExecuteResult{Error: &backend.ExecError{Name: "KeyboardInterrupt"}}, nil
		case <-time.After(time.Minute):
			return backend.ExecuteResult{Success: true}, nil
		}
	}
	cs := r.connect(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": "while True: pass", "session_id": "c"}})
	if err == nil {
		t.Fatal("a cancelled call answered")
	}
	select {
	case <-interrupted:
	case <-time.After(10 * time.Second):
		t.Fatal("the session's code was not interrupted")
	}
	// The session is usable at once.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": "x", "session_id": "c"}})
	if err != nil || res.IsError {
		t.Fatal(err, res)
	}
	for _, e := range r.audit() {
		if e.Event == cancelled.Event && e.Details["outcome"] == "interrupted" && e.Details["session"] == "c" {
			return
		}
	}
	t.Fatalf("no execution.cancelled in %+v", r.audit())
}
