package history

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/enginerig"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Each session execute is a cell of its session's history, with what came
// back; the history is its owner's only, bounded, and never in the audit
// log (which has the code's hash).
func TestHistoryRecorded(t *testing.T) {
	r := newRig(t, func(c *config.Config) { c.Sessions.HistoryCells = 3 }, func(r *enginerig.Rig) {
		r.Kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
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
		if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s", Code: code}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Exec(t, engine.Request{Language: "python", Code: "stateless()"}); err != nil {
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
	for _, e := range r.Audit() {
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
	if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s", Code: "new"}); err != nil {
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
	if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.ExportNotebook("c1", "s", "export_notebook"); refusedBy(t, err) != RuleHistoryOff {
		t.Fatalf("export with history off: %v", err)
	}
	if _, err := r.e.ExportNotebook("c2", "s", "export_notebook"); refusedBy(t, err) != session.RuleSessionNotFound {
		t.Fatalf("export of another client's session: %v", err)
	}
}
