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
	"time"

	"github.com/mcp-forge/mcp-forge/core/approval"
	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/config/hostpattern"
	"github.com/mcp-forge/mcp-forge/core/egress/credential"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// Grant is the network of one run: the hosts and ports it may reach, the
// ranges it may reach although they are refused by default, its budget and
// its open connections. Close ends it.
type Grant struct {
	rec     Recorder
	budget  Budget
	cidrs   []netip.Prefix
	tenant  string
	client  string
	session string
	run     string

	names map[string][]int     // exact names
	wild  map[string][]int     // "*.example.org" → ports
	ips   map[netip.Addr][]int // IP literals

	creds   []*credential.Granted // credentials the proxy adds (core/egress/proxy)
	ca      *credential.Authority // with creds: the CA only this run's sandbox trusts
	secrets *sanitize.Secrets     // with creds: their values in every form, for results

	mu     sync.Mutex
	timer  *time.Timer
	conns  map[*Conn]struct{}
	opened int
	// refusals counts refused connections; past MaxRefusalLines they are
	// not audited one by one. overflow counts connections closed past
	// MaxOpen.
	refusals, overflow int
	up                 int64
	down               int64
	spent              string // the rule that ended the grant ("" while it lives)
}

func newGrant(p *Policy, r Request, cidrs []netip.Prefix) *Grant {
	return &Grant{rec: p.rec, budget: p.budget, cidrs: slices.Clone(cidrs), tenant: r.Tenant, client: r.Client, session: r.Session, run: r.RunID,
		names: map[string][]int{}, wild: map[string][]int{}, ips: map[netip.Addr][]int{}, conns: map[*Conn]struct{}{}}
}

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

// approve asks the user for the grant (network.require_approval).
func (g *Grant) approve(ctx context.Context, ask approval.Approver) error {
	hosts := strings.Join(g.Hosts(), ", ")
	if names := g.CredentialNames(); len(names) == 1 {
		hosts += " (adding credential " + names[0] + ")"
	} else if len(names) > 1 {
		hosts += " (adding credentials " + strings.Join(names, ", ") + ")"
	}
	answer, err := approval.Ask(ctx, ask, "Allow this run to connect to "+hosts+"?")
	switch answer {
	case approval.Failed:
		return fmt.Errorf("ask for approval of network to %s: %w", hosts, err)
	case approval.CannotAsk:
		return refusal.New(RuleApproval, "network to %s needs the user's approval (network.require_approval) and this client cannot be asked (it does not support elicitation): use a client that does, or ask the operator", hosts)
	case approval.Declined:
		return refusal.New(RuleApproval, "network to %s was declined by the user", hosts)
	}
	return nil
}

// start begins the grant's time budget.
func (g *Grant) start() {
	g.timer = time.AfterFunc(g.budget.Duration, func() { g.spend(RuleBudgetDuration) })
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
	g.spend(RuleClosed)
	g.mu.Lock()
	suppressed, overflow := max(g.refusals-MaxRefusalLines, 0), g.overflow
	g.refusals, g.overflow = min(g.refusals, MaxRefusalLines), 0
	g.mu.Unlock()
	if suppressed > 0 || overflow > 0 {
		g.rec.Record(audit.Entry{Event: EventSuppressed, Severity: audit.Warning, SessionID: g.session, UserID: g.client, Success: false,
			Details: map[string]any{"run_id": g.run, "refused": suppressed, "closed_over_open_limit": overflow, "rule": RuleOpenConnections}})
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
		g.rec.Record(audit.Entry{Event: EventConnection, Severity: audit.Warning, SessionID: g.session, UserID: g.client, Success: false,
			Error:   fmt.Sprintf("this run holds %d connections to the proxy open at once: more are closed (counted when the run ends)", MaxOpen),
			Details: map[string]any{"run_id": g.run, "outcome": OutcomeRefused, "rule": RuleOpenConnections, "host": "-", "method": "-"}})
	}
}

// spend ends the grant with rule: open connections are cut.
func (g *Grant) spend(rule string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.spent != "" {
		return
	}
	g.spent = rule
	if g.timer != nil {
		g.timer.Stop()
	}
	for t := range g.conns {
		t.Cut(rule)
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
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.spentErr(); err != nil {
		return err
	}
	if g.opened >= g.budget.Connections {
		return refusal.New(RuleBudgetConnections, "this run opened its %d connections (network.max_connections): open fewer (reuse connections, or fetch less)", g.budget.Connections)
	}
	g.opened++
	return nil
}

// spentErr is the refusal of a spent grant. Called with mu held.
func (g *Grant) spentErr() error {
	if g.spent == "" {
		return nil
	}
	return g.Ended(g.spent)
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

// Track registers a connection so that the grant's end can cut it; a
// spent grant refuses it.
func (g *Grant) Track(c net.Conn) (*Conn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.spentErr(); err != nil {
		return nil, err
	}
	t := &Conn{Conn: c}
	g.conns[t] = struct{}{}
	return t, nil
}

// Untrack forgets a connection that ended.
func (g *Grant) Untrack(t *Conn) {
	g.mu.Lock()
	delete(g.conns, t)
	g.mu.Unlock()
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
		g.spend(rule)
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

// Conn is a connection of the grant; Cut closes it and says why.
type Conn struct {
	net.Conn
	why atomic.Pointer[string]
}

// Cut closes the connection by rule (the first rule given is kept).
func (t *Conn) Cut(rule string) {
	t.why.CompareAndSwap(nil, &rule)
	_ = t.Conn.Close()
}

// CutBy is the rule that cut the connection, "" if none did.
func (t *Conn) CutBy() string {
	if p := t.why.Load(); p != nil {
		return *p
	}
	return ""
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

// CheckAudit fails while the audit log cannot be written: the proxy then
// makes no connection nobody could trace.
func (g *Grant) CheckAudit() error { return audit.Check(g.rec) }

// Record writes an audit line of the grant's run (a connection's, a
// request's): d gets the run and its tenant.
func (g *Grant) Record(event string, ok bool, errText string, d map[string]any) {
	d["run_id"] = g.run
	if g.tenant != "" {
		d["tenant"] = g.tenant
	}
	sev := audit.Info
	if !ok {
		sev = audit.Warning
	}
	g.rec.Record(audit.Entry{Event: event, Severity: sev, SessionID: g.session, UserID: g.client, Success: ok, Error: errText, Details: d})
}
