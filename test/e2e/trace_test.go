package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// One execute_python through MCP, sent with a traceparent in _meta, is a
// trace the server exports over OTLP: the tool call's span is the
// caller's span's child, the plugin call is beneath it, and beneath that
// (across the plugin, through the host services) the container's create,
// start, wait and remove; the engine's checks and its wait for a run slot
// are the tool call's children too. A session's first call traces its kernel's
// start the same way; a tool error marks its span failed.
func TestTracesThroughThePlugin(t *testing.T) {
	recv := testenv.NewOTLPReceiver(t)
	s := testenv.StartServer(t, testenv.NoSessionPools+"[plugins.python.config]\nwarm = 0\n[telemetry]\notlp_endpoint = \""+recv.URL+"\"\n")
	call := func(args map[string]any) (traceID, parent []byte, res *mcp.CallToolResult) {
		traceID, parent, tp := testenv.NewTraceParent()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		res, err := s.Session.CallTool(ctx, &mcp.CallToolParams{Name: "execute_python", Arguments: args,
			Meta: mcp.Meta{"traceparent": tp}})
		if err != nil {
			t.Fatal(err)
		}
		return traceID, parent, res
	}
	childOf := func(spans []*tracepb.Span, child, parent string) *tracepb.Span {
		t.Helper()
		c, p := testenv.SpanNamed(spans, child), testenv.SpanNamed(spans, parent)
		if c == nil || p == nil {
			t.Fatalf("want %q beneath %q; the trace has %v", child, parent, testenv.SpanNames(spans))
		}
		if string(c.ParentSpanId) != string(p.SpanId) {
			t.Errorf("%q is not a child of %q", child, parent)
		}
		return c
	}

	traceID, parent, res := call(map[string]any{"code": "print(6*7)"})
	if res.IsError {
		t.Fatalf("run: %s", testenv.Text(res))
	}
	spans := recv.Trace(t, traceID, "tools/call execute_python", "container.remove")
	tool := testenv.SpanNamed(spans, "tools/call execute_python")
	if tool == nil || string(tool.ParentSpanId) != string(parent) {
		t.Fatalf("the tool call's span is not the caller's span's child: %v", testenv.SpanNames(spans))
	}
	var plugin string
	for _, n := range []string{"plugin BackendService/ExecuteStream", "plugin BackendService/Execute"} {
		if testenv.SpanNamed(spans, n) != nil {
			plugin = n
		}
	}
	if plugin == "" {
		t.Fatalf("no span of the plugin call: %v", testenv.SpanNames(spans))
	}
	childOf(spans, plugin, "tools/call execute_python")
	childOf(spans, "engine.prepare", "tools/call execute_python")
	childOf(spans, "engine.run_slot", "tools/call execute_python")
	for _, op := range []string{"container.create", "container.start", "container.wait", "container.remove"} {
		childOf(spans, op, plugin)
	}

	traceID, _, res = call(map[string]any{"code": "x = 1", "session_id": "traced"})
	if res.IsError {
		t.Fatalf("session: %s", testenv.Text(res))
	}
	spans = recv.Trace(t, traceID, "tools/call execute_python")
	childOf(spans, "plugin BackendService/OpenSession", "tools/call execute_python")
	childOf(spans, "container.create", "plugin BackendService/OpenSession")
	childOf(spans, "engine.output_files", "tools/call execute_python")

	traceID, _, res = call(map[string]any{"code": "1/0"})
	if !res.IsError {
		t.Fatal("1/0 did not fail")
	}
	failed := testenv.SpanNamed(recv.Trace(t, traceID, "tools/call execute_python"), "tools/call execute_python")
	if failed.Status == nil || failed.Status.Code != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(failed.Status.Message, "isError") {
		t.Errorf("the failed call's span status: %v", failed.Status)
	}
}
