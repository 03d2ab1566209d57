// Package toolbridge is the core side of the MCP tool bridge: it decides
// which upstream tools a run may call (grants and per-tool policy), serves
// each grant's unix socket (the NDJSON protocol of sdk/bridge), and forwards
// every admitted call to the bridge plugin's CallTool under a budget and a
// timeout, auditing each one. The bridge plugin holds the connections to the
// upstream servers and their secrets; this package holds the policy.
package toolbridge

import (
	"path"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// Decision is the policy for one tool.
type Decision string

// Decisions.
const (
	Allow   Decision = "allow"
	Deny    Decision = "deny"
	Approve Decision = "approve"
)

// Decide applies a server's policy to one of its tools: deny wins over
// approve, approve over allow; a tool that no list names gets the server's
// default, which is "allow" unless an allow list exists (then "deny": an
// operator who lists what is allowed means nothing else is).
//
// names are the tool's names: the bridge's (an identifier) and, when the
// bridge mapped it, the server's own ("get-env" for get_env). A glob that
// matches any of them applies, so an operator who copies a name from the
// server's documentation into deny is not bypassed by the mapping.
func Decide(s config.MCPTool, names ...string) Decision {
	switch {
	case matchAny(s.Deny, names):
		return Deny
	case matchAny(s.Approve, names):
		return Approve
	case matchAny(s.Allow, names):
		return Allow
	}
	return DefaultOf(s)
}

// DefaultOf is what a tool no list of s names gets.
func DefaultOf(s config.MCPTool) Decision {
	switch {
	case s.Default != "":
		return Decision(s.Default)
	case len(s.Allow) > 0:
		return Deny
	}
	return Allow
}

func matchAny(globs []string, names []string) bool {
	for _, g := range globs {
		for _, name := range names {
			if name == "" {
				continue
			}
			if ok, err := path.Match(g, name); err == nil && ok {
				return true
			}
		}
	}
	return false
}
