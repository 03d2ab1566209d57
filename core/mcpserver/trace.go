package mcpserver

import (
	"context"
	"reflect"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/mcp-forge/mcp-forge/core/telemetry"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
)

// TraceRequests gives every request a span ("tools/call execute_python")
// continuing the trace its _meta names (traceparent), or its HTTP
// request's; a tool result with isError marks the span failed. Call it
// after every other middleware is added, so that it wraps them: the
// tenants' admission and a forwarded call are inside the span.
func (s *Server) TraceRequests() {
	s.mcp.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p := req.GetParams(); p != nil && !reflect.ValueOf(p).IsNil() {
				ctx = telemetry.FromMeta(ctx, p.GetMeta())
			}
			name, attrs := method, []attribute.KeyValue{attribute.String("mcp.method.name", method)}
			if call, ok := req.(*mcp.CallToolRequest); ok && call.Params != nil {
				name += " " + call.Params.Name
				attrs = append(attrs, attribute.String("gen_ai.tool.name", call.Params.Name))
				if id := toolcall.SessionID(call); id != "" {
					if len(id) > 128 { // not yet checked: the tool refuses it, the span need not carry it whole
						id = strings.ToValidUTF8(id[:128], "")
					}
					attrs = append(attrs, attribute.String("mcp_forge.session_id", id))
				}
			}
			ctx, span := telemetry.Start(ctx, name, attrs...)
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
				span.SetStatus(codes.Error, "the tool answered isError")
			}
			telemetry.End(span, err)
			return res, err
		}
	})
}
