package credential

import (
	"bytes"
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/config/hostpattern"
)

const secret = "s3cr3t-VALUE-0123456789"

func granted(t *testing.T, c config.Credential) *Granted {
	t.Helper()
	t.Setenv("FORGE_TEST_CREDENTIAL", secret)
	c.ValueEnv = "FORGE_TEST_CREDENTIAL"
	if c.Hosts == nil {
		c.Hosts = []string{"api.example.org"}
	}
	cr, err := Parse("network.credentials.api", "api", c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cr.Grant()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Each type sets its header; any header carrying a placeholder goes.
func TestApply(t *testing.T) {
	for _, tc := range []struct {
		c            config.Credential
		header, want string
	}{
		{config.Credential{}, "Authorization", "Bearer " + secret},
		{config.Credential{Type: "basic", Username: "app"}, "Authorization", "Basic YXBwOnMzY3IzdC1WQUxVRS0wMTIzNDU2Nzg5"},
		{config.Credential{Type: "header", Header: "x-api-key"}, "X-Api-Key", secret},
	} {
		h := http.Header{"Authorization": {"Bearer " + Placeholder("api")}, "X-Other": {"x FORGE-CREDENTIAL:api"}, "Accept": {"*/*"}}
		granted(t, tc.c).Apply(h)
		if h.Get(tc.header) != tc.want || h.Get("X-Other") != "" || h.Get("Accept") != "*/*" {
			t.Errorf("%+v: %v", tc.c, h)
		}
	}
}

// A credential belongs to its names and ports only.
func TestCovers(t *testing.T) {
	cr := granted(t, config.Credential{Hosts: []string{"api.example.org", "*.s3.example.net:8443"}})
	for h, want := range map[string]bool{"api.example.org:443": true, "api.example.org:8443": false, "x.api.example.org:443": false,
		"b.s3.example.net:8443": true, "a.b.s3.example.net:8443": true, "s3.example.net:8443": false, "203.0.113.7:443": false} {
		p, err := hostpattern.Parse(h)
		if err != nil {
			t.Fatal(err)
		}
		if cr.Covers(p) != want {
			t.Errorf("%s: covers %v, want %v", h, !want, want)
		}
	}
}

// The response body loses the value wherever it is cut.
func TestWriter(t *testing.T) {
	g := granted(t, config.Credential{})
	body := "a" + secret + "b" + secret[:5] + "c" + secret
	for cut := 1; cut <= len(body); cut++ {
		var out bytes.Buffer
		sw := NewWriter(&out, g)
		for i := 0; i < len(body); i += cut {
			_, _ = sw.Write([]byte(body[i:min(i+cut, len(body))]))
		}
		_ = sw.Flush()
		want := "a" + Placeholder("api") + "b" + secret[:5] + "c" + Placeholder("api")
		if out.String() != want {
			t.Fatalf("cut %d: %q, want %q", cut, out.String(), want)
		}
	}
}

// The sandbox's bundle holds the grant's CA, which may sign only for the
// credentials' hosts.
func TestAuthority(t *testing.T) {
	a, err := NewAuthority([]hostpattern.Pattern{{Name: "api.example.org", Port: 443}, {Name: "*.s3.example.net", Port: 443}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.PEM())
	for name, ok := range map[string]bool{"api.example.org": true, "b.s3.example.net": true, "evil.example.com": false, "example.org": false} {
		leaf, err := a.Leaf(name)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(leaf.Certificate[0])
		_, err = c.Verify(x509.VerifyOptions{Roots: pool, DNSName: name})
		if (err == nil) != ok {
			t.Errorf("%s: verify %v, want ok=%v", name, err, ok)
		}
	}
	if !bytes.Contains(a.Bundle(), a.PEM()) || bytes.Contains(a.Bundle(), []byte("PRIVATE KEY")) {
		t.Fatal("the bundle lacks the CA, or holds a key")
	}
}
