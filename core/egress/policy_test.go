package egress

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/approval"
	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// recorder keeps every audit line.
type recorder struct {
	mu      sync.Mutex
	entries []audit.Entry
	fail    error // Check and Write answer this when set
}

func (r *recorder) Record(e audit.Entry) { _ = r.Write(e) }

func (r *recorder) Write(e audit.Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	e.Details = audit.Redact(e.Details) // as the real log does
	r.entries = append(r.entries, e)
	return nil
}

func (r *recorder) Check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fail
}

func (r *recorder) all(event string) []audit.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Entry
	for _, e := range r.entries {
		if e.Event == event {
			out = append(out, e)
		}
	}
	return out
}

func network(edit func(*config.Network)) config.Network {
	n := config.Default().Network
	if edit != nil {
		edit(&n)
	}
	return n
}

// The grant is what was asked for within the policy, host by host and
// port by port; a host outside it refuses the request, naming the host.
func TestGrant(t *testing.T) {
	base := func(n *config.Network) {
		n.AllowedHosts = []string{"files.example.org", "api.example.org:443", "*.cdn.example.net:443", "203.0.113.7:8080", "[2001:db8::7]:443", "both.example.org:80", "both.example.org:8080"}
		n.AllowedCIDRs = []string{"10.0.0.0/8"}
		n.Tenants = map[string]config.NetworkTenant{"alice": {AllowedHosts: []string{"alice.example.org"}, AllowedCIDRs: []string{"192.168.7.0/24"}}}
	}
	cases := []struct {
		name   string
		tenant string
		ask    []string
		want   []string // granted; nil: refused
		rule   string
		msg    []string
	}{
		{"name, default ports", "", []string{"files.example.org"}, []string{"files.example.org:80", "files.example.org:443"}, "", nil},
		{"name, case and dot folded", "", []string{"FILES.example.ORG."}, []string{"files.example.org:80", "files.example.org:443"}, "", nil},
		{"name with an allowed port", "", []string{"files.example.org:443"}, []string{"files.example.org:443"}, "", nil},
		{"port the policy lists", "", []string{"api.example.org"}, []string{"api.example.org:443"}, "", nil},
		{"two entries, ports merged", "", []string{"both.example.org"}, []string{"both.example.org:80", "both.example.org:8080"}, "", nil},
		{"port not allowed", "", []string{"api.example.org:8443"}, nil, RulePort, []string{`"api.example.org:8443": the policy allows api.example.org on port 443 only`}},
		{"subdomain of a wildcard", "", []string{"a.b.cdn.example.net"}, []string{"a.b.cdn.example.net:443"}, "", nil},
		{"wildcard below a wildcard", "", []string{"*.eu.cdn.example.net:443"}, []string{"*.eu.cdn.example.net:443"}, "", nil},
		{"wildcard's own domain", "", []string{"cdn.example.net"}, nil, RuleHost, []string{`"cdn.example.net" is not an allowed host`}},
		{"wildcard over an exact name", "", []string{"*.example.org"}, nil, RuleHost, []string{`"*.example.org" is not an allowed host`}},
		{"every refused host named", "", []string{"evil.example.com", "files.example.org", "also.evil.example.com"}, nil, RuleHost,
			[]string{`"evil.example.com" is not an allowed host`, `"also.evil.example.com" is not an allowed host`, "network.allowed_hosts"}},
		{"exact IP", "", []string{"203.0.113.7"}, []string{"203.0.113.7:8080"}, "", nil},
		{"IPv6 with port", "", []string{"[2001:db8::7]:443"}, []string{"[2001:db8::7]:443"}, "", nil},
		{"IP in a CIDR", "", []string{"10.1.2.3"}, []string{"10.1.2.3:80", "10.1.2.3:443"}, "", nil},
		{"IP in a CIDR on another port", "", []string{"10.1.2.3:5432"}, nil, RulePort, []string{"ports 80, 443 only"}},
		{"IP outside", "", []string{"198.51.100.1"}, nil, RuleHost, []string{`"198.51.100.1" is an IP address the policy does not allow`, "network.allowed_cidrs"}},
		{"not a host", "", []string{"http://files.example.org/"}, nil, RuleHost, []string{"is not a number"}},
		{"tenant's host", "alice", []string{"alice.example.org", "files.example.org:80"}, []string{"alice.example.org:80", "alice.example.org:443", "files.example.org:80"}, "", nil},
		{"tenant's range", "alice", []string{"192.168.7.9:443"}, []string{"192.168.7.9:443"}, "", nil},
		{"another tenant's host", "bob", []string{"alice.example.org"}, nil, RuleHost, []string{`"alice.example.org" is not an allowed host`}},
		{"tenant named in the refusal", "alice", []string{"nope.example.org"}, nil, RuleHost, []string{"network.tenants.alice"}},
		{"empty", "", nil, nil, RuleEmpty, []string{"lists no host"}},
		{"too many", "", strings.Split(strings.Repeat("files.example.org,", MaxRequested+1), ",")[:MaxRequested+1], nil, RuleHost, []string{"more than 64"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			p, err := NewPolicy(network(base), nil, rec)
			if err != nil {
				t.Fatal(err)
			}
			g, err := p.Grant(context.Background(), Request{Hosts: tc.ask, Tenant: tc.tenant, Client: "c1", Session: "s1", RunID: "r1"})
			if tc.want == nil {
				var re *refusal.Error
				if !errors.As(err, &re) || re.Rule != tc.rule {
					t.Fatalf("want a refusal by %s, got %v (%+v)", tc.rule, err, g)
				}
				for _, m := range tc.msg {
					if !strings.Contains(re.Msg, m) {
						t.Errorf("refusal %q does not say %q", re.Msg, m)
					}
				}
				if n := len(rec.all(EventGrant)); n != 0 {
					t.Errorf("a refused grant was audited as made (%d lines): the caller audits refusals", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if got := strings.Join(g.Hosts(), " "); got != strings.Join(tc.want, " ") {
				t.Errorf("granted %q, want %q", got, strings.Join(tc.want, " "))
			}
			lines := rec.all(EventGrant)
			if len(lines) != 1 || lines[0].UserID != "c1" || lines[0].SessionID != "s1" || !lines[0].Success {
				t.Fatalf("grant audit lines: %+v", lines)
			}
			if hosts, _ := lines[0].Details["hosts"].([]string); strings.Join(hosts, " ") != strings.Join(tc.want, " ") {
				t.Errorf("audited hosts %v, want %v", lines[0].Details["hosts"], tc.want)
			}
		})
	}
}

// A grant the policy says needs approval is made only when the user
// approves; a client that cannot be asked gets none (fail closed).
func TestGrantApproval(t *testing.T) {
	ask := func(ok, supported bool, err error) approval.Approver {
		return func(_ context.Context, msg string) (bool, bool, error) {
			if !strings.Contains(msg, "files.example.org:443") {
				t.Errorf("the question %q does not name the hosts", msg)
			}
			return ok, supported, err
		}
	}
	cases := []struct {
		name    string
		approve approval.Approver
		rule    string // "": granted
		plain   bool   // an error that is no refusal
	}{
		{"approved", ask(true, true, nil), "", false},
		{"declined", ask(false, true, nil), RuleApproval, false},
		{"cannot ask", ask(false, false, nil), RuleApproval, false},
		{"no approver", nil, RuleApproval, false},
		{"asking failed", ask(false, true, errors.New("client gone")), "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPolicy(network(func(n *config.Network) {
				n.AllowedHosts, n.RequireApproval = []string{"files.example.org:443"}, true
			}), nil, &recorder{})
			if err != nil {
				t.Fatal(err)
			}
			g, err := p.Grant(context.Background(), Request{Hosts: []string{"files.example.org"}, Approve: tc.approve})
			var re *refusal.Error
			switch {
			case tc.plain:
				if err == nil || errors.As(err, &re) || !strings.Contains(err.Error(), "client gone") {
					t.Fatalf("want the approver's error wrapped, got %v", err)
				}
			case tc.rule == "":
				if err != nil {
					t.Fatal(err)
				}
				g.Close()
			default:
				if !errors.As(err, &re) || re.Rule != tc.rule {
					t.Fatalf("want a refusal by %s, got %v", tc.rule, err)
				}
			}
		})
	}
}

// Every class of address no name may lead to without a granted range.
func TestRefusedClass(t *testing.T) {
	cases := map[string]string{
		"127.0.0.1": "loopback", "127.8.9.10": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"10.1.2.3": "private", "172.16.0.1": "private", "192.168.1.1": "private", "fd12::1": "private",
		"169.254.169.254": "metadata", "fd00:ec2::254": "metadata", "169.254.1.1": "link-local", "fe80::1": "link-local",
		"224.0.0.1": "multicast", "ff02::1": "multicast", "0.0.0.0": "unspecified", "0.1.2.3": "this network", "::": "unspecified",
		"100.64.0.1": "carrier-grade NAT", "100.100.100.200": "carrier-grade NAT", "255.255.255.255": "broadcast",
		"64:ff9b::a01:203": "NAT64", "2002:a01:203::1": "6to4", "198.18.0.1": "benchmarking",
		"203.0.113.7": "", "8.8.8.8": "", "2606:4700::1111": "", "172.32.0.1": "", "100.128.0.1": "",
	}
	for in, want := range cases {
		got := refusedClass(netip.MustParseAddr(in))
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: class %q, want %q", in, got, want)
		}
	}
}
