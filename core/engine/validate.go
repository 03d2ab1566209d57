package engine

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
)

// Rules a request can break before it is routed. Each refusal is audited
// with its rule (the routing's are route.Rule*, the sessions'
// session.Rule*).
const (
	RuleCodeEmpty    = "code-empty"
	RuleCodeSize     = "code-size"
	RuleCodeNUL      = "code-nul"
	RuleTimeout      = "timeout"
	RuleTimeoutMax   = "timeout-max"
	RuleMCPTools     = "mcp-tools-unavailable"
	RuleMCPToolName  = "mcp-tools-name"
	RuleImage        = "image-not-allowed"
	RuleEnvName      = "env-name"
	RuleEnvReserved  = "env-reserved"
	RuleEnvNUL       = "env-nul"
	RuleEnvValueSize = "env-value-size"
	RuleEnvTotalSize = "env-total-size"
	RuleArguments    = "arguments-invalid"
	RuleImageMissing = "image-missing"
)

var toolName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}(\.[^\x00-\x1f]{1,128})?$`)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// quoted shows a name the caller sent, cut so that a refusal stays short.
func quoted(s string) string { return refusal.Quoted(s) }

func (e *Engine) validate(req Request) error {
	if strings.TrimSpace(req.Code) == "" {
		return refusal.New(RuleCodeEmpty, "code is empty: pass the %s source to run in the code argument", e.LanguageName(req.Language))
	}
	if int64(len(req.Code)) > e.limits.code {
		return refusal.New(RuleCodeSize, "code is %d bytes, over the %s limit (execution.max_code_size); send less code, or load data from files", len(req.Code), e.cfg.Execution.MaxCodeSize)
	}
	if i := strings.IndexByte(req.Code, 0); i >= 0 {
		// No language takes a NUL in its source; a runner would only crash on it.
		return refusal.New(RuleCodeNUL, "code holds a NUL byte on line %d; remove it (write binary data with escapes such as \\x00)", strings.Count(req.Code[:i], "\n")+1)
	}
	if req.SessionID != "" {
		if err := session.CheckID(req.SessionID); err != nil {
			return err
		}
	}
	if req.Timeout < 0 {
		return refusal.New(RuleTimeout, "timeout %d: must be a positive number of seconds", req.Timeout)
	}
	if max := e.cfg.Execution.MaxTimeout; req.Timeout > max && !req.Background {
		return refusal.New(RuleTimeoutMax, "timeout %d s exceeds the maximum %d s of a call (execution.max_timeout): pass background: true to run it as a job of up to %d s (execution.max_background_timeout)",
			req.Timeout, max, e.cfg.Execution.MaxBackgroundTimeout)
	}
	if max := e.cfg.Execution.MaxBackgroundTimeout; req.Timeout > max && req.Background {
		return refusal.New(RuleTimeoutMax, "timeout %d s exceeds the maximum %d s of a background job (execution.max_background_timeout)", req.Timeout, max)
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
	return e.checkEnv(req.Environment)
}

// checkEnv refuses environment variables a process could not hold or that
// exceed the limits. A refusal names the variable, never its value.
func (e *Engine) checkEnv(env map[string]string) error {
	// The caller is told which variable; the audit log is not (names too
	// may be secrets).
	refuse := func(rule, format string, args ...any) error {
		return &RequestError{Rule: rule, Msg: fmt.Sprintf(format, args...),
			Audit: fmt.Sprintf("environment refused by rule %s (%d variables; names and values are not recorded)", rule, len(env))}
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		switch {
		case !envName.MatchString(k):
			return refuse(RuleEnvName, "environment variable name %s is invalid: use letters, digits and '_', not starting with a digit (at most 128)", quoted(k))
		case strings.HasPrefix(k, "FORGE_"):
			return refuse(RuleEnvReserved, "environment variable %s: the FORGE_ prefix is reserved for MCP-Forge", k)
		case strings.IndexByte(v, 0) >= 0:
			return refuse(RuleEnvNUL, "environment variable %s: its value contains a NUL byte, which no process environment can hold", k)
		case int64(len(v)) > e.limits.envValue:
			return refuse(RuleEnvValueSize, "environment variable %s: its value is %d bytes, over the %s limit (execution.max_env_value); pass large data as a file or in the code", k, len(v), e.cfg.Execution.MaxEnvValue)
		}
		total += len(k) + len(v) + 2 // "=" and the terminating NUL
	}
	if int64(total) > e.limits.envTotal {
		return refuse(RuleEnvTotalSize, "environment: %d variables take %d bytes, over the %s limit (execution.max_env_total)", len(env), total, e.cfg.Execution.MaxEnvTotal)
	}
	return nil
}
