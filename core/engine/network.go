package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/tenant"
)

// Rules of network requests refused before any grant is looked at.
const (
	RuleNetworkSession     = "network-session"     // network asked for in a session
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
	case len(req.Network) == 0:
		return nil
	case req.SessionID != "":
		return refusal.New(RuleNetworkSession, "network %s: a session cannot be granted network yet (its kernel outlives any one run's grant): omit session_id to run the code in a fresh container with network, and pass data to the session as input files", quotedList(req.Network))
	case e.network == nil:
		return refusal.New(RuleNetworkUnavailable, "network %s: this server grants no network", quotedList(req.Network))
	}
	return nil
}

// openNetwork grants what the run asked for under the policy and opens
// the channel its backend's container mounts. A refusal is audited with
// its rule.
func (e *Engine) openNetwork(ctx context.Context, req Request, runID, backendName string) (*egress.Channel, error) {
	g, err := e.network.policy.Grant(ctx, egress.Request{Hosts: req.Network, Tenant: tenant.Name(ctx), Client: req.Client, RunID: runID,
		Approve: egress.Approver(req.Approve)})
	if err != nil {
		return nil, e.refuse(req.Client, "", "execute_"+req.Language, err, map[string]any{"run_id": runID, "network": req.Network})
	}
	ch, err := e.network.channels.Open(g, backendName)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("open the run's network channel: %w", err)
	}
	return ch, nil
}

// networkNotice says what the run was granted and used, or that its
// backend did not pass the grant on.
func networkNotice(ch *egress.Channel, backendName string) string {
	hosts := strings.Join(ch.Grant().Hosts(), ", ")
	if ch.Mounts() == 0 {
		return fmt.Sprintf("network was granted (%s) but the %s backend did not pass the grant to its sandbox, so the code had no network: use a backend that supports network", hosts, backendName)
	}
	n, up, down := ch.Grant().Used()
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
