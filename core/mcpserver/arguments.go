package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// auditRejectedArguments audits a tools/call that go-sdk answered before
// any handler ran: arguments that do not match the tool's input schema
// (a wrong type, an unknown property). Every handler of ours fills the
// structured content, so an error result without it came from the SDK's
// own validation; the caller gets the SDK's message with what to do, and
// the refusal is audited like any other.
func (s *Server) auditRejectedArguments(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		call, ok := req.(*mcp.CallToolRequest)
		r, isTool := res.(*mcp.CallToolResult)
		if err != nil || !ok || !isTool || r == nil || !r.IsError || r.StructuredContent != nil || call.Params == nil {
			return res, err
		}
		msg := "invalid arguments"
		if len(r.Content) > 0 {
			if t, ok := r.Content[0].(*mcp.TextContent); ok {
				msg = t.Text
			}
		}
		ss, _ := req.GetSession().(*mcp.ServerSession)
		s.eng.RefuseArguments(s.conn(ss), call.Params.Name, msg)
		r.Content = []mcp.Content{&mcp.TextContent{Text: "the arguments of " + call.Params.Name + " do not match its input schema: " + msg +
			"; check the property names and types in the tool's inputSchema (tools/list)"}}
		return r, nil
	}
}
