package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
)

// ErrNoTenant is a request without a verified token on a server that has
// tenants: the HTTP layer should have refused it, so this fails closed.
var ErrNoTenant = errors.New("no verified tenant on this request (bearer token required)")

// QuotaRefused is the audit event of a call refused by a quota.
const QuotaRefused = "quota.refused"

// Identify names the tenant of an MCP request: the verified token's user
// over HTTP, Local when the server has no tenants.
func (r *Registry) Identify(req mcp.Request) (string, error) {
	if ex := req.GetExtra(); ex != nil && ex.TokenInfo != nil && ex.TokenInfo.UserID != "" {
		if _, ok := r.tenants[ex.TokenInfo.UserID]; ok {
			return ex.TokenInfo.UserID, nil
		}
		return "", ErrNoTenant
	}
	if r.Authenticated() {
		return "", ErrNoTenant
	}
	return Local, nil
}

// Observer is told the outcome of every tool call (metrics).
type Observer interface {
	ToolCall(tenant, tool, outcome string, d time.Duration)
	QuotaRefused(tenant, quota string)
}

// Middleware applies the run and rate quotas to execute_* tool calls and
// reports the outcome of every tool call (the session quota is the
// engine's: SessionQuota). A refusal is a tool error naming the quota (the caller can act
// on it), audited with the quota as its rule.
func (r *Registry) Middleware(rec audit.Recorder, obs Observer) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			call, ok := req.(*mcp.CallToolRequest)
			if method != "tools/call" || !ok || call.Params == nil {
				return next(ctx, method, req)
			}
			name, err := r.Identify(req)
			if err != nil {
				return nil, err
			}
			start := time.Now()
			observe := func(res mcp.Result, err error) (mcp.Result, error) {
				if obs != nil && err == nil { // a protocol error (unknown tool) is not a call
					obs.ToolCall(name, call.Params.Name, outcomeOf(res), time.Since(start))
				}
				return res, err
			}
			if !strings.HasPrefix(call.Params.Name, "execute_") {
				return observe(next(ctx, method, req))
			}
			a, err := r.admit(name)
			if err != nil {
				if re, quota := QuotaOf(err); re != nil {
					recordRefusal(rec, obs, name, toolcall.SessionID(call), call.Params.Name, re, quota)
					return toolcall.Refused("QuotaExceeded", re.Msg, map[string]any{"quota": re.Rule}), nil
				}
				return nil, err
			}
			// The run slot outlives the call while the engine holds it
			// (HoldRun): until the run's sandbox is gone.
			defer a.end()
			res, err := next(context.WithValue(ctx, admissionKey{}, a), method, req)
			if tr, ok := res.(*mcp.CallToolResult); ok {
				// Refused for a session another replica serves and
				// forwarded there (core/forward, outside this
				// middleware): that replica counts the call.
				toolcall.OnForwarded(tr, a.refund)
			}
			return observe(res, err)
		}
	}
}

// recordRefusal audits a refusal by quota (QuotaOf) with the quota's
// field as its rule and counts it.
func recordRefusal(rec audit.Recorder, obs Observer, name, sessionID, tool string, re *refusal.Error, quota string) {
	rec.Record(audit.Entry{Event: QuotaRefused, Severity: audit.Warning, UserID: name, SessionID: sessionID, Error: re.Msg,
		Details: map[string]any{"rule": re.Rule, "quota": quota, "tool": tool}})
	if obs != nil {
		obs.QuotaRefused(name, quota)
	}
}

// outcomeOf reads the kind of outcome from a tool result: success, error
// (the user's code failed), rejected (a bad request) or server_error.
func outcomeOf(res mcp.Result) string {
	tr, ok := res.(*mcp.CallToolResult)
	if !ok || tr == nil {
		return "server_error"
	}
	var out struct {
		Error *struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if tr.StructuredContent != nil {
		if b, err := json.Marshal(tr.StructuredContent); err == nil {
			_ = json.Unmarshal(b, &out)
		}
	}
	switch {
	case !tr.IsError:
		return "success"
	case out.Error == nil:
		return "rejected" // session tools report a bad request as text only
	case out.Error.Type == "RequestError":
		return "rejected"
	case out.Error.Type == "ServerError":
		return "server_error"
	}
	return "error"
}
