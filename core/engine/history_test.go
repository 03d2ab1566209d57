package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/jobs"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Each session execute is a cell of its session's history, with what came
// back; the history is its owner's only, bounded, and never in the audit
// log (which has the code's hash).
func TestHistoryRecorded(t *testing.T) {
	r := newRig(t, func(c *config.Config) { c.Sessions.HistoryCells = 3 }, func(r *rig) {
		r.kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
			res := backend.ExecuteResult{Success: true, Stdout: "out:" + req.Code, StdoutBytes: int64(4 + len(req.Code)), ResultRepr: "42", Duration: 3 * time.Millisecond}
			if strings.Contains(req.Code, "fail") {
				res.Success, res.Error = false, &backend.ExecError{Name: "ValueError", Message: "bad", Traceback: []string{"tb\n"}}
			}
			if strings.Contains(req.Code, "plot") {
				res.Images = []backend.Image{{Name: "image-1.png", MIMEType: "image/png", Data: []byte("png")}}
			}
			return res, nil
		}
	})
	codes := []string{"secret_cell_one = 1", "plot()", "fail()", "x = 4"}
	for _, code := range codes {
		if _, err := r.exec(t, Request{Language: "python", SessionID: "s", Code: code}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.exec(t, Request{Language: "python", Code: "stateless()"}); err != nil {
		t.Fatal(err)
	}
	h, _, err := r.e.History("c1", "s", "resources/read")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Cells) != 3 || h.Dropped != 1 {
		t.Fatalf("history_cells = 3 keeps 3 of 4 cells: %d kept, %d dropped", len(h.Cells), h.Dropped)
	}
	for i, c := range h.Cells {
		if c.Code != codes[i+1] || c.Count != i+2 || c.Stdout != "out:"+c.Code || c.ResultRepr != "42" || c.Duration != 3*time.Millisecond || c.Started.IsZero() {
			t.Errorf("cell %d: %+v", i, c)
		}
	}
	if len(h.Cells[0].Images) != 1 || h.Cells[1].Error == nil || h.Cells[1].Error.Name != "ValueError" || h.Cells[1].Success {
		t.Errorf("images or error not kept: %+v", h.Cells)
	}
	if _, _, err := r.e.History("c2", "s", "resources/read"); refusedBy(t, err) != session.RuleSessionNotFound {
		t.Fatalf("another client reads the history: %v", err)
	}
	nb, err := r.e.ExportNotebook("c1", "s", "export_notebook")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cells []struct {
			CellType string `json:"cell_type"`
		} `json:"cells"`
		Metadata struct {
			Kernelspec struct{ Name string } `json:"kernelspec"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(nb.Data, &doc); err != nil || len(doc.Cells) != 4 || doc.Cells[0].CellType != "markdown" || doc.Metadata.Kernelspec.Name != "python3" || nb.Cells != 3 || nb.Dropped != 1 {
		t.Fatalf("notebook: %v %+v %s", err, doc, nb.Data)
	}
	if _, err := r.e.ExportNotebook("c2", "s", "export_notebook"); refusedBy(t, err) != session.RuleSessionNotFound {
		t.Fatalf("another client exports the notebook: %v", err)
	}
	for _, e := range r.audit() {
		line, _ := json.Marshal(e)
		for _, code := range codes {
			if strings.Contains(string(line), code) || strings.Contains(string(line), "out:") {
				t.Fatalf("the audit log holds a cell: %s", line)
			}
		}
	}
	// Gone with its session.
	if err := r.e.DestroySession(context.Background(), "c1", "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s", Code: "new"}); err != nil {
		t.Fatal(err)
	}
	if h, _, _ := r.e.History("c1", "s", "resources/read"); len(h.Cells) != 1 || h.Cells[0].Code != "new" || h.Dropped != 0 {
		t.Fatalf("a new session of the same id has the old history: %+v", h)
	}
}

// With history off, export_notebook says so (and still hides other
// clients' sessions).
func TestHistoryOff(t *testing.T) {
	r := newRig(t, func(c *config.Config) { c.Sessions.HistoryCells = 0 }, nil)
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.ExportNotebook("c1", "s", "export_notebook"); refusedBy(t, err) != RuleHistoryOff {
		t.Fatalf("export with history off: %v", err)
	}
	if _, err := r.e.ExportNotebook("c2", "s", "export_notebook"); refusedBy(t, err) != session.RuleSessionNotFound {
		t.Fatalf("export of another client's session: %v", err)
	}
}

// What a fork refuses before it touches any kernel.
func TestForkRefusals(t *testing.T) {
	r := newRig(t, nil, nil)
	ctx := context.Background()
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.ForkSession(ctx, "c1", "s", "f"); refusedBy(t, err) != checkpoint.RuleCheckpointLanguage {
		t.Fatalf("fork of a backend without checkpoint code: %v", err)
	}
	r.kernel.Caps.Checkpoint = &backend.Checkpoint{Save: "save", Load: "load"}
	r.pm.Add("kernel", r.kernel) // statuses are read at Add
	if _, err := r.exec(t, Request{Language: "python", SessionID: "other"}); err != nil {
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
	for _, a := range r.audit() {
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
	r := newRig(t, nil, func(r *rig) {
		r.kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
			if req.Code == "long" {
				close(started)
				<-release
			}
			return backend.ExecuteResult{Success: true}, nil
		}
	})
	r.kernel.Caps.Checkpoint = &backend.Checkpoint{Save: "save", Load: "load"}
	r.pm.Add("kernel", r.kernel) // statuses are read at Add
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.e.Execute(context.Background(), Request{Language: "python", SessionID: "s", Client: "c1", Code: "long"}, nil)
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
	r.kernel.Caps.Checkpoint = &backend.Checkpoint{Save: "save", Load: "load"}
	r.pm.Add("kernel", r.kernel) // statuses are read at Add
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	g := newGate()
	r.kernel.Run, r.kernel.OnInterrupt = g.run, g.interrupt
	rec, err := r.e.StartJob(context.Background(), Request{Language: "python", SessionID: "s", Code: "train()", Client: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	_, err = r.e.ForkSession(context.Background(), "c1", "s", "f")
	if rule := refusedBy(t, err); rule != RuleSessionJob || !strings.Contains(err.Error(), rec.ID) {
		t.Fatalf("fork of a session job %s holds: rule %s: %v", rec.ID, rule, err)
	}
	if r.e.sessions.Live("c1", "f") {
		t.Error("a refused fork left its session")
	}
	close(g.release)
	waitState(t, r, "c1", rec.ID, jobs.Done)
}
