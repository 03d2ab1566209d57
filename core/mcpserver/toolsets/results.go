package toolsets

import (
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
)

// ErrorInfo is a failure: of the user's code (type is the language's error
// name), or of the request (RequestError: fix the call) or of MCP-Forge
// itself (ServerError).
type ErrorInfo struct {
	Type      string   `json:"type"`
	Message   string   `json:"message"`
	Line      int      `json:"line,omitempty" jsonschema:"1-based line in your code"`
	Column    int      `json:"column,omitempty"`
	Traceback []string `json:"traceback,omitempty"`
}

// Unavailable is a failure of the server told as it is: a part of it
// that was not set up, and why.
type Unavailable string

func (u Unavailable) Error() string { return string(u) }

// Failure is the result of a tool for an error of the core, with the error
// its structured output carries: a refusal the caller can fix
// (RequestError; an environment's names its rule), a tenant's quota
// (QuotaExceeded), or a failure of the server (ServerError). The result
// keeps err beside it for the middlewares outside the tools (GetError,
// never sent): a refusal for a session another replica serves names it
// there, and the call is forwarded to it (core/forward).
func Failure(err error) (*mcp.CallToolResult, *ErrorInfo) {
	res, info := failure(err)
	res.SetError(err)
	return res, info
}

func failure(err error) (*mcp.CallToolResult, *ErrorInfo) {
	var re *refusal.Error
	var un Unavailable
	switch {
	case errors.As(err, &un):
		return Fail("ServerError", err.Error())
	case errors.Is(err, tenant.ErrQuota): // a tenant's quota, asked by the engine (max_sessions)
		return Fail("QuotaExceeded", err.Error())
	case errors.As(err, &re):
		return Fail("RequestError", err.Error())
	}
	return Fail("ServerError", "MCP-Forge could not do it: "+err.Error())
}

// Fail is an error result of type typ saying msg, and the error its
// structured output carries.
func Fail(typ, msg string) (*mcp.CallToolResult, *ErrorInfo) {
	return toolcall.Error(msg), &ErrorInfo{Type: typ, Message: msg}
}

// Each is f of every element of xs, never nil (a listing shows [] when
// there is nothing).
func Each[A, B any](xs []A, f func(A) B) []B {
	out := make([]B, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// JSON is a resource read answered with v as indented JSON.
func JSON(uri string, v any) (*mcp.ReadResourceResult, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(data)}}}, nil
}
