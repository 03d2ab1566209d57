package egress

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/mcp-forge/mcp-forge/core/approval"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/config/hostpattern"
	"github.com/mcp-forge/mcp-forge/core/egress/credential"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
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
	hosts    []hostpattern.Pattern
	cidrs    []netip.Prefix
	tenants  map[string]lists
	budget   Budget
	approval bool
	rec      Recorder
	creds    credentials
}

type lists struct {
	hosts []hostpattern.Pattern
	cidrs []netip.Prefix
}

// NewPolicy reads a validated [network] section; rec receives the audit
// lines of every grant and of every connection made under one.
// tenantCredentials are the [tenants.NAME.credentials] tables (nil: none).
func NewPolicy(c config.Network, tenantCredentials map[string]map[string]config.Credential, rec Recorder) (*Policy, error) {
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
	if p.creds, err = p.parseCredentials(c, tenantCredentials); err != nil {
		return nil, err
	}
	return p, nil
}

// parseCredentials reads [network.credentials] and each tenant's, checking
// that the policy allows every host they belong to (the tenant's lists
// count for its own).
func (p *Policy) parseCredentials(c config.Network, tenants map[string]map[string]config.Credential) (credentials, error) {
	cs := credentials{global: map[string]*credential.Credential{}, tenants: map[string]map[string]*credential.Credential{}}
	parse := func(where, tenant, name string, cc config.Credential) (*credential.Credential, error) {
		cr, err := credential.Parse(where, name, cc)
		if err != nil {
			return nil, err
		}
		hosts, cidrs := p.lists(tenant)
		lists := "network.allowed_hosts"
		if tenant != "" {
			lists += " or network.tenants." + tenant
		}
		for i, h := range cr.Hosts {
			if !slices.Contains(allowedPorts(h, hosts, cidrs), h.Port) {
				return nil, fmt.Errorf("%s.hosts[%d]: %s is not allowed by %s on that port: allow it there, or remove it", where, i, h, lists)
			}
		}
		return cr, nil
	}
	for _, name := range slices.Sorted(maps.Keys(c.Credentials)) {
		cr, err := parse("network.credentials."+name, "", name, c.Credentials[name])
		if err != nil {
			return cs, err
		}
		cs.global[name] = cr
	}
	for _, tn := range slices.Sorted(maps.Keys(tenants)) {
		cs.tenants[tn] = map[string]*credential.Credential{}
		for _, name := range slices.Sorted(maps.Keys(tenants[tn])) {
			cr, err := parse("tenants."+tn+".credentials."+name, tn, name, tenants[tn][name])
			if err != nil {
				return cs, err
			}
			cs.tenants[tn][name] = cr
		}
	}
	return cs, nil
}

// lists are the hosts and ranges a run of tenant may be granted.
func (p *Policy) lists(tenant string) ([]hostpattern.Pattern, []netip.Prefix) {
	hosts, cidrs := p.hosts, p.cidrs
	if t, ok := p.tenants[tenant]; ok {
		hosts = append(slices.Clip(hosts), t.hosts...)
		cidrs = append(slices.Clip(cidrs), t.cidrs...)
	}
	return hosts, cidrs
}

func parseLists(at string, hosts, cidrs []string) ([]hostpattern.Pattern, []netip.Prefix, error) {
	var hs []hostpattern.Pattern
	for i, h := range hosts {
		pat, err := hostpattern.Parse(h)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.allowed_hosts[%d]: %w", at, i, err)
		}
		hs = append(hs, pat)
	}
	var cs []netip.Prefix
	for i, s := range cidrs {
		pfx, err := hostpattern.ParseCIDR(s)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.allowed_cidrs[%d]: %w", at, i, err)
		}
		cs = append(cs, pfx)
	}
	return hs, cs, nil
}

// Request is what a run asks for, and who asks (for the audit log).
type Request struct {
	Hosts []string // "files.example.org", "api.example.org:443", "*.example.org", "203.0.113.7"
	// Credentials are names of configured credentials: their hosts are
	// granted with them.
	Credentials []string
	Tenant      string // a [network.tenants.NAME] adds its lists; others get the global ones
	Client      string // the audit line's user_id
	Session     string // the audit line's session_id
	RunID       string
	Approve     approval.Approver // asked when network.require_approval; nil: the client cannot be asked
}

