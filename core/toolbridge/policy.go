// Package toolbridge is the core side of the MCP tool bridge: it decides
// which upstream tools a run may call (grants and per-tool policy), serves
// each grant's unix socket (the NDJSON protocol of sdk/bridge), and forwards
// every admitted call to the bridge plugin's CallTool under a budget and a
// timeout, auditing each one. The bridge plugin holds the connections to the
// upstream servers and their secrets; this package holds the policy.
package toolbridge

import (
	"fmt"
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
	d, _ := explain(s, names)
	return d
}

// Why is Decide with the configuration that decided, for messages: which
// key of mcp_tools.<server> (and which glob of it) made the decision, so a
// user told a tool is denied knows what an operator would change.
func Why(server string, s config.MCPTool, names ...string) (Decision, string) {
	d, key := explain(s, names)
	return d, fmt.Sprintf("mcp_tools.%s.%s", server, key)
}

// explain is the decision and the key (with the matching glob) behind it.
func explain(s config.MCPTool, names []string) (Decision, string) {
	if g := matching(s.Deny, names); g != "" {
		return Deny, fmt.Sprintf("deny (%q matches it)", g)
	}
	if g := matching(s.Approve, names); g != "" {
		return Approve, fmt.Sprintf("approve (%q matches it)", g)
	}
	if g := matching(s.Allow, names); g != "" {
		return Allow, fmt.Sprintf("allow (%q matches it)", g)
	}
	switch {
	case s.Default != "":
		return Decision(s.Default), fmt.Sprintf("default (%q; no allow, deny or approve glob names the tool)", s.Default)
	case len(s.Allow) > 0:
		return Deny, "allow (the server has an allow list and no glob of it names the tool, so it is denied)"
	}
	return Allow, "default (unset: allow)"
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

// matching is the first of globs that matches one of names, "" if none.
func matching(globs []string, names []string) string {
	for _, g := range globs {
		for _, name := range names {
			if name == "" {
				continue
			}
			if ok, err := path.Match(g, name); err == nil && ok {
				return g
			}
		}
	}
	return ""
}
