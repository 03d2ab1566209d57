package httpe2e

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Over HTTP a traceparent header continues the caller's trace, as _meta
// does on any transport (test/e2e TestTracesThroughThePlugin).
func TestHTTPTraceparentHeader(t *testing.T) {
	recv := testenv.NewOTLPReceiver(t)
	s := testenv.StartHTTP(t, "[telemetry]\notlp_endpoint = \""+recv.URL+"\"\n")
	traceID, parent, tp := testenv.NewTraceParent()
	req, _ := http.NewRequest(http.MethodPost, s.URL, bytes.NewReader([]byte(listTools)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("traceparent", tp)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/list: %s", resp.Status)
	}
	span := testenv.SpanNamed(recv.Trace(t, traceID, "tools/list"), "tools/list")
	if string(span.ParentSpanId) != string(parent) {
		t.Errorf("tools/list's span has parent %x, want the header's %x", span.ParentSpanId, parent)
	}
}
