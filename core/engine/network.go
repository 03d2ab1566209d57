package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/telemetry"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// Rules of network requests refused before any grant is looked at.
const (
	RuleNetworkSession     = "network-session"     // network asked for on a later call of a session started without
	RuleNetworkUnavailable = "network-unavailable" // this server grants no network
)

// network is how the engine grants hosts to a run: the operator's policy
// and the channels that carry a sandbox's connections to the proxy.
type network struct {
	policy   *egress.Policy
	channels *egress.Channels
}

// SetNetwork lets stateless runs ask for network (Request.Network).
func (e *Engine) SetNetwork(p *egress.Policy, c *egress.Channels) {
	e.network = &network{policy: p, channels: c}
}

// checkNetwork refuses what no grant could serve.
func (e *Engine) checkNetwork(req Request) error {
	switch {
	case len(req.Network) == 0 && len(req.Credentials) == 0:
		return nil
	case e.network == nil:
		return refusal.New(RuleNetworkUnavailable, "network %s: this server grants no network", quotedList(append(slices.Clip(req.Network), req.Credentials...)))
	}
	return nil
}

// netAsk is what a stateless run, or a session's first call, asks for.
type netAsk struct {
	hosts           []string
	credentials     []string
	client, session string // session: the internal id ("" for a stateless run)
	run, tool       string
	approve         toolbridge.Approver
}

// openNetwork grants what a run or session asked for under the policy and
// opens the channel its backend's container mounts. A refusal is audited
// with its rule.
func (e *Engine) openNetwork(ctx context.Context, a netAsk, backendName string) (_ *egress.Channel, err error) {
	ctx, span := telemetry.Start(ctx, "network.grant")
	defer func() { telemetry.End(span, err) }()
	g, err := e.network.policy.Grant(ctx, egress.Request{Hosts: a.hosts, Credentials: a.credentials, Tenant: tenant.Name(ctx), Client: a.client, Session: a.session, RunID: a.run,
		Approve: a.approve})
	if err != nil {
		return nil, e.refuse(a.client, a.session, a.tool, err, map[string]any{"run_id": a.run, "network": a.hosts, "creds": a.credentials})
	}
	ch, err := e.network.channels.Open(g, backendName)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("open the run's network channel: %w", err)
	}
	return ch, nil
}

// sessionNetwork checks a session call's network against the session's,
// which its container mounted when it started, and returns the notice of
// what the session's network has used.
func (e *Engine) sessionNetwork(s *session.Session, created bool, tools toolRun) (string, error) {
	hosts := append(slices.Clip(tools.network), tools.credentials...)
	if s.Network == nil {
		if len(hosts) > 0 && !created {
			return "", e.refuse(tools.client, s.ID, tools.tool, refusal.New(RuleNetworkSession, "network %s: session %q was started without network, and a session's network channel is mounted when its kernel starts: pass network on a session's first call (destroy_session, then call again with network), or run this code without session_id", quotedList(hosts), s.ID), map[string]any{"network": hosts})
		}
		return "", nil
	}
	n := networkNotice(s.Network, s.Backend)
	if len(hosts) > 0 && !created {
		n += "; network applies when a session starts: this session keeps what it was granted then"
	}
	return n, nil
}

// networkNotice says what the run was granted and used, or that its
// backend did not pass the grant on.
func networkNotice(ch *egress.Channel, backendName string) string {
	hosts := strings.Join(ch.Grant().Hosts(), ", ")
	if ch.Mounts() == 0 {
		return fmt.Sprintf("network was granted (%s) but the %s backend did not pass the grant to its sandbox, so the code had no network: use a backend that supports network", hosts, backendName)
	}
	n, up, down := ch.Grant().Used()
	if creds := ch.Grant().CredentialNames(); len(creds) > 0 {
		hosts += " with credential" + plural(len(creds)) + " " + strings.Join(creds, ", ") + " added by the proxy"
	}
	return fmt.Sprintf("network granted: %s (%d connection%s, %s sent, %s received)", hosts, n, plural(n), config.FormatSize(up), config.FormatSize(down))
}

func quotedList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = refusal.Quoted(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// secretsOf is the scrubber of a channel's credentials (nil: none).
func secretsOf(ch *egress.Channel) *sanitize.Secrets {
	if ch == nil {
		return nil
	}
	return ch.Grant().Secrets()
}

// scrubCredentials removes a run's credential values from what it returns
// (a host may echo one in a form the proxy does not replace: JSON-escaped,
// base64, hex). sc nil: the run had none.
func scrubCredentials(sc *sanitize.Secrets, res *backend.ExecuteResult) {
	if sc == nil {
		return
	}
	res.Stdout, res.Stderr, res.ResultRepr = sc.String(res.Stdout), sc.String(res.Stderr), sc.String(res.ResultRepr)
	if res.ResultJSON != "" {
		res.ResultJSON = string(sc.JSON([]byte(res.ResultJSON)))
	}
	for k, v := range res.Rich {
		res.Rich[k] = sc.String(v)
	}
	if e := res.Error; e != nil {
		e.Message = sc.String(e.Message)
		for i, l := range e.Traceback {
			e.Traceback[i] = sc.String(l)
		}
	}
}

// scrubbedEmit scrubs a run's progress output with the credentials of
// the channel current names once it is open.
func scrubbedEmit(emit func(backend.StreamEvent), current func() *egress.Channel) func(backend.StreamEvent) {
	if emit == nil {
		return nil
	}
	return func(ev backend.StreamEvent) {
		if sc := secretsOf(current()); sc != nil {
			ev.Text = sc.String(ev.Text)
		}
		emit(ev)
	}
}
