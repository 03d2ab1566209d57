// Package credential holds what the egress proxy needs to add an
// operator's secret to a run's requests without the run ever seeing it
// (issue 45, docs/network.md): the configured credentials and their values
// (read at each grant), the placeholder the sandbox sees instead, the
// grant's own CA whose certificates the proxy shows the sandbox, and the
// replacement of a value echoed in a response by its placeholder.
package credential

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/config/hostpattern"
)

// What the sandbox sees: EnvPrefix + NAME (upper case) holds
// Placeholder(name).
const (
	EnvPrefix         = "FORGE_CREDENTIAL_"
	placeholderPrefix = "forge-credential:"
)

// Placeholder is what the sandbox sees instead of credential name's value:
// libraries that insist on a token run with it, and the proxy removes any
// header that carries it.
func Placeholder(name string) string { return placeholderPrefix + name }

// MinValue bounds a value from below: the proxy replaces the value wherever
// a response carries it, and a short one would match ordinary bytes.
const MinValue = 8

// Credential is one configured credential.
type Credential struct {
	Name  string
	Where string // its table, for errors: network.credentials.NAME
	Hosts []hostpattern.Pattern
	// Roots verify the hosts' certificates (nil: the system's).
	Roots  *x509.CertPool
	kind   string
	header string
	user   string
	env    string
	file   string
}

// Parse reads a validated credential table at where. Its ca_file and its
// value must be readable now: a value that cannot be read is an operator's
// mistake to report at start, not on the first run that asks.
func Parse(where, name string, c config.Credential) (*Credential, error) {
	hosts, err := c.CredentialHosts()
	if err != nil {
		return nil, fmt.Errorf("%s.%w", where, err)
	}
	cr := &Credential{Name: name, Where: where, Hosts: hosts, kind: c.Type, header: http.CanonicalHeaderKey(c.Header), user: c.Username, env: c.ValueEnv, file: c.ValueFile}
	if cr.kind == "" {
		cr.kind = config.CredentialBearer
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", where, err)
		}
		cr.Roots = x509.NewCertPool()
		if !cr.Roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.ca_file: %s holds no PEM certificate", where, c.CAFile)
		}
	}
	if _, err := cr.value(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return cr, nil
}

// value reads the credential's value: again at every grant, so that a
// rotated file is picked up.
func (c *Credential) value() (string, error) {
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
	case len(v) < MinValue:
		return "", fmt.Errorf("the value is shorter than %d bytes", MinValue)
	case strings.ContainsAny(v, "\r\n\x00"):
		return "", fmt.Errorf("the value holds a line break or NUL (one line of text is expected)")
	case strings.Contains(v, placeholderPrefix):
		return "", fmt.Errorf("the value holds the placeholder prefix %s", placeholderPrefix)
	}
	return v, nil
}

// Covers reports whether t (a name and port a run connects to) is one of
// the credential's hosts: the same name (or one under a *.domain host) and
// port. An IP address never is.
func (c *Credential) Covers(t hostpattern.Pattern) bool {
	if t.Addr.IsValid() || t.Name == "" {
		return false
	}
	for _, h := range c.Hosts {
		if h.Port != t.Port {
			continue
		}
		if h.Name == t.Name || (h.Wildcard() && strings.HasSuffix(t.Name, h.Name[1:])) {
			return true
		}
	}
	return false
}

// Granted is a credential with its value, held by one grant.
type Granted struct {
	*Credential
	value string
	// forms are the forms of the value a response might echo, replaced by
	// the placeholder on their way to the sandbox.
	forms [][]byte
}

// Grant reads the value for one grant.
func (c *Credential) Grant() (*Granted, error) {
	v, err := c.value()
	if err != nil {
		return nil, err
	}
	g := &Granted{Credential: c, value: v, forms: [][]byte{[]byte(v)}}
	if c.kind == config.CredentialBasic {
		g.forms = append(g.forms, []byte(base64.StdEncoding.EncodeToString([]byte(c.user+":"+v))))
	}
	return g, nil
}

// Forms are the value as the proxy may add it (the value, and a basic
// credential's base64 form): for scrubbers of what the run returns.
func (g *Granted) Forms() []string {
	out := make([]string, len(g.forms))
	for i, f := range g.forms {
		out[i] = string(f)
	}
	return out
}

// Apply sets the credential on h, after removing every header the code
// sent with a placeholder in it.
func (g *Granted) Apply(h http.Header) {
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

// Scrub replaces the value's forms in b by the placeholder.
func (g *Granted) Scrub(b []byte) []byte {
	for _, f := range g.forms {
		if bytes.Contains(b, f) {
			b = bytes.ReplaceAll(b, f, []byte(Placeholder(g.Name)))
		}
	}
	return b
}
