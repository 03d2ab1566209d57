package egress

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/approval"
	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/audit/audittest"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

const testSecret = "s3cr3t-VALUE-0123456789"

// network is the default [network] section, edited.
func network(edit func(*config.Network)) config.Network {
	n := config.Default().Network
	if edit != nil {
		edit(&n)
	}
	return n
}

// grantLines are the grant lines rec holds.
func grantLines(rec *audittest.Recorder) []audit.Entry {
	var out []audit.Entry
	for _, e := range rec.Entries() {
		if e.Event == EventGrant {
			out = append(out, e)
		}
	}
	return out
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
			rec := &audittest.Recorder{}
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
				if n := len(grantLines(rec)); n != 0 {
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
			lines := grantLines(rec)
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
			}), nil, &audittest.Recorder{})
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

// What a run may ask for: its tenant's credentials and the global ones,
// a tenant's own in place of a global one of its name; an unknown name is
// refused with its rule, naming what is available.
func TestCredentialPolicy(t *testing.T) {
	t.Setenv("FORGE_TEST_CREDENTIAL", testSecret)
	sp := "8443"
	rec := &audittest.Recorder{}
	t.Setenv("FORGE_TEST_ALICE", "alice-own-value-1234")
	n := network(func(n *config.Network) {
		n.AllowedHosts = []string{"example.com:" + sp}
		n.Tenants = map[string]config.NetworkTenant{"alice": {AllowedHosts: []string{"api.example.com:" + sp}}}
		n.Credentials = map[string]config.Credential{"api": {Hosts: []string{"example.com:" + sp}, ValueEnv: "FORGE_TEST_CREDENTIAL"}}
	})
	tenants := map[string]map[string]config.Credential{"alice": {
		"api":  {Hosts: []string{"example.com:" + sp}, ValueEnv: "FORGE_TEST_ALICE"},
		"mine": {Hosts: []string{"api.example.com:" + sp}, Type: "header", Header: "X-Api-Key", ValueEnv: "FORGE_TEST_ALICE"},
	}}
	p, err := NewPolicy(n, tenants, rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tenant, cred, value, rule string
	}{
		{"", "api", testSecret, ""},
		{"alice", "api", "alice-own-value-1234", ""},
		{"alice", "mine", "alice-own-value-1234", ""},
		{"", "mine", "", RuleCredential},
		{"bob", "mine", "", RuleCredential},
		{"", "nope", "", RuleCredential},
	} {
		g, err := p.Grant(context.Background(), Request{Credentials: []string{tc.cred}, Tenant: tc.tenant})
		var re *refusal.Error
		switch {
		case tc.rule != "":
			if !errors.As(err, &re) || re.Rule != tc.rule || !strings.Contains(err.Error(), "available: api") {
				t.Errorf("%s/%s: %v, want rule %s naming what is available", tc.tenant, tc.cred, err, tc.rule)
			}
		case err != nil:
			t.Errorf("%s/%s: %v", tc.tenant, tc.cred, err)
		default:
			h := http.Header{}
			if len(g.creds) == 1 {
				g.creds[0].Apply(h)
			}
			if len(g.creds) != 1 || h.Get("Authorization")+h.Get("X-Api-Key") != map[bool]string{true: "Bearer ", false: ""}[tc.cred == "api"]+tc.value || g.Authority() == nil || len(g.Hosts()) != 1 {
				t.Errorf("%s/%s: granted %v (%v) hosts %v", tc.tenant, tc.cred, g.CredentialNames(), h, g.Hosts())
			}
			g.Close()
		}
	}
	// The operator's mistakes stop the start, each with its field path.
	for _, tc := range []struct {
		name string
		edit func(*config.Network)
		want string
	}{
		{"host not allowed", func(n *config.Network) {
			n.Credentials["api"] = config.Credential{Hosts: []string{"elsewhere.test"}, ValueEnv: "FORGE_TEST_CREDENTIAL"}
		}, "network.credentials.api.hosts[0]: elsewhere.test:443 is not allowed"},
		{"value unset", func(n *config.Network) {
			n.Credentials["api"] = config.Credential{Hosts: []string{"example.com:" + sp}, ValueEnv: "FORGE_TEST_UNSET_VALUE"}
		}, "network.credentials.api: value_env: the server's environment variable FORGE_TEST_UNSET_VALUE is unset"},
		{"value file missing", func(n *config.Network) {
			n.Credentials["api"] = config.Credential{Hosts: []string{"example.com:" + sp}, ValueFile: "/nonexistent/token"}
		}, "network.credentials.api: value_file:"},
		{"bad ca_file", func(n *config.Network) {
			n.Credentials["api"] = config.Credential{Hosts: []string{"example.com:" + sp}, ValueEnv: "FORGE_TEST_CREDENTIAL", CAFile: "/etc/hostname"}
		}, "network.credentials.api.ca_file: /etc/hostname holds no PEM certificate"},
	} {
		n := network(func(n *config.Network) {
			n.AllowedHosts = []string{"example.com:" + sp}
			n.Credentials = map[string]config.Credential{}
			tc.edit(n)
		})
		if _, err := NewPolicy(n, nil, rec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
