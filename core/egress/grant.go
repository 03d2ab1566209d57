package egress

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/config/hostpattern"
	"github.com/mcp-forge/mcp-forge/core/egress/credential"
	"github.com/mcp-forge/mcp-forge/core/grant"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// Grant is the network of one run: the hosts and ports it may reach, the
// ranges it may reach although they are refused by default, its budget and
// its open connections. Close ends it. Its run, life, connections and
// audit lines are a grant.Grant's: it never serves another run.
type Grant struct {
	*grant.Grant
	budget Budget
	cidrs  []netip.Prefix

	names map[string][]int     // exact names
	wild  map[string][]int     // "*.example.org" → ports
	ips   map[netip.Addr][]int // IP literals

	creds   []*credential.Granted // credentials the proxy adds (core/egress/proxy)
	ca      *credential.Authority // with creds: the CA only this run's sandbox trusts
	secrets *sanitize.Secrets     // with creds: their values in every form, for results

	mu     sync.Mutex
	opened int
	// refusals counts refused connections; past MaxRefusalLines they are
	// not audited one by one. overflow counts connections closed past
	// MaxOpen.
	refusals, overflow int
	up                 int64
	down               int64
}

func newGrant(p *Policy, r Request, cidrs []netip.Prefix) *Grant {
	g := &Grant{budget: p.budget, cidrs: slices.Clone(cidrs), names: map[string][]int{}, wild: map[string][]int{}, ips: map[netip.Addr][]int{}}
	g.Grant = grant.New(grant.Config{Rec: p.rec, Session: r.Session, Tenant: r.Tenant, Ended: g.Ended,
		Run: grant.Run{ID: r.RunID, Client: r.Client, Approve: r.Approve}})
	return g
}

// Conn is a connection of the grant; Cut closes it and says why.
type Conn = grant.Conn

// add grants ports of a host (a pattern without its port).
func (g *Grant) add(h hostpattern.Pattern, ports []int) {
	m, k := g.names, h.Name
	switch {
	case h.Addr.IsValid():
		g.ips[h.Addr] = union(g.ips[h.Addr], ports)
		return
	case h.Wildcard():
		m = g.wild
	}
	m[k] = union(m[k], ports)
}

