package config

import (
	"strings"
	"testing"
)

// Every network.* check names its field and says what is wrong; valid
// values of each form are accepted.
func TestNetworkValidation(t *testing.T) {
	alice := func(c *Config) {
		c.Tenants = map[string]Tenant{"alice": {APIKeySHA256: []string{strings.Repeat("a", 64)}}}
	}
	cases := []struct {
		name string
		edit func(*Config)
		path string // "" when valid
		msg  string
	}{
		{"defaults", func(*Config) {}, "", ""},
		{"every form", func(c *Config) {
			c.Network.AllowedHosts = []string{"files.example.org", "API.Example.ORG.:8443", "*.example.org", "*.pythonhosted.org:443",
				"localhost", "203.0.113.7", "[2001:db8::1]:443", "2001:db8::2", "xn--bcher-kva.example"}
			c.Network.AllowedCIDRs = []string{"127.0.0.1/32", "10.0.0.0/8", "fd00::/8"}
			c.Network.RequireApproval = true
		}, "", ""},
		{"tenant table", func(c *Config) {
			alice(c)
			c.Network.Tenants = map[string]NetworkTenant{"alice": {AllowedHosts: []string{"api.example.org"}, AllowedCIDRs: []string{"10.20.0.0/16"}}}
		}, "", ""},
		{"star alone", func(c *Config) { c.Network.AllowedHosts = []string{"*"} }, "network.allowed_hosts[0]", "alone would match every host"},
		{"star with port", func(c *Config) { c.Network.AllowedHosts = []string{"ok.example.org", "*:443"} }, "network.allowed_hosts[1]", "alone would match every host"},
		{"wildcard over a tld", func(c *Config) { c.Network.AllowedHosts = []string{"*.org"} }, "network.allowed_hosts[0]", "below a top-level domain"},
		{"wildcard inside", func(c *Config) { c.Network.AllowedHosts = []string{"files.*.org"} }, "network.allowed_hosts[0]", "is not a host pattern"},
		{"partial wildcard", func(c *Config) { c.Network.AllowedHosts = []string{"f*.example.org"} }, "network.allowed_hosts[0]", "names are letters, digits and '-'"},
		{"url", func(c *Config) { c.Network.AllowedHosts = []string{"https://files.example.org"} }, "network.allowed_hosts[0]", "is not a number"},
		{"path", func(c *Config) { c.Network.AllowedHosts = []string{"files.example.org/data"} }, "network.allowed_hosts[0]", "is not a host pattern"},
		{"port zero", func(c *Config) { c.Network.AllowedHosts = []string{"files.example.org:0"} }, "network.allowed_hosts[0]", "port 0 is out of range 1-65535"},
		{"port too big", func(c *Config) { c.Network.AllowedHosts = []string{"files.example.org:65536"} }, "network.allowed_hosts[0]", "port 65536 is out of range"},
		{"port sign", func(c *Config) { c.Network.AllowedHosts = []string{"files.example.org:+80"} }, "network.allowed_hosts[0]", "is not a number"},
		{"empty port", func(c *Config) { c.Network.AllowedHosts = []string{"files.example.org:"} }, "network.allowed_hosts[0]", "is not a number"},
		{"empty", func(c *Config) { c.Network.AllowedHosts = []string{""} }, "network.allowed_hosts[0]", "empty name"},
		{"unicode", func(c *Config) { c.Network.AllowedHosts = []string{"bücher.example"} }, "network.allowed_hosts[0]", "punycode"},
		{"numeric ip form", func(c *Config) { c.Network.AllowedHosts = []string{"2130706433"} }, "network.allowed_hosts[0]", "digits only"},
		{"octal ip form", func(c *Config) { c.Network.AllowedHosts = []string{"0177.0.0.1"} }, "network.allowed_hosts[0]", "digits only"},
		{"label dash", func(c *Config) { c.Network.AllowedHosts = []string{"-a.example.org"} }, "network.allowed_hosts[0]", "starts or ends with '-'"},
		{"long label", func(c *Config) { c.Network.AllowedHosts = []string{strings.Repeat("a", 64) + ".org"} }, "network.allowed_hosts[0]", "1-63 characters"},
		{"ipv6 zone", func(c *Config) { c.Network.AllowedHosts = []string{"fe80::1%eth0"} }, "network.allowed_hosts[0]", "zone"},
		{"bracketed v4", func(c *Config) { c.Network.AllowedHosts = []string{"[10.0.0.1]:80"} }, "network.allowed_hosts[0]", "IPv6 address only"},
		{"unclosed bracket", func(c *Config) { c.Network.AllowedHosts = []string{"[2001:db8::1:443"} }, "network.allowed_hosts[0]", "closing ]"},
		{"cidr", func(c *Config) { c.Network.AllowedCIDRs = []string{"10.0.0.0"} }, "network.allowed_cidrs[0]", "is not a CIDR"},
		{"cidr host bits", func(c *Config) { c.Network.AllowedCIDRs = []string{"10.1.2.3/8"} }, "network.allowed_cidrs[0]", "write 10.0.0.0/8"},
		{"cidr everything", func(c *Config) { c.Network.AllowedCIDRs = []string{"127.0.0.1/32", "0.0.0.0/0"} }, "network.allowed_cidrs[1]", "covers every address"},
		{"cidr everything v6", func(c *Config) { c.Network.AllowedCIDRs = []string{"::/0"} }, "network.allowed_cidrs[0]", "covers every address"},
		{"cidr mapped", func(c *Config) { c.Network.AllowedCIDRs = []string{"::ffff:10.0.0.0/104"} }, "network.allowed_cidrs[0]", "write it as IPv4"},
		{"credential", func(c *Config) {
			c.Network.Credentials = map[string]Credential{"gh": {Hosts: []string{"api.github.com", "*.example.org:8443"}, ValueEnv: "GH"},
				"svc": {Hosts: []string{"svc.example.org"}, Type: "header", Header: "X-Api-Key", ValueFile: "/run/secrets/svc", CAFile: "/etc/ca.pem"},
				"db":  {Hosts: []string{"db.example.org"}, Type: "basic", Username: "app", ValueEnv: "DB"}}
		}, "", ""},
		{"credential name", func(c *Config) {
			c.Network.Credentials = map[string]Credential{"Git-Hub": {Hosts: []string{"a.example.org"}, ValueEnv: "X"}}
		}, "network.credentials.Git-Hub", "lower-case letters"},
		{"credential no hosts", func(c *Config) { c.Network.Credentials = map[string]Credential{"gh": {ValueEnv: "X"}} }, "network.credentials.gh.hosts", "must list the hosts"},
		{"credential ip", func(c *Config) {
			c.Network.Credentials = map[string]Credential{"gh": {Hosts: []string{"203.0.113.7"}, ValueEnv: "X"}}
		}, "network.credentials.gh.hosts[0]", "is an IP address"},
		{"credential port 80", func(c *Config) {
			c.Network.Credentials = map[string]Credential{"gh": {Hosts: []string{"a.example.org:80"}, ValueEnv: "X"}}
		}, "network.credentials.gh.hosts[0]", "inside TLS only"},
		{"credential two values", func(c *Config) {
			c.Network.Credentials = map[string]Credential{"gh": {Hosts: []string{"a.example.org"}, ValueEnv: "X", ValueFile: "/x"}}
		}, "network.credentials.gh", "exactly one of value_env"},
		{"credential no value", func(c *Config) {
			c.Network.Credentials = map[string]Credential{"gh": {Hosts: []string{"a.example.org"}}}
		}, "network.credentials.gh", "exactly one of value_env"},
		{"credential type", func(c *Config) {
			c.Network.Credentials = map[string]Credential{"gh": {Hosts: []string{"a.example.org"}, Type: "digest", ValueEnv: "X"}}
		}, "network.credentials.gh.type", "bearer, basic or header"},
		{"credential header missing", func(c *Config) {
			c.Network.Credentials = map[string]Credential{"gh": {Hosts: []string{"a.example.org"}, Type: "header", ValueEnv: "X"}}
		}, "network.credentials.gh.header", "needs the header's name"},
		{"credential header reserved", func(c *Config) {
			c.Network.Credentials = map[string]Credential{"gh": {Hosts: []string{"a.example.org"}, Type: "header", Header: "host", ValueEnv: "X"}}
		}, "network.credentials.gh.header", "set by the proxy"},
		{"credential basic user", func(c *Config) {
			c.Network.Credentials = map[string]Credential{"gh": {Hosts: []string{"a.example.org"}, Type: "basic", ValueEnv: "X"}}
		}, "network.credentials.gh.username", "needs a username"},
		{"credential relative file", func(c *Config) {
			c.Network.Credentials = map[string]Credential{"gh": {Hosts: []string{"a.example.org"}, ValueFile: "token"}}
		}, "network.credentials.gh.value_file", "absolute"},
		{"tenant credential", func(c *Config) {
			alice(c)
			t := c.Tenants["alice"]
			t.Credentials = map[string]Credential{"gh": {Hosts: []string{"a.example.org"}}}
			c.Tenants["alice"] = t
		}, "tenants.alice.credentials.gh", "exactly one of value_env"},
		{"hosts name", func(c *Config) { c.Network.Hosts = map[string]string{"*.example.org": "10.0.0.1"} }, `network.hosts["*.example.org"]`, "lower-case DNS name"},
		{"hosts upper", func(c *Config) { c.Network.Hosts = map[string]string{"Files.example.org": "10.0.0.1"} }, `network.hosts["Files.example.org"]`, "lower-case DNS name"},
		{"hosts port", func(c *Config) { c.Network.Hosts = map[string]string{"files.example.org:80": "10.0.0.1"} }, `network.hosts["files.example.org:80"]`, "without a port"},
		{"hosts address", func(c *Config) { c.Network.Hosts = map[string]string{"files.example.org": "10.0.0"} }, `network.hosts["files.example.org"]`, "is not an IP address"},
		{"hosts zone", func(c *Config) { c.Network.Hosts = map[string]string{"files.example.org": "fe80::1%eth0"} }, `network.hosts["files.example.org"]`, "is not an IP address"},
		{"hosts fine", func(c *Config) {
			c.Network.Hosts = map[string]string{"files.example.org": "10.0.0.1", "v6.example.org": "2001:db8::1"}
		}, "", ""},
		{"connections", func(c *Config) { c.Network.MaxConnections = 0 }, "network.max_connections", "must be > 0"},
		{"duration", func(c *Config) { c.Network.MaxDuration = -1 }, "network.max_duration", "must be > 0"},
		{"upload", func(c *Config) { c.Network.MaxUpload = 0 }, "network.max_upload", "is empty"},
		{"download", func(c *Config) { c.Network.MaxDownload = -5 }, "network.max_download", ""},
		{"unknown tenant", func(c *Config) {
			c.Network.Tenants = map[string]NetworkTenant{"bob": {AllowedHosts: []string{"api.example.org"}}}
		}, "network.tenants.bob", `no tenant "bob" is configured: add [tenants.bob]`},
		{"tenant host", func(c *Config) {
			alice(c)
			c.Network.Tenants = map[string]NetworkTenant{"alice": {AllowedHosts: []string{"ok.example.org", "*"}}}
		}, "network.tenants.alice.allowed_hosts[1]", "alone would match every host"},
		{"tenant cidr", func(c *Config) {
			alice(c)
			c.Network.Tenants = map[string]NetworkTenant{"alice": {AllowedCIDRs: []string{"10.0.0.1/8"}}}
		}, "network.tenants.alice.allowed_cidrs[0]", "write 10.0.0.0/8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.edit(&c)
			errs := Validate(c)
			if tc.path == "" {
				if len(errs) > 0 {
					t.Fatalf("a valid network section refused: %v", errs)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("want exactly one error at %s, got %v", tc.path, errs)
			}
			if errs[0].Path != tc.path || !strings.Contains(errs[0].Msg, tc.msg) {
				t.Errorf("got %s: %s; want %s: ...%s...", errs[0].Path, errs[0].Msg, tc.path, tc.msg)
			}
		})
	}
}