// Grant intersects what the run asked for with the policy (its global lists
// and its tenant's). A host the policy does not allow refuses the whole
// request, naming every such host (a *refusal.Error: the caller audits it,
// as every refusal); the grant itself is audited here. A host asked for
// without a port gets every port the policy allows it; a wildcard may be
// asked for when the policy allows a wildcard at or above it.
func (p *Policy) Grant(ctx context.Context, r Request) (*Grant, error) {
	if len(r.Hosts) == 0 && len(r.Credentials) == 0 {
		return nil, refusal.New(RuleEmpty, "network lists no host: ask for the hosts the code must reach (e.g. [\"files.example.org\", \"api.example.org:443\"]), or leave network out")
	}
	if len(r.Hosts) > MaxRequested {
		return nil, refusal.New(RuleHost, "network lists %d hosts, more than %d: ask for fewer (a *.domain wildcard covers a domain's hosts when the operator allows it)", len(r.Hosts), MaxRequested)
	}
	hosts, cidrs := p.lists(r.Tenant)
	where := "network.allowed_hosts"
	if _, ok := p.tenants[r.Tenant]; ok {
		where += " and network.tenants." + r.Tenant
	}
	g := newGrant(p, r, cidrs)
	if err := p.grantCredentials(g, r); err != nil {
		return nil, err
	}
	var bad []string
	portsOnly := true
	for _, h := range r.Hosts {
		want, err := hostpattern.Parse(h)
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
		if err := g.approve(ctx); err != nil {
			return nil, err
		}
	}
	g.EndAfter(g.budget.Duration, RuleBudgetDuration)
	d := map[string]any{"hosts": g.Hosts(), "tenant": r.Tenant, "max_connections": g.budget.Connections,
		"max_upload": g.budget.Upload, "max_download": g.budget.Download, "max_duration_s": int(g.budget.Duration / time.Second)}
	if names := g.CredentialNames(); len(names) > 0 {
		d["creds"] = names // not "credentials": the log masks keys that read as secrets
	}
	g.Record(EventGrant, true, "", d)
	return g, nil
}

// grantCredentials adds the credentials r names to g, with their hosts,
// and makes g's CA.
func (p *Policy) grantCredentials(g *Grant, r Request) error {
	if len(r.Credentials) == 0 {
		return nil
	}
	var unknown []string
	for _, name := range slices.Compact(slices.Sorted(slices.Values(r.Credentials))) {
		c := p.creds.lookup(r.Tenant, name)
		if c == nil {
			unknown = append(unknown, refusal.Quoted(name))
			continue
		}
		gc, err := grantCredential(c)
		if err != nil {
			return err
		}
		g.creds = append(g.creds, gc)
		for _, h := range c.Hosts {
			key := h
			key.Port = 0
			g.add(key, []int{h.Port})
		}
	}
	if len(unknown) > 0 {
		return refusal.New(RuleCredential, "credentials %s: not one this run may use (available: %s); ask the operator to configure it", strings.Join(unknown, ", "), p.creds.names(r.Tenant))
	}
	var hosts []hostpattern.Pattern
	var values []string
	for _, c := range g.creds {
		hosts = append(hosts, c.Hosts...)
		values = append(values, c.Forms()...)
	}
	g.secrets = sanitize.NewSecrets(values, credential.MinValue)
	ca, err := credential.NewAuthority(hosts, p.budget.Duration)
	if err != nil {
		return fmt.Errorf("make the run's certificate authority: %w", err)
	}
	g.ca = ca
	return nil
}

// allowedPorts is the union of the ports of every policy entry that covers
// want (nil: none does).
func allowedPorts(want hostpattern.Pattern, hosts []hostpattern.Pattern, cidrs []netip.Prefix) []int {
	var ports []int
	add := func(pat hostpattern.Pattern) {
		if pat.Port == 0 {
			ports = append(ports, hostpattern.DefaultPorts...)
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
				add(hostpattern.Pattern{})
			}
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// covers reports whether the policy entry pat allows the host of want
// (ports aside).
func covers(pat, want hostpattern.Pattern) bool {
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
