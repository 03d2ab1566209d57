package config

import (
	"fmt"
	"github.com/mcp-forge/mcp-forge/core/config/hostpattern"
	"net/netip"
	"regexp"
	"strings"
)

// Network is the egress policy (docs/network.md): which hosts a run may be
// granted, over the core's egress proxy, and the budget of each grant. A
// sandbox never gets a route out; a grant is what a run asked for
// intersected with these lists. With both lists empty (the default) no
// host can be granted.
type Network struct {
	// AllowedHosts are the host patterns a run may be granted: a DNS name
	// ("files.example.org"), a wildcard over a domain's subdomains at any
	// depth ("*.example.org", which does not match example.org itself) or
	// an IP address, each with an optional ":port" (none: ports 80 and 443).
	AllowedHosts []string `toml:"allowed_hosts"`
	// AllowedCIDRs are address ranges the proxy may connect to although
	// they are loopback, private, link-local, CGNAT or the core's own (all
	// refused otherwise, whatever name points there); an IP literal inside
	// one may be asked for, on ports 80 and 443.
	AllowedCIDRs []string `toml:"allowed_cidrs"`
	// RequireApproval asks the user (MCP elicitation) before a grant is
	// made; a client that cannot be asked gets no network.
	RequireApproval bool `toml:"require_approval"`
	// The budget of one grant (one run): connections (each one to a
	// granted host and port counts, even when its address is then refused
	// or does not answer), bytes sent and received, and seconds from the
	// grant. Past a budget new
	// connections are refused and, for bytes and time, open ones are cut.
	MaxConnections int  `toml:"max_connections"`
	MaxUpload      Size `toml:"max_upload"`
	MaxDownload    Size `toml:"max_download"`
	MaxDuration    int  `toml:"max_duration"`
	// Hosts answers the proxy's lookups of these names (exact, lower-case
	// names) with these addresses instead of DNS, as /etc/hosts does: for
	// a service without a public DNS name, or a test's local server. The
	// addresses are checked like any answer (a private one needs a range
	// of AllowedCIDRs) and a name still has to be granted.
	Hosts map[string]string `toml:"hosts"`
	// Tenants add hosts and ranges for one tenant ([network.tenants.NAME],
	// NAME a configured [tenants.NAME]) to the lists above.
	Tenants map[string]NetworkTenant `toml:"tenants"`
	// Credentials are secrets the proxy adds to the requests a run sends
	// to their hosts over TLS ([network.credentials.NAME]); the sandbox
	// sees a placeholder, never the value (docs/network.md).
	Credentials map[string]Credential `toml:"credentials"`
}

// Credential is one secret the egress proxy adds to requests to its hosts
// when a run asked for it by name: the proxy ends the run's TLS to those
// hosts with a certificate of a CA made for that run alone, and opens its
// own to the real host.
type Credential struct {
	// Hosts it belongs to: names or *.domain wildcards, each with an
	// optional :port (default 443); never an IP address or port 80 (it is
	// added inside TLS only). Each must be allowed by [network] (a
	// tenant's credential: or by that tenant's lists).
	Hosts []string `toml:"hosts"`
	// Type is bearer (Authorization: Bearer VALUE), basic (Authorization:
	// Basic of Username:VALUE) or header (Header: VALUE).
	Type     string `toml:"type"`
	Header   string `toml:"header"`
	Username string `toml:"username"`
	// Where the value comes from, exactly one: an environment variable of
	// the server, or a file (read at each grant, so it can be rotated).
	ValueEnv  string `toml:"value_env"`
	ValueFile string `toml:"value_file"`
	// CAFile holds the CAs the hosts' certificates are checked against
	// instead of the system's (an internal service's private CA).
	CAFile string `toml:"ca_file"`
}

// Credential types.
const (
	CredentialBearer = "bearer"
	CredentialBasic  = "basic"
	CredentialHeader = "header"
)

// CredentialPort is the port of a credential host written without one.
const CredentialPort = 443

