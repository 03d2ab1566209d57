package egress

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// MaxRequested bounds the hosts one run may ask for.
const MaxRequested = 64

// Budget bounds one grant.
type Budget struct {
	Connections int           // connections opened
	Upload      int64         // bytes sent, all connections together
	Download    int64         // bytes received
	Duration    time.Duration // from the grant
}

// Policy is [network]: what may be granted, to whom, within which budget.
type Policy struct {
	hosts    []config.HostPattern
	cidrs    []netip.Prefix
	tenants  map[string]lists
	budget   Budget
	approval bool
	rec      Recorder
}

type lists struct {
	hosts []config.HostPattern
	cidrs []netip.Prefix
}

// NewPolicy reads a validated [network] section; rec receives the audit
// lines of every grant and of every connection made under one.
func NewPolicy(c config.Network, rec Recorder) (*Policy, error) {
	if rec == nil {
		return nil, fmt.Errorf("egress: a policy needs an audit recorder: connections are never made unaudited")
	}
	p := &Policy{tenants: map[string]lists{}, approval: c.RequireApproval, rec: rec, budget: Budget{
		Connections: c.MaxConnections, Upload: int64(c.MaxUpload), Download: int64(c.MaxDownload),
		Duration: time.Duration(c.MaxDuration) * time.Second,
	}}
	if p.budget.Connections <= 0 || p.budget.Upload <= 0 || p.budget.Download <= 0 || p.budget.Duration <= 0 {
		return nil, fmt.Errorf("egress: network.max_connections, max_upload, max_download and max_duration must all be > 0 (validate the configuration first)")
	}
	var err error
	if p.hosts, p.cidrs, err = parseLists("network", c.AllowedHosts, c.AllowedCIDRs); err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(c.Tenants)) {
		t := c.Tenants[name]
		var l lists
		if l.hosts, l.cidrs, err = parseLists("network.tenants."+name, t.AllowedHosts, t.AllowedCIDRs); err != nil {
			return nil, err
		}
		p.tenants[name] = l
	}
	return p, nil
}

func parseLists(at string, hosts, cidrs []string) ([]config.HostPattern, []netip.Prefix, error) {
	var hs []config.HostPattern
	for i, h := range hosts {
		pat, err := config.ParseHostPattern(h)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.allowed_hosts[%d]: %w", at, i, err)
		}
		hs = append(hs, pat)
	}
	var cs []netip.Prefix
	for i, s := range cidrs {
		pfx, err := config.ParseCIDR(s)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.allowed_cidrs[%d]: %w", at, i, err)
		}
		cs = append(cs, pfx)
	}
	return hs, cs, nil
}

// Request is what a run asks for, and who asks (for the audit log).
type Request struct {
	Hosts   []string // "files.example.org", "api.example.org:443", "*.example.org", "203.0.113.7"
	Tenant  string   // a [network.tenants.NAME] adds its lists; others get the global ones
	Client  string   // the audit line's user_id
	Session string   // the audit line's session_id
	RunID   string
	Approve Approver // asked when network.require_approval; nil: the client cannot be asked
}