func union(a, b []int) []int {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// approve asks the run's client for the grant (network.require_approval).
func (g *Grant) approve(ctx context.Context) error {
	hosts := strings.Join(g.Hosts(), ", ")
	if names := g.CredentialNames(); len(names) == 1 {
		hosts += " (adding credential " + names[0] + ")"
	} else if len(names) > 1 {
		hosts += " (adding credentials " + strings.Join(names, ", ") + ")"
	}
	return g.Approve(ctx, grant.Question{Text: "Allow this run to connect to " + hosts + "?", Rule: RuleApproval,
		Failed:    "ask for approval of network to " + hosts,
		CannotAsk: "network to " + hosts + " needs the user's approval (network.require_approval) and this client cannot be asked (it does not support elicitation): use a client that does, or ask the operator",
		Declined:  "network to " + hosts + " was declined by the user"})
}

// Hosts lists what was granted, one "host:port" each, sorted: for the
// result's notices and the audit log.
func (g *Grant) Hosts() []string {
	var out []string
	emit := func(h string, ports []int, v6 bool) {
		for _, p := range ports {
			if v6 {
				out = append(out, fmt.Sprintf("[%s]:%d", h, p))
			} else {
				out = append(out, fmt.Sprintf("%s:%d", h, p))
			}
		}
	}
	for _, m := range []map[string][]int{g.names, g.wild} {
		for _, h := range slices.Sorted(maps.Keys(m)) {
			emit(h, m[h], false)
		}
	}
	for _, a := range slices.SortedFunc(maps.Keys(g.ips), func(a, b netip.Addr) int { return a.Compare(b) }) {
		emit(a.String(), g.ips[a], a.Is6())
	}
	return out
}

// Close ends the grant (the run ended): every open connection is cut and
// new ones are refused. Idempotent.
func (g *Grant) Close() {
	g.End(RuleClosed)
	g.mu.Lock()
	suppressed, overflow := max(g.refusals-MaxRefusalLines, 0), g.overflow
	g.refusals, g.overflow = min(g.refusals, MaxRefusalLines), 0
	g.mu.Unlock()
	if suppressed > 0 || overflow > 0 {
		g.Record(EventSuppressed, false, "", map[string]any{"refused": suppressed, "closed_over_open_limit": overflow, "rule": RuleOpenConnections})
	}
}

// Overflowed counts a client connection closed over MaxOpen (or the
// proxy's MaxOpenAll); the first one is audited, later ones counted.
func (g *Grant) Overflowed() {
	g.mu.Lock()
	g.overflow++
	first := g.overflow == 1
	g.mu.Unlock()
	if first {
		g.Record(EventConnection, false, fmt.Sprintf("this run holds %d connections to the proxy open at once: more are closed (counted when the run ends)", MaxOpen),
			map[string]any{"outcome": OutcomeRefused, "rule": RuleOpenConnections, "host": "-", "method": "-"})
	}
}

// Check refuses a target the grant does not name: its host, then its port.
func (g *Grant) Check(t hostpattern.Pattern) error {
	var ports []int
	switch {
	case t.Addr.IsValid():
		var ok bool
		if ports, ok = g.ips[t.Addr]; !ok {
			return refusal.New(RuleIPLiteral, "%s is an IP address this run was not granted: connect by a granted name (%s)", t.Host(), g.list())
		}
	default:
		ports = g.names[t.Name]
		for w, ps := range g.wild {
			if strings.HasSuffix(t.Name, w[1:]) {
				ports = union(ports, ps)
			}
		}
		if ports == nil {
			return refusal.New(RuleHost, "%s is not granted to this run (granted: %s): ask for it in the run's network list", t.Host(), g.list())
		}
	}
	if !slices.Contains(ports, t.Port) {
		return refusal.New(RulePort, "%s is granted on port%s %s only, not %d", t.Host(), plural(ports), joinPorts(ports), t.Port)
	}
	return nil
}

// CredentialNames are the credentials granted, sorted.
func (g *Grant) CredentialNames() []string {
	var out []string
	for _, c := range g.creds {
		out = append(out, c.Name)
	}
	return out
}

// Secrets matches the values of the grant's credentials in the forms a
// program prints them in (nil: no credential): what the run returns is
// scrubbed with it, in case a host echoed a value in a form the proxy's
// own replacement does not know.
func (g *Grant) Secrets() *sanitize.Secrets { return g.secrets }

// CredentialFor is the credential of t (a name and port), nil for none.
func (g *Grant) CredentialFor(t hostpattern.Pattern) *credential.Granted {
	for _, c := range g.creds {
		if c.Covers(t) {
			return c
		}
	}
	return nil
}

// Authority is the CA of the grant's credentials, the one its sandbox
// trusts (nil: no credential).
func (g *Grant) Authority() *credential.Authority { return g.ca }

// RangeGranted reports whether a range the grant may reach although it is
// refused by default (network.allowed_cidrs) holds a.
func (g *Grant) RangeGranted(a netip.Addr) bool {
	for _, c := range g.cidrs {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

func (g *Grant) list() string { return strings.Join(g.Hosts(), ", ") }

// Open counts a new upstream connection against the budget.
func (g *Grant) Open() error {
	if err := g.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened >= g.budget.Connections {
		return refusal.New(RuleBudgetConnections, "this run opened its %d connections (network.max_connections): open fewer (reuse connections, or fetch less)", g.budget.Connections)
	}
	g.opened++
	return nil
}

// Ended is the error of a connection refused or cut by rule.
func (g *Grant) Ended(rule string) error {
	switch rule {
	case RuleClosed:
		return refusal.New(RuleClosed, "the run this network was granted to has ended")
	case RuleBudgetDuration:
		return refusal.New(RuleBudgetDuration, "this run's network time is over (network.max_duration, %s)", g.budget.Duration)
	case RuleBudgetUpload:
		return refusal.New(RuleBudgetUpload, "this run sent its %s (network.max_upload)", config.FormatSize(g.budget.Upload))
	case RuleBudgetDownload:
		return refusal.New(RuleBudgetDownload, "this run received its %s (network.max_download)", config.FormatSize(g.budget.Download))
	}
	return refusal.New(rule, "this run's network has ended (%s)", rule)
}

// TrackUpstream tracks c, a connection to a granted host, and counts its
// bytes against the budget.
func (g *Grant) TrackUpstream(c net.Conn) (*Upstream, error) {
	t, err := g.Track(c)
	if err != nil {
		return nil, err
	}
	return &Upstream{Conn: t, g: g}, nil
}

// take admits n bytes in one direction within the budget and returns how
// many fit; past the budget the grant is spent (every connection cut).
func (g *Grant) take(upload bool, n int) int {
	if n <= 0 {
		return n
	}
	g.mu.Lock()
	used, limit, rule := &g.down, g.budget.Download, RuleBudgetDownload
	if upload {
		used, limit, rule = &g.up, g.budget.Upload, RuleBudgetUpload
	}
	fit := int64(n)
	if left := limit - *used; fit > left {
		fit = max(left, 0)
	}
	*used += fit
	g.mu.Unlock()
	if fit < int64(n) {
		g.End(rule)
	}
	return int(fit)
}

// Used is what the grant has spent: connections opened, bytes sent and
// received.
func (g *Grant) Used() (connections int, upload, download int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.opened, g.up, g.down
}

// errBudget ends a copy at the edge of a byte budget.
var errBudget = errors.New("egress: byte budget spent")

// Upstream is a connection to a granted host whose bytes count against
// the grant (writes are uploads, reads downloads) and towards its audit
// line.
type Upstream struct {
	*Conn
	g        *Grant
	up, down atomic.Int64
}

func (c *Upstream) Write(b []byte) (int, error) {
	fit := c.g.take(true, len(b))
	n, err := c.Conn.Write(b[:fit])
	c.up.Add(int64(n))
	if err == nil && fit < len(b) {
		err = errBudget
	}
	return n, err
}

func (c *Upstream) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	fit := c.g.take(false, n)
	c.down.Add(int64(fit))
	if fit < n {
		return fit, errBudget
	}
	return n, err
}

// Sent is the bytes written upstream so far.
func (c *Upstream) Sent() int64 { return c.up.Load() }

// Received is the bytes read from upstream so far.
func (c *Upstream) Received() int64 { return c.down.Load() }

// CloseWrite half-closes a TCP connection (a tunnel whose client finished
// sending).
func (c *Upstream) CloseWrite() error {
	if cw, ok := c.Conn.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// CountRefusal counts a refusal of the grant (a connection's, or a
// request's in an intercepted connection) and reports whether it is past
// MaxRefusalLines: counted then, not written line by line.
func (g *Grant) CountRefusal() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refusals++
	return g.refusals > MaxRefusalLines
}
