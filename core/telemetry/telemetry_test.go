package telemetry

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/sdk/tracectx"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	callerTP    = "00-" + callerTrace + "-" + callerSpan + "-01"
)

func recording(t *testing.T) *tracetest.InMemoryExporter {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := tracer // not the global provider: its tracers would delegate to tp for good
	tracer = tp.Tracer("test")
	t.Cleanup(func() { tracer = prev })
	return exp
}

// A span continues the trace _meta, an HTTP header or a plugin call's
// metadata (tracectx) names, and hands its own context on through tracectx.
func TestSpansContinueTheCallersTrace(t *testing.T) {
	exp := recording(t)
	h := http.Header{}
	h.Set("traceparent", callerTP)
	r, _ := http.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header = h
	starts := map[string]context.Context{
		"_meta":       FromMeta(context.Background(), map[string]any{"traceparent": callerTP}),
		"HTTP":        FromHTTP(r).Context(),
		"plugin call": tracectx.With(context.Background(), callerTP, ""),
	}
	for name, ctx := range starts {
		exp.Reset()
		ctx, span := Start(ctx, "outer")
		_, inner := Start(ctx, "inner")
		End(inner, errors.New("boom"))
		End(span, nil)
		spans := exp.GetSpans()
		if len(spans) != 2 {
			t.Fatalf("%s: %d spans", name, len(spans))
		}
		in, out := spans[0], spans[1]
		if out.SpanContext.TraceID().String() != callerTrace || out.Parent.SpanID().String() != callerSpan {
			t.Errorf("%s: outer span %s parent %s, want the caller's trace and span", name, out.SpanContext.TraceID(), out.Parent.SpanID())
		}
		if in.Parent.SpanID() != out.SpanContext.SpanID() || in.Status.Code != codes.Error {
			t.Errorf("%s: inner span not beneath outer, or not failed: %+v", name, in.Status)
		}
		if p, _ := tracectx.From(ctx); p != "00-"+callerTrace+"-"+out.SpanContext.SpanID().String()+"-01" {
			t.Errorf("%s: the context passes on %q, not the outer span", name, p)
		}
	}
	// Garbage is no parent: a new trace starts.
	exp.Reset()
	_, span := Start(FromMeta(context.Background(), map[string]any{"traceparent": "nonsense"}), "fresh")
	span.End()
	if s := exp.GetSpans(); len(s) != 1 || s[0].Parent.IsValid() {
		t.Errorf("a bad traceparent gave a parent: %+v", s)
	}
}

// Off, nothing is recorded and the caller's context is still passed on.
func TestOffPassesTheCallersContextOn(t *testing.T) {
	stop, err := Setup(configOff(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop(context.Background())
	ctx, span := Start(FromMeta(context.Background(), map[string]any{"traceparent": callerTP}), "x")
	defer span.End()
	if span.IsRecording() {
		t.Error("a span records with telemetry off")
	}
	if p, _ := tracectx.From(ctx); p == "" {
		t.Error("the caller's trace context is not passed on with telemetry off")
	}
}

func configOff() config.Telemetry { return config.Telemetry{} }

// The cost of one span with its context handed on, off (no endpoint: the
// no-op provider) and recording: what each MCP request, plugin call and
// container operation pays.
func BenchmarkSpan(b *testing.B) {
	meta := map[string]any{"traceparent": callerTP}
	run := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, span := Start(FromMeta(context.Background(), meta), "tools/call execute_python")
			_, inner := Start(ctx, "container.exec")
			End(inner, nil)
			End(span, nil)
		}
	}
	b.Run("off", run)
	b.Run("recording", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		defer tp.Shutdown(context.Background())
		prev := tracer
		tracer = tp.Tracer("bench")
		defer func() { tracer = prev }()
		run(b)
	})
}

func TestProbe(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/base/v1/traces" || r.Method != http.MethodPost {
			http.NotFound(w, r)
		}
	}))
	defer ok.Close()
	if err := Probe(context.Background(), config.Telemetry{OTLPEndpoint: ok.URL + "/base/"}); err != nil {
		t.Errorf("a collector that answers: %v", err)
	}
	if err := Probe(context.Background(), config.Telemetry{OTLPEndpoint: ok.URL + "/other"}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a 404: %v", err)
	}
	ok.Close()
	if err := Probe(context.Background(), config.Telemetry{OTLPEndpoint: ok.URL}); err == nil {
		t.Error("a collector that is gone answered")
	}
}
