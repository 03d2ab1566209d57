package tasks

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// No params make the tasks methods panic or answer what is not JSON, and
// a rewritten call is JSON naming the same tool, in the background.
func FuzzTasksWire(f *testing.F) {
	for _, s := range []string{`{"taskId":"job-1"}`, `{"taskId":1}`, `null`, `[]`, `{"name":"execute_python","task":{},"arguments":{"code":"1"}}`,
		`{"name":"execute_r","task":null}`, `{"name":"execute_x","task":{},"arguments":"x"}`, `{"taskId":"job-done","cursor":5}`} {
		f.Add(s)
	}
	s, _ := newService()
	f.Fuzz(func(t *testing.T, params string) {
		for _, m := range []string{MethodGet, MethodList, MethodCancel} {
			if out, err := s.Answer(context.Background(), "alice", m, json.RawMessage(params)); err == nil && !json.Valid(out) {
				t.Fatalf("%s %q answered %q", m, params, out)
			}
		}
		if out, ok, _ := StartCall(json.RawMessage(params)); ok {
			var p struct {
				Name      string
				Arguments map[string]any
				Task      any
			}
			if err := json.Unmarshal(out, &p); err != nil || !TaskTool(p.Name) || p.Arguments["background"] != true || p.Task != nil {
				t.Fatalf("%q rewritten to %q", params, out)
			}
		}
		// An event stream through the rewriter: data lines that are not
		// the answer pass as they came.
		rec := httptest.NewRecorder()
		rw := &rewriter{ResponseWriter: rec, id: `7`, fn: Tools}
		rw.Header().Set("Content-Type", "text/event-stream")
		stream := "event: message\ndata: " + strings.ReplaceAll(params, "\n", " ") + "\n\n"
		_, _ = rw.Write([]byte(stream[:len(stream)/2]))
		_, _ = rw.Write([]byte(stream[len(stream)/2:]))
		rw.finish()
		if !strings.Contains(params, `"id"`) && rec.Body.String() != stream {
			t.Fatalf("stream %q came out as %q", stream, rec.Body.String())
		}
	})
}