// CredentialHosts parses c.Hosts (ParseCredentialHost).
func (c Credential) CredentialHosts() ([]hostpattern.Pattern, error) {
	var out []hostpattern.Pattern
	for i, h := range c.Hosts {
		p, err := ParseCredentialHost(h)
		if err != nil {
			return nil, fmt.Errorf("hosts[%d]: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseCredentialHost reads one host of a credential, with CredentialPort
// where none is given.
func ParseCredentialHost(h string) (hostpattern.Pattern, error) {
	p, err := hostpattern.Parse(h)
	switch {
	case err != nil:
		return hostpattern.Pattern{}, err
	case p.Addr.IsValid():
		return hostpattern.Pattern{}, fmt.Errorf("%s is an IP address: a credential belongs to names (the certificate the proxy checks names them)", h)
	case p.Port == 80:
		return hostpattern.Pattern{}, fmt.Errorf("%s: a credential is added inside TLS only, never to plain HTTP on port 80", h)
	case p.Port == 0:
		p.Port = CredentialPort
	}
	return p, nil
}

// credentialName is a credential's name: it becomes the placeholder
// variable FORGE_CREDENTIAL_<NAME>.
var credentialName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// headerToken is an HTTP header name (RFC 9110 field-name).
var headerToken = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// reservedHeaders are set by the proxy or describe the connection: a
// credential cannot be one.
var reservedHeaders = []string{"Host", "Content-Length", "Content-Type", "Transfer-Encoding", "Connection", "Keep-Alive", "Upgrade", "Te", "Trailer",
	"Proxy-Authorization", "Proxy-Authenticate", "Proxy-Connection", "Expect", "Accept-Encoding", "Content-Encoding"}

// validateCredential checks one credential at p.
func validateCredential(v *validator, p string, c Credential, name string) {
	if !credentialName.MatchString(name) {
		v.add(p, "a credential's name is 1-32 lower-case letters, digits or '_', starting with a letter (it becomes the variable FORGE_CREDENTIAL_"+strings.ToUpper(name)+")")
	}
	if len(c.Hosts) == 0 {
		v.add(p+".hosts", "must list the hosts the credential belongs to (e.g. [\"api.github.com\"])")
	}
	for i, h := range c.Hosts {
		if _, err := ParseCredentialHost(h); err != nil {
			v.add(fmt.Sprintf("%s.hosts[%d]", p, i), err.Error())
		}
	}
	switch c.Type {
	case "", CredentialBearer:
	case CredentialBasic:
		if c.Username == "" || strings.ContainsAny(c.Username, ":\r\n") {
			v.add(p+".username", "type = \"basic\" needs a username without ':' or line breaks")
		}
	case CredentialHeader:
		if !headerToken.MatchString(c.Header) {
			v.add(p+".header", fmt.Sprintf("type = \"header\" needs the header's name (e.g. \"X-Api-Key\"), got %q", c.Header))
		}
		for _, r := range reservedHeaders {
			if strings.EqualFold(r, c.Header) {
				v.add(p+".header", fmt.Sprintf("%s is set by the proxy or describes the connection: a credential cannot be it", r))
			}
		}
	default:
		v.add(p+".type", fmt.Sprintf("%q is not a credential type: bearer, basic or header", c.Type))
	}
	if c.Type != CredentialHeader && c.Header != "" {
		v.add(p+".header", "is for type = \"header\" only")
	}
	if c.Type != CredentialBasic && c.Username != "" {
		v.add(p+".username", "is for type = \"basic\" only")
	}
	switch {
	case (c.ValueEnv == "") == (c.ValueFile == ""):
		v.add(p, "set exactly one of value_env (an environment variable of the server) and value_file (a file it reads at each grant)")
	case c.ValueFile != "":
		v.abs(p+".value_file", c.ValueFile)
	}
	if c.CAFile != "" {
		v.abs(p+".ca_file", c.CAFile)
	}
}

// NetworkTenant is what one tenant may be granted besides Network's lists.
type NetworkTenant struct {
	AllowedHosts []string `toml:"allowed_hosts"`
	AllowedCIDRs []string `toml:"allowed_cidrs"`
}

// defaultNetwork grants nothing: hosts are the operator's to list.
func defaultNetwork() Network {
	return Network{AllowedHosts: []string{}, AllowedCIDRs: []string{}, MaxConnections: 100,
		MaxUpload: 64 << 20, MaxDownload: 1 << 30, MaxDuration: 1800, Hosts: map[string]string{}, Tenants: map[string]NetworkTenant{}, Credentials: map[string]Credential{}}
}

// validateNetwork checks [network] and [network.tenants.NAME].
func validateNetwork(v *validator, c Config) {
	n := c.Network
	hosts := func(p string, list []string) {
		for i, h := range list {
			if _, err := hostpattern.Parse(h); err != nil {
				v.add(fmt.Sprintf("%s[%d]", p, i), err.Error())
			}
		}
	}
	cidrs := func(p string, list []string) {
		for i, s := range list {
			if _, err := hostpattern.ParseCIDR(s); err != nil {
				v.add(fmt.Sprintf("%s[%d]", p, i), err.Error())
			}
		}
	}
	hosts("network.allowed_hosts", n.AllowedHosts)
	cidrs("network.allowed_cidrs", n.AllowedCIDRs)
	v.positive("network.max_connections", n.MaxConnections)
	v.size("network.max_upload", n.MaxUpload)
	v.size("network.max_download", n.MaxDownload)
	v.positive("network.max_duration", n.MaxDuration)
	for _, name := range sortedKeys(n.Hosts) {
		p := fmt.Sprintf("network.hosts[%q]", name)
		if h, err := hostpattern.Parse(name); err != nil || h.Name != name || h.Wildcard() || h.Port != 0 {
			v.add(p, "the key must be a lower-case DNS name without a port or a wildcard (\"files.example.org\")")
		}
		if a, err := netip.ParseAddr(n.Hosts[name]); err != nil || a.Zone() != "" {
			v.add(p, fmt.Sprintf("%q is not an IP address (\"203.0.113.7\" or \"2001:db8::1\")", n.Hosts[name]))
		}
	}
	for _, name := range sortedKeys(n.Tenants) {
		p := "network.tenants." + name
		if _, ok := c.Tenants[name]; !ok {
			v.add(p, fmt.Sprintf("no tenant %q is configured: add [tenants.%s] or remove this table", name, name))
		}
		hosts(p+".allowed_hosts", n.Tenants[name].AllowedHosts)
		cidrs(p+".allowed_cidrs", n.Tenants[name].AllowedCIDRs)
	}
	for _, name := range sortedKeys(n.Credentials) {
		validateCredential(v, "network.credentials."+name, n.Credentials[name], name)
	}
	for _, tn := range sortedKeys(c.Tenants) {
		for _, name := range sortedKeys(c.Tenants[tn].Credentials) {
			validateCredential(v, "tenants."+tn+".credentials."+name, c.Tenants[tn].Credentials[name], name)
		}
	}
}
