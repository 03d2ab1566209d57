package egress

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// Credentials (issue 45): a secret the operator configured is added by the
// proxy to the requests a run sends to the hosts it belongs to. The run's
// TLS to such a host ends in the proxy (a certificate of the grant's own
// CA, authority.go); the proxy opens its own TLS to the real host, checked
// against the host's trust store, and adds the value there. The sandbox
// sees a placeholder (EnvCredentialPrefix), never the value.

// Rules of credential refusals.
const (
	RuleCredential      = "network-credential"       // a credential the run may not use (unknown, another tenant's)
	RuleCredentialValue = "network-credential-value" // its value cannot be read
	RuleCredentialHost  = "network-credential-host"  // a request inside an intercepted connection for another host
	RuleCredentialTLS   = "network-credential-tls"   // the real host's certificate is not trusted
	RuleCredentialBody  = "network-credential-body"  // a response the proxy cannot check for the value
)

// EventCredential is the audit line of each request a credential was
// added to (or refused to), never with the value.
const EventCredential = "network.credential"

// Placeholder is what the sandbox sees instead of credential name's value,
// in the variable EnvCredentialPrefix + NAME: libraries that insist on a
// token run with it, and the proxy removes any header that carries it.
func Placeholder(name string) string { return placeholderPrefix + name }

const (
	placeholderPrefix   = "forge-credential:"
	EnvCredentialPrefix = "FORGE_CREDENTIAL_"
)

// MinCredentialValue bounds a value from below: the proxy replaces the value
// wherever a response carries it, and a short one would match ordinary
// bytes.
const MinCredentialValue = 8

// credential is one configured credential.
type credential struct {
	name   string
	where  string // its table, for errors: network.credentials.NAME
	hosts  []config.HostPattern
	kind   string
	header string
	user   string
	env    string
	file   string
	roots  *x509.CertPool // nil: the system's
}

func newCredential(where, name string, c config.Credential) (*credential, error) {
	hosts, err := c.CredentialHosts()
	if err != nil {
		return nil, fmt.Errorf("%s.%w", where, err)
	}
	cr := &credential{name: name, where: where, hosts: hosts, kind: c.Type, header: http.CanonicalHeaderKey(c.Header), user: c.Username, env: c.ValueEnv, file: c.ValueFile}
	if cr.kind == "" {
		cr.kind = config.CredentialBearer
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", where, err)
		}
		cr.roots = x509.NewCertPool()
		if !cr.roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.ca_file: %s holds no PEM certificate", where, c.CAFile)
		}
	}
	// A value that cannot be read now is an operator's mistake: say so at
	// start, not on the first run that asks.
	if _, err := cr.value(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return cr, nil
}

// value reads the credential's value: again at every grant, so that a
// rotated file is picked up.
func (c *credential) value() (string, error) {
	var v string
	if c.env != "" {
		v = os.Getenv(c.env)
		if v == "" {
			return "", fmt.Errorf("value_env: the server's environment variable %s is unset or empty", c.env)
		}
	} else {
		b, err := os.ReadFile(c.file)
		if err != nil {
			return "", fmt.Errorf("value_file: %w", err)
		}
		v = strings.TrimRight(string(b), "\r\n")
	}
	switch {
	case len(v) < MinCredentialValue:
		return "", fmt.Errorf("the value is shorter than %d bytes", MinCredentialValue)
	case strings.ContainsAny(v, "\r\n\x00"):
		return "", fmt.Errorf("the value holds a line break or NUL (one line of text is expected)")
	}
	return v, nil
}

// covers reports whether t (a name and port a run connects to) is one of
// the credential's hosts.
func (c *credential) covers(t config.HostPattern) bool {
	if t.Addr.IsValid() {
		return false
	}
	for _, h := range c.hosts {
		if h.Port == t.Port && covers(config.HostPattern{Name: h.Name}, config.HostPattern{Name: t.Name}) {
			return true
		}
	}
	return false
}

// hostList is the credential's hosts as the tool's description and
// refusals name them.
func (c *credential) hostList() string {
	s := make([]string, len(c.hosts))
	for i, h := range c.hosts {
		s[i] = h.String()
	}
	return strings.Join(s, ", ")
}

// granted is a credential with its value, held by one grant.
type granted struct {
	*credential
	value string
	// secrets are the forms of the value a response might echo, replaced
	// by the placeholder on their way to the sandbox.
	secrets [][]byte
}

func (c *credential) grant() (*granted, error) {
	v, err := c.value()
	if err != nil {
		return nil, refusal.New(RuleCredentialValue, "credential %s cannot be used now: its %v; tell the operator (%s)", c.name, err, c.where)
	}
	g := &granted{credential: c, value: v, secrets: [][]byte{[]byte(v)}}
	if c.kind == config.CredentialBasic {
		g.secrets = append(g.secrets, []byte(base64.StdEncoding.EncodeToString([]byte(c.user+":"+v))))
	}
	return g, nil
}

// apply sets the credential on h, after removing every header the code
// sent with a placeholder in it.
func (g *granted) apply(h http.Header) {
	for k, vs := range h {
		for _, v := range vs {
			if strings.Contains(strings.ToLower(v), placeholderPrefix) {
				h.Del(k)
				break
			}
		}
	}
	switch g.kind {
	case config.CredentialBasic:
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(g.user+":"+g.value)))
	case config.CredentialHeader:
		h.Set(g.header, g.value)
	default:
		h.Set("Authorization", "Bearer "+g.value)
	}
}

// scrub replaces the value's forms in b by the placeholder.
func (g *granted) scrub(b []byte) []byte {
	for _, s := range g.secrets {
		if bytes.Contains(b, s) {
			b = bytes.ReplaceAll(b, s, []byte(Placeholder(g.name)))
		}
	}
	return b
}

// credentials are the configured ones: the global ones and each tenant's.
type credentials struct {
	global  map[string]*credential
	tenants map[string]map[string]*credential
}

// lookup is the credential name a run of tenant may use (a tenant's own
// first), or nil.
func (cs credentials) lookup(tenant, name string) *credential {
	if c, ok := cs.tenants[tenant][name]; ok {
		return c
	}
	return cs.global[name]
}

// Available lists the credentials a run of tenant may ask for, by name,
// each with its hosts: for the tool's description, never a value.
func (p *Policy) Available(tenant string) map[string]string {
	out := map[string]string{}
	for _, m := range []map[string]*credential{p.creds.global, p.creds.tenants[tenant]} {
		for n, c := range m {
			out[n] = c.hostList()
		}
	}
	return out
}

func (cs credentials) names(tenant string) string {
	all := map[string]bool{}
	for n := range cs.global {
		all[n] = true
	}
	for n := range cs.tenants[tenant] {
		all[n] = true
	}
	if len(all) == 0 {
		return "none is configured ([network.credentials])"
	}
	return strings.Join(slices.Sorted(maps.Keys(all)), ", ")
}
