// Package network grants hosts to runs under the operator's network policy
// (core/egress): a stateless run's or a session's grant, the channel its
// sandbox mounts to reach the egress proxy, the notice of what it used, and
// the credential values the proxy added kept out of what the run returns.
package network

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/refusal"
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

// Refuser audits a refusal with its rule and returns it (engine.Engine.Refuse).
type Refuser interface {
	Refuse(client, sessionID, tool string, err error, details map[string]any) error
}

// Grants is how runs get hosts: the operator's policy and the channels
// that carry a sandbox's connections to the proxy. A nil *Grants grants
// nothing.
type Grants struct {
	policy   *egress.Policy
	channels *egress.Channels
	refuse   Refuser
}

// New grants under p through c, refusals audited by r.
func New(p *egress.Policy, c *egress.Channels, r Refuser) *Grants {
	return &Grants{policy: p, channels: c, refuse: r}
}

// Check refuses what no grant could serve.
func (g *Grants) Check(hosts, credentials []string) error {
	switch {
	case len(hosts) == 0 && len(credentials) == 0:
		return nil
	case g == nil:
		return refusal.New(RuleNetworkUnavailable, "network %s: this server grants no network", QuotedList(append(slices.Clip(hosts), credentials...)))
	}
	return nil
}

// Ask is what a stateless run, or a session's first call, asks for.
type Ask struct {
	Hosts           []string
	Credentials     []string
	Client, Session string // Session: the internal id ("" for a stateless run)
	Run, Tool       string
	Approve         toolbridge.Approver
}

// Open grants what a run or session asked for under the policy and opens
// the channel its backend's container mounts. A refusal is audited with
// its rule.
func (g *Grants) Open(ctx context.Context, a Ask, backendName string) (_ *egress.Channel, err error) {
	ctx, span := telemetry.Start(ctx, "network.grant")
	defer func() { telemetry.End(span, err) }()
	gr, err := g.policy.Grant(ctx, egress.Request{Hosts: a.Hosts, Credentials: a.Credentials, Tenant: tenant.Name(ctx), Client: a.Client, Session: a.Session, RunID: a.Run,
		Approve: a.Approve})
	if err != nil {
		return nil, g.refuse.Refuse(a.Client, a.Session, a.Tool, err, map[string]any{"run_id": a.Run, "network": a.Hosts, "creds": a.Credentials})
	}
	ch, err := g.channels.Open(gr, backendName)
	if err != nil {
		gr.Close()
		return nil, fmt.Errorf("open the run's network channel: %w", err)
	}
	return ch, nil
}

// SessionNotice checks a session call's network (hosts) against the
// session's channel ch, which its container mounted when it started
// (created: by this call), and returns the notice of what the session's
// network has used. The refusal is the caller's to audit.
func SessionNotice(ch *egress.Channel, sessionID, backendName string, created bool, hosts []string) (string, error) {
	if ch == nil {
		if len(hosts) > 0 && !created {
			return "", refusal.New(RuleNetworkSession, "network %s: session %q was started without network, and a session's network channel is mounted when its kernel starts: pass network on a session's first call (destroy_session, then call again with network), or run this code without session_id", QuotedList(hosts), sessionID)
		}
		return "", nil
	}
	n := Notice(ch, backendName)
	if len(hosts) > 0 && !created {
		n += "; network applies when a session starts: this session keeps what it was granted then"
	}
	return n, nil
}

// Notice says what the run was granted and used, or that its backend did
// not pass the grant on.
func Notice(ch *egress.Channel, backendName string) string {
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

// QuotedList shows names the caller sent, each cut short.
func QuotedList(l []string) string {
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

// Secrets is the scrubber of a channel's credentials (nil: none).
func Secrets(ch *egress.Channel) *sanitize.Secrets {
	if ch == nil {
		return nil
	}
	return ch.Grant().Secrets()
}

// Scrub removes a run's credential values from what it returns (a host
// may echo one in a form the proxy does not replace: JSON-escaped, base64,
// hex). sc nil: the run had none.
func Scrub(sc *sanitize.Secrets, res *backend.ExecuteResult) {
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

// ScrubbedEmit scrubs a run's progress output with the credentials of the
// channel current names once it is open.
func ScrubbedEmit(emit func(backend.StreamEvent), current func() *egress.Channel) func(backend.StreamEvent) {
	if emit == nil {
		return nil
	}
	return func(ev backend.StreamEvent) {
		if sc := Secrets(current()); sc != nil {
			ev.Text = sc.String(ev.Text)
		}
		emit(ev)
	}
}
