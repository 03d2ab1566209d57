// Package toolcall is what every layer that handles a tools/call shares:
// the session a call names (its session_id argument, read here alone) and
// the plain results a layer answers with: text, an error (isError and a
// text) and a refusal made before any tool ran, its structured error in the
// shape every tool's output has, and what a refused call's result carries
// beside it for the layers outside (OnForwarded). It is a leaf: the MCP
// tools, the tenants' middleware, the forwarder and the answer bound all
// build on it.
package toolcall

import (
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// SessionID is the session_id argument of a call, "" when it has none or
// its arguments are not an object (the tool validates its input itself).
func SessionID(call *mcp.CallToolRequest) string {
	if call == nil || call.Params == nil {
		return ""
	}
	var args struct {
		SessionID string `json:"session_id"`
	}
	_ = json.Unmarshal(call.Params.Arguments, &args)
	return args.SessionID
}

// Text is a result whose content is text alone (a typed tool adds its
// structured content).
func Text(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// Error is an error result: isError, and text saying what went wrong.
func Error(text string) *mcp.CallToolResult {
	res := Text(text)
	res.IsError = true
	return res
}

// Refused is the error result of a call answered before any tool ran (a
// tenant's quota, a forwarded call whose answer was lost): its structured
// content is what a tool's would be, success false and error {type,
// message} with detail's fields beside them (the quota's rule).
func Refused(typ, msg string, detail map[string]any) *mcp.CallToolResult {
	e := map[string]any{"type": typ, "message": msg}
	for k, v := range detail {
		e[k] = v
	}
	res := Error(msg)
	res.StructuredContent = map[string]any{"success": false, "error": e}
	return res
}

// OnForwarded has f run if res, a tool error whose Go error the tool kept
// beside it ((*mcp.CallToolResult).SetError: never sent), is forwarded to
// the replica that serves the call's session after all (core/forward,
// which calls Forwarded): that replica counts the call, so what a layer
// took of it here is given back (the tenants' rate token). A result
// without such an error is never forwarded: f is dropped. What is sent
// does not change.
func OnForwarded(res *mcp.CallToolResult, f func()) {
	if res == nil || res.GetError() == nil {
		return
	}
	isError, content := res.IsError, res.Content
	res.SetError(&forwarded{error: res.GetError(), f: f})
	res.IsError, res.Content = isError, content
}

// Forwarded runs what OnForwarded gave res: its call was forwarded.
func Forwarded(res *mcp.CallToolResult) {
	if res == nil {
		return
	}
	for err := res.GetError(); err != nil; err = errors.Unwrap(err) {
		if f, ok := err.(*forwarded); ok {
			f.f()
		}
	}
}

// forwarded is a result's error with what to do if its call is forwarded.
type forwarded struct {
	error
	f func()
}

func (e *forwarded) Unwrap() error { return e.error }
