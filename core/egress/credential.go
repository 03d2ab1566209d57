package egress

import (
	"maps"
	"slices"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/egress/credential"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// Credentials (issue 45): a secret the operator configured is added by the
// proxy to the requests a run sends to the hosts it belongs to. The run's
// TLS to such a host ends in the proxy (intercept.go, with a certificate
// of the grant's own CA); the proxy opens its own TLS to the real host,
// checked against the host's trust store, and adds the value there. The
// sandbox sees a placeholder, never the value (package credential).

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

// credentials are the configured ones: the global ones and each tenant's.
type credentials struct {
	global  map[string]*credential.Credential
	tenants map[string]map[string]*credential.Credential
}

// lookup is the credential name a run of tenant may use (a tenant's own
// first), or nil.
func (cs credentials) lookup(tenant, name string) *credential.Credential {
	if c, ok := cs.tenants[tenant][name]; ok {
		return c
	}
	return cs.global[name]
}

// names lists what a run of tenant may ask for, for refusals.
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

// grant reads c's value for one grant; a value that cannot be read now
// refuses the run.
func grantCredential(c *credential.Credential) (*credential.Granted, error) {
	g, err := c.Grant()
	if err != nil {
		return nil, refusal.New(RuleCredentialValue, "credential %s cannot be used now: its %v; tell the operator (%s)", c.Name, err, c.Where)
	}
	return g, nil
}
