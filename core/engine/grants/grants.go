// Package grants issues what a session holds from its first call to its
// end beyond its container (the tool bridge's grant, the network channel
// and the sandbox grant of host roots and isolation), and ends them with
// it. A stateless run's are issued by the engine's run for the run alone.
package grants

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/engine/network"
	"github.com/mcp-forge/mcp-forge/core/engine/sandboxes"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/sandboxgrant"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// RuleMCPTools refuses mcp_tools no bridge or backend can serve.
const RuleMCPTools = "mcp-tools-unavailable"

// Refuser audits a refusal with its rule and returns it (engine.Engine.Refuse).
type Refuser interface {
	Refuse(client, sessionID, tool string, err error, details map[string]any) error
}

// Issuer issues them.
type Issuer struct {
	Tools   *toolbridge.Service // nil: no bridge
	Network *network.Grants     // nil: no network
	Sandbox *sandboxes.Sandboxes
	Refuse  Refuser
	// Caps are a backend's capabilities (false: no such backend).
	Caps func(backendName string) (backend.Capabilities, bool)
	// Rec audits a plugin that did not honour a grant.
	Rec audit.Recorder
}

// Ask is what a session's first call asks for, and what each later call
// needs of its tool grant.
type Ask struct {
	ToolIDs     []string
	Client      string
	Approve     toolbridge.Approver
	Hosts       []string       // network asked for (a session's first call grants it)
	Credentials []string       // and credentials
	Need        sandboxes.Need // what a session's first call gives its sandbox
	Tool        string
}

// ForwardsTools reports whether a backend's containers get the tool grant
// of a request (Capabilities.MCPTools).
func (i *Issuer) ForwardsTools(name string) bool {
	c, ok := i.Caps(name)
	return ok && c.MCPTools
}

// PassesSandboxGrants reports whether a backend passes sandbox grants on
// (Capabilities.SandboxGrants).
func (i *Issuer) PassesSandboxGrants(name string) bool {
	c, ok := i.Caps(name)
	return ok && c.SandboxGrants
}

// ResolveTools checks that backend forwards tool grants and expands
// mcp_tools into tool ids under the policy. Errors are refusals.
func (i *Issuer) ResolveTools(ctx context.Context, mcpTools []string, backendName string) ([]string, error) {
	if !i.ForwardsTools(backendName) {
		return nil, refusal.New(RuleMCPTools, "mcp_tools: the %s backend does not support MCP tools in its sandbox (it does not forward tool grants to its containers); use a backend that does, or omit mcp_tools", backendName)
	}
	ids, err := i.Tools.Resolve(ctx, mcpTools)
	var te *toolbridge.Error
	if errors.As(err, &te) {
		return nil, &refusal.Error{Rule: te.Rule, Msg: te.Msg}
	}
	if err != nil {
		return nil, &refusal.Error{Rule: RuleMCPTools, Msg: fmt.Sprintf("mcp_tools %v: %v", mcpTools, err)}
	}
	return ids, nil
}

// Session gives a new session (caller holds its lock) what its first
// call asks for: its network channel, its sandbox grant, and its tool
// grant when it asks for tools, so that its container mounts them from
// the start (later executes can add tools to the grant). A session
// started without tools gets no tool grant: its kernel can then come from
// the warm pool, which holds containers without a tools mount.
func (i *Issuer) Session(ctx context.Context, s *session.Session, a Ask) error {
	if len(a.Hosts) > 0 || len(a.Credentials) > 0 {
		ch, err := i.Network.Open(ctx, network.Ask{Hosts: a.Hosts, Credentials: a.Credentials, Client: s.Client, Session: s.Internal, Tool: a.Tool, Approve: a.Approve}, s.Backend)
		if err != nil {
			return err
		}
		s.Network, s.Start.NetworkGrant = ch, ch.Token()
	}
	if !a.Need.Empty() {
		g, err := i.Sandbox.Grant(sandboxes.Ask{Client: s.Client, Session: s.ID, Internal: s.Internal, Tool: a.Tool, Backend: s.Backend}, a.Need)
		if err != nil {
			i.Close(s) // the network granted above
			return err
		}
		s.SandboxGrant, s.Start.SandboxGrant, s.Start.SandboxPoolGrant = g, g.Token(), g.PoolToken()
	}
	if i.Tools == nil || len(a.ToolIDs) == 0 || !i.ForwardsTools(s.Backend) {
		return nil
	}
	g, err := i.Tools.Issue(ctx, toolbridge.IssueRequest{Plugin: s.Backend, Client: s.Client, Session: s.Internal, Language: s.Language, Tools: a.ToolIDs, Approve: a.Approve})
	if err != nil {
		i.Close(s) // the network and sandbox granted above
		return err
	}
	s.Grant, s.Start.ToolsGrant = g, g.Token()
	return nil
}

