package engine

import (
	"errors"
	"regexp"

	"github.com/mcp-forge/mcp-forge/core/engine/grants"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
)

// Rules a request can break before it is routed. Each refusal is audited
// with its rule (the routing's are route.Rule*, the sessions'
// session.Rule*, the limits' limits.Rule*).
const (
	RuleMCPTools     = grants.RuleMCPTools
	RuleMCPToolName  = "mcp-tools-name"
	RuleImage        = "image-not-allowed"
	RuleArguments    = "arguments-invalid"
	RuleImageMissing = "image-missing"
)

var toolName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}(\.[^\x00-\x1f]{1,128})?$`)

// quoted shows a name the caller sent, cut so that a refusal stays short.
func quoted(s string) string { return refusal.Quoted(s) }

func (e *Engine) validate(req Request) error {
	if err := e.limits.Code(req.Code, e.LanguageName(req.Language)); err != nil {
		return err
	}
	if req.SessionID != "" {
		if err := session.CheckID(req.SessionID); err != nil {
			return err
		}
	}
	if err := e.limits.Timeout(req.Timeout, req.Background); err != nil {
		return err
	}
	for _, n := range req.MCPTools {
		if !toolName.MatchString(n) {
			return refusal.New(RuleMCPToolName, "mcp_tools %s: name a configured MCP server (\"memory\") or one of its tools (\"memory.read_graph\"); see the resource mcp://forge/tools/available", quoted(n))
		}
	}
	if len(req.MCPTools) > 64 {
		return refusal.New(RuleMCPToolName, "mcp_tools names %d tools; at most 64 (name a server to grant all its tools)", len(req.MCPTools))
	}
	if len(req.MCPTools) > 0 && e.tools == nil {
		why := e.toolsWhy
		if why == "" {
			why = "none is loaded"
		}
		return refusal.New(RuleMCPTools, "mcp_tools %v: calling MCP tools from the sandbox needs a bridge plugin, and %s", req.MCPTools, why)
	}
	if err := e.network.Check(req.Network, req.Credentials); err != nil {
		return err
	}
	if req.CustomImage != "" {
		if err := e.pol.CheckImage(req.CustomImage); err != nil {
			detail := err.Error()
			var v *policy.Violation
			if errors.As(err, &v) {
				detail = v.Detail
			}
			return refusal.New(RuleImage, "custom_image %s is not allowed: %s", quoted(req.CustomImage), detail)
		}
	}
	return e.limits.Env(req.Environment)
}
