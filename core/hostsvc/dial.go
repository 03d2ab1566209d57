package hostsvc

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Rules of the audit lines of endpoints and channels (docs/audit.md).
const (
	RuleEndpointIntent     = "endpoint-intent"     // an intent's endpoint badly named or placed
	RuleEndpointNotOwned   = "endpoint-not-owned"  // a Dial to a container the plugin did not create
	RuleEndpointUndeclared = "endpoint-undeclared" // a Dial to an endpoint the intent did not declare
	RuleEndpointLink       = "endpoint-link"       // a link where the sandbox's socket should be
	RuleEndpointType       = "endpoint-type"       // something else than a socket there
	RuleEndpointLimit      = "endpoint-limit"      // a Dial past the plugin's open channels (the SDK's MaxOpenChannels)
)

// Endpoint is an endpoint a container declared, as the core placed it.
type Endpoint struct {
	ContainerID string
	Name        string
	Path        string               // the socket's path in the container
	Workspace   *workspace.Workspace // the workspace mounted where Path lies
	Rel         string               // Path's place in Workspace
}

// Channels connects the core to an endpoint of a sandbox: the one step of
// Dial that depends on where containers run and what they run under.
type Channels interface {
	DialEndpoint(ctx context.Context, ep Endpoint) (net.Conn, error)
}

// managerSockets reaches an endpoint where the sandbox manager says its
// container's sockets are (sandbox.Manager.Sockets): from inside the
// sandbox through the runtime (a pod, a gVisor sandbox), else at the
// endpoint's place in the workspace on this host, without following any
// link the sandbox may have planted (workspace.DialSocket).
type managerSockets struct{ m *sandbox.Manager }

// DialEndpoint implements Channels.
func (s managerSockets) DialEndpoint(ctx context.Context, ep Endpoint) (net.Conn, error) {
	if d := s.m.Sockets(ep.ContainerID); d != nil {
		c, err := d.DialSocket(ctx, ep.ContainerID, ep.Path)
		if errors.Is(err, runtime.ErrNoListener) {
			return nil, fmt.Errorf("%w: %v", workspace.ErrNoListener, err)
		}
		return c, err
	}
	return ep.Workspace.DialSocket(ctx, ep.Rel)
}

// SetChannels replaces how endpoints are reached (managerSockets by
// default).
func (h *Host) SetChannels(c Channels) { h.channels = c }

// Dial implements host.Sandbox: only an endpoint declared in the intent of
// a container this plugin created. Opens and refusals are audited; "nothing
// listens yet" is not, since a plugin polls through it while its sandbox
// starts.
func (h *Host) Dial(ctx context.Context, id, name string) (net.Conn, error) {
	// What the plugin sent is cut before it is logged: a refused Dial of a
	// megabyte-long id would otherwise write it twice per line.
	details := map[string]any{"container_id": refusal.Cut(id), "plugin": h.plugin, "endpoint": refusal.Cut(name)}
	t, err := h.workspaceOf(id)
	if err != nil {
		h.refuseDial("", RuleEndpointNotOwned, details, err, false)
		return nil, err
	}
	h.mu.Lock()
	ep, ok := t.endpoints[name]
	h.mu.Unlock()
	if !ok {
		err := host.Errorf(host.KindNotFound, "container %s declares no endpoint %s (declare it in the intent's Endpoints)", refusal.Cut(id), refusal.Quoted(name))
		h.refuseDial(t.SessionID, RuleEndpointUndeclared, details, err, false)
		return nil, err
	}
	details["path"] = ep.Path
	conn, err := h.channels.DialEndpoint(ctx, ep)
	switch {
	case err == nil:
		h.rec.Record(audit.Entry{Event: audit.ChannelOpen, SessionID: t.SessionID, Success: true, Details: details})
		return conn, nil
	case errors.Is(err, workspace.ErrNoListener):
		return nil, host.Errorf(host.KindUnavailable, "endpoint %q of container %s: %v (retry once the sandbox listens)", name, id, err)
	case errors.Is(err, workspace.ErrLink):
		err = host.Errorf(host.KindPolicy, "endpoint %q of container %s: %v; refusing to follow it", name, id, err)
		h.refuseDial(t.SessionID, RuleEndpointLink, details, err, true)
	case errors.Is(err, workspace.ErrNotSocket):
		err = host.Errorf(host.KindPolicy, "endpoint %q of container %s: %v; refusing to connect", name, id, err)
		h.refuseDial(t.SessionID, RuleEndpointType, details, err, true)
	default:
		err = host.Errorf(host.KindInternal, "endpoint %q of container %s: %v", name, id, err)
		h.rec.Record(audit.Entry{Event: audit.ChannelOpen, Severity: audit.Error, SessionID: t.SessionID, Success: false, Error: err.Error(), Details: details})
	}
	return nil, err
}

// RefuseChannel audits a Dial the plugin connection refused before it got
// here: the plugin had too many channels open.
func (h *Host) RefuseChannel(id, name string, err error) {
	h.refuseDial("", RuleEndpointLimit, map[string]any{"container_id": refusal.Cut(id), "plugin": h.plugin, "endpoint": refusal.Cut(name)}, err, false)
}

// refuseDial audits a refused Dial under rule: a channel.open the plugin
// got wrong, or, when the sandbox put something else than its socket at
// the endpoint (sandbox), a security.violation.
func (h *Host) refuseDial(sessionID, rule string, details map[string]any, err error, sandbox bool) {
	d := map[string]any{"rule": rule}
	for k, v := range details {
		d[k] = v
	}
	event := audit.ChannelOpen
	if sandbox {
		event = audit.SecurityViolation
		d["operation"] = audit.ChannelOpen
	}
	h.rec.Record(audit.Entry{Event: event, Severity: audit.Warning, SessionID: sessionID, Success: false, Error: err.Error(), Details: d})
}