// Grant intersects what the run asked for with the policy (its global lists
// and its tenant's). A host the policy does not allow refuses the whole
// request, naming every such host (a *refusal.Error: the caller audits it,
// as every refusal); the grant itself is audited here. A host asked for
// without a port gets every port the policy allows it; a wildcard may be
// asked for when the policy allows a wildcard at or above it.
func (p *Policy) Grant(ctx context.Context, r Request) (*Grant, error) {
	if len(r.Hosts) == 0 {
		return nil, refusal.New(RuleEmpty, "network lists no host: ask for the hosts the code must reach (e.g. [\"files.example.org\", \"api.example.org:443\"]), or leave network out")
	}
	if len(r.Hosts) > MaxRequested {
		return nil, refusal.New(RuleHost, "network lists %d hosts, more than %d: ask for fewer (a *.domain wildcard covers a domain's hosts when the operator allows it)", len(r.Hosts), MaxRequested)
	}
	hosts, cidrs := p.hosts, p.cidrs
	where := "network.allowed_hosts"
	if t, ok := p.tenants[r.Tenant]; ok {
		hosts = append(slices.Clip(hosts), t.hosts...)
		cidrs = append(slices.Clip(cidrs), t.cidrs...)
		where += " and network.tenants." + r.Tenant
	}
	g := newGrant(p, r, cidrs)
	var bad []string
	portsOnly := true
	for _, h := range r.Hosts {
		want, err := config.ParseHostPattern(h)
		if err != nil {
			bad, portsOnly = append(bad, err.Error()), false
			continue
		}
		allowed := allowedPorts(want, hosts, cidrs)
		key := want
		key.Port = 0
		switch {
		case len(allowed) == 0:
			portsOnly = false
			if want.Addr.IsValid() {
				bad = append(bad, fmt.Sprintf("%s is an IP address the policy does not allow (an exact address in network.allowed_hosts, or a range of network.allowed_cidrs)", refusal.Quoted(h)))
			} else {
				bad = append(bad, fmt.Sprintf("%s is not an allowed host", refusal.Quoted(h)))
			}
		case want.Port != 0 && !slices.Contains(allowed, want.Port):
			bad = append(bad, fmt.Sprintf("%s: the policy allows %s on port%s %s only", refusal.Quoted(h), key, plural(allowed), joinPorts(allowed)))
		case want.Port != 0:
			g.add(key, []int{want.Port})
		default:
			g.add(key, allowed)
		}
	}
	if len(bad) > 0 {
		rule := RuleHost
		if portsOnly {
			rule = RulePort
		}
		return nil, refusal.New(rule, "network refused: %s. Ask only for what the operator allows (%s; ports 80 and 443 unless a port is listed), or ask the operator to add it", strings.Join(bad, "; "), where)
	}
	if p.approval {
		if err := g.approve(ctx, r.Approve); err != nil {
			return nil, err
		}
	}
	g.start()
	p.rec.Record(audit.Entry{Event: EventGrant, Severity: audit.Info, SessionID: r.Session, UserID: r.Client, Success: true,
		Details: map[string]any{"hosts": g.Hosts(), "run_id": r.RunID, "tenant": r.Tenant, "max_connections": g.budget.Connections,
			"max_upload": g.budget.Upload, "max_download": g.budget.Download, "max_duration_s": int(g.budget.Duration / time.Second)}})
	return g, nil
}

// allowedPorts is the union of the ports of every policy entry that covers
// want (nil: none does).
func allowedPorts(want config.HostPattern, hosts []config.HostPattern, cidrs []netip.Prefix) []int {
	var ports []int
	add := func(pat config.HostPattern) {
		if pat.Port == 0 {
			ports = append(ports, config.DefaultPorts...)
		} else {
			ports = append(ports, pat.Port)
		}
	}
	for _, pat := range hosts {
		if covers(pat, want) {
			add(pat)
		}
	}
	if want.Addr.IsValid() {
		for _, c := range cidrs {
			if c.Contains(want.Addr) {
				add(config.HostPattern{})
			}
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// covers reports whether the policy entry pat allows the host of want
// (ports aside).
func covers(pat, want config.HostPattern) bool {
	switch {
	case want.Addr.IsValid() || pat.Addr.IsValid():
		return pat.Addr.IsValid() && want.Addr.IsValid() && pat.Addr == want.Addr
	case !pat.Wildcard():
		return !want.Wildcard() && pat.Name == want.Name
	}
	suffix := pat.Name[1:] // ".example.org"
	if want.Wildcard() {
		return want.Name == pat.Name || strings.HasSuffix(want.Name[1:], suffix)
	}
	return strings.HasSuffix(want.Name, suffix)
}

func plural(ports []int) string {
	if len(ports) == 1 {
		return ""
	}
	return "s"
}

func joinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, ", ")
}
