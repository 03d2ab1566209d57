package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// OTLPReceiver is an OTLP/HTTP collector in the test: it keeps the spans
// the server exports.
type OTLPReceiver struct {
	URL   string
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

// NewOTLPReceiver starts one for the test.
func NewOTLPReceiver(t testing.TB) *OTLPReceiver {
	r := &OTLPReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" {
			http.NotFound(w, req)
			return
		}
		b, _ := io.ReadAll(req.Body)
		var msg collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	r.URL = r.srv.URL
	t.Cleanup(r.srv.Close)
	return r
}

// Trace returns the spans of one trace, waiting until it has a span of
// each name in want (a stateless run's container may be removed after
// its answer).
func (r *OTLPReceiver) Trace(t testing.TB, traceID []byte, want ...string) []*tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		var out []*tracepb.Span
		for _, s := range r.spans {
			if string(s.TraceId) == string(traceID) {
				out = append(out, s)
			}
		}
		r.mu.Unlock()
		missing := ""
		for _, w := range want {
			if SpanNamed(out, w) == nil {
				missing = w
			}
		}
		if missing == "" {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span %q exported in trace %x within 30 s; got %v", missing, traceID, SpanNames(out))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// SpanNames lists the spans' names.
func SpanNames(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// SpanNamed is the first span named name, nil when none is.
func SpanNamed(spans []*tracepb.Span, name string) *tracepb.Span {
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// NewTraceParent is a caller's span in a new trace: its trace and span ids
// and the W3C traceparent naming them, to send in _meta or a header.
func NewTraceParent() (traceID, spanID []byte, traceparent string) {
	traceID, spanID = make([]byte, 16), make([]byte, 8)
	rand.Read(traceID) // never fails (crypto/rand)
	rand.Read(spanID)
	return traceID, spanID, "00-" + hex.EncodeToString(traceID) + "-" + hex.EncodeToString(spanID) + "-01"
}