// Close ends a session's tool grant, network and sandbox grant (caller
// holds s's lock).
func (i *Issuer) Close(s *session.Session) {
	if s.Grant != nil {
		s.Grant.Close()
		s.Grant, s.Start.ToolsGrant = nil, ""
	}
	if s.Network != nil {
		s.Network.Close()
		s.Network, s.Start.NetworkGrant = nil, ""
	}
	if s.SandboxGrant != nil {
		i.Sandbox.Close(s.SandboxGrant)
		s.SandboxGrant, s.Start.SandboxGrant, s.Start.SandboxPoolGrant = nil, "", ""
	}
}

// Isolation gives session s (caller holds its lock), which has no sandbox
// grant, the isolation its owner requires, if any, whatever opens it (a
// first call, a fork, a restore); a backend that cannot be told is
// refused.
func (i *Issuer) Isolation(s *session.Session) error {
	if s.SandboxGrant != nil || i.Sandbox.Required(s.Client) == "" {
		return nil
	}
	a := sandboxes.Ask{Client: s.Client, Session: s.ID, Internal: s.Internal, Tool: "execute_" + s.Language, Backend: s.Backend, BackendGrants: i.PassesSandboxGrants(s.Backend)}
	need, err := i.Sandbox.Resolve(a)
	if err != nil {
		return i.Refuse.Refuse(s.Client, s.ID, a.Tool, err, nil)
	}
	g, err := i.Sandbox.Grant(a, need)
	if err != nil {
		return err
	}
	s.SandboxGrant, s.Start.SandboxGrant, s.Start.SandboxPoolGrant = g, g.Token(), g.PoolToken()
	return nil
}

// RuleIsolation is the violation of a backend that started a session or
// ran code without the isolation its sandbox grant required.
const RuleIsolation = "isolation"

// Honoured checks, before any user code reaches the kernel, that the
// backend started session s in container, inside its sandbox grant's
// isolation: the core created that container with the grant, or gave it
// the pooled container (created with the grant's standing twin) through
// a claim. The plugin is not trusted to have: a session its tenant
// requires gVisor for never runs under runc. The violation is audited.
func (i *Issuer) Honoured(s *session.Session, container string) error {
	g := s.SandboxGrant
	if g == nil || g.Isolation() == "" || g.Holds(container) {
		return nil
	}
	err := fmt.Errorf("the %s backend started session %q without the isolation its tenant requires (%s): nothing runs in it; the plugin did not pass its sandbox grant on (report it to the plugin's authors)", s.Backend, s.ID, g.Isolation())
	i.violation(s.Client, s.Internal, s.Backend, err)
	return err
}

// RunHonoured checks that a stateless run's container was created with
// its grant g or claimed for it; if not, the code ran outside the isolation its tenant
// requires: audited, and its result is withheld.
func (i *Issuer) RunHonoured(client, backendName string, g *sandboxgrant.Grant) error {
	if g == nil || g.Isolation() == "" || g.Mounted() > 0 {
		return nil
	}
	err := fmt.Errorf("the %s backend ran this code without the isolation its tenant requires (%s): its result is withheld; the plugin did not pass its sandbox grant on (report it to the plugin's authors)", backendName, g.Isolation())
	i.violation(client, "", backendName, err)
	return err
}

// violation audits a plugin that did not honour a grant.
func (i *Issuer) violation(client, internal, backendName string, err error) {
	i.Rec.Record(audit.Entry{Event: audit.SecurityViolation, Severity: audit.Critical, SessionID: internal, UserID: client, Success: false, Error: err.Error(),
		Details: map[string]any{"rule": RuleIsolation, "plugin": backendName}})
}
