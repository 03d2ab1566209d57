// Package telemetry exports the core's traces over OTLP/HTTP: a span per
// MCP request with the engine's, the plugins' and the containers' work
// beneath it, continuing the caller's trace. With no endpoint configured
// the spans cost next to nothing (OpenTelemetry's no-op provider) and the
// caller's trace context is still passed on to the plugins.
package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/sdk/tracectx"
)

// propagator reads and writes W3C trace context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

var tracer = otel.Tracer("github.com/mcp-forge/mcp-forge/core")

// Setup installs the exporting tracer provider when cfg names an endpoint;
// the returned function flushes and stops it (a no-op otherwise).
func Setup(cfg config.Telemetry, version string, log hclog.Logger) (func(context.Context) error, error) {
	if cfg.OTLPEndpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	u, err := tracesURL(cfg)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(u.String()), otlptracehttp.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("telemetry.otlp_endpoint: %w", err)
	}
	res := resource.NewSchemaless(semconv.ServiceName(cfg.ServiceName), semconv.ServiceVersion(version))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("could not export traces", "endpoint", u.Redacted(), "error", err) }))
	log.Info("exporting traces", "endpoint", u.Redacted())
	return tp.Shutdown, nil
}

// tracesURL is where OTLP/HTTP takes spans: /v1/traces under the endpoint.
func tracesURL(cfg config.Telemetry) (*url.URL, error) {
	u, err := url.Parse(cfg.OTLPEndpoint)
	if err != nil {
		return nil, fmt.Errorf("telemetry.otlp_endpoint: %w", err)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	return u, nil
}

// Start begins a span beneath ctx's span, or beneath the trace context a
// plugin call carried in (tracectx), and makes it the trace context that
// calls made with the returned ctx pass on.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		if p, s := tracectx.From(ctx); p != "" {
			ctx = propagator.Extract(ctx, propagation.MapCarrier{tracectx.Parent: p, tracectx.State: s})
		}
	}
	ctx, span := tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	if sc := span.SpanContext(); sc.IsValid() {
		c := propagation.MapCarrier{}
		propagator.Inject(ctx, c)
		ctx = tracectx.With(ctx, c[tracectx.Parent], c[tracectx.State])
	}
	return ctx, span
}

// End ends span, marking it failed when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// FromMeta is ctx continuing the trace an MCP request's _meta names
// (traceparent, tracestate: the keys of W3C trace context, as MCP clients
// send them); ctx unchanged when it names none or ctx already has a span.
func FromMeta(ctx context.Context, meta map[string]any) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() || meta == nil {
		return ctx
	}
	c := propagation.MapCarrier{}
	for _, k := range []string{tracectx.Parent, tracectx.State} {
		if v, ok := meta[k].(string); ok && len(v) <= 512 {
			c[k] = v
		}
	}
	return propagator.Extract(ctx, c)
}

// FromHTTP is the request with its context continuing the trace its
// traceparent header names.
func FromHTTP(r *http.Request) *http.Request {
	if r.Header.Get(tracectx.Parent) == "" {
		return r
	}
	return r.WithContext(propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
}

// PluginCall is a span of one call to a plugin ("plugin BackendService/Execute"),
// for pluginhost.ObserveCalls.
func PluginCall(ctx context.Context, method string) (context.Context, func(error)) {
	name := method
	if i := strings.LastIndex(method, "."); i >= 0 {
		name = method[i+1:] // "/forge.plugin.v2.BackendService/Execute" -> "BackendService/Execute"
	}
	ctx, span := Start(ctx, "plugin "+name, attribute.String("rpc.method", method))
	return ctx, func(err error) { End(span, err) }
}

// Probe sends an empty export to the collector, as doctor's check that
// traces would arrive: nil when it answers 2xx.
func Probe(ctx context.Context, cfg config.Telemetry) error {
	u, err := tracesURL(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil) // an empty protobuf message
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s", u.Redacted(), resp.Status)
	}
	return nil
}
