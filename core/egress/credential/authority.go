package credential

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config/hostpattern"
)

// Authority is the CA of one grant with credentials: only that grant's
// sandbox trusts it (its bundle, BundleName), it may sign only for the
// credentials' hosts (name constraints), it lives as long as the grant,
// and its key never leaves the core's memory.
type Authority struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// NewAuthority makes a CA for hosts, valid for life (a grant's
// network.max_duration, which the proxy enforces anyway) and an hour of
// clock skew either side.
func NewAuthority(hosts []hostpattern.Pattern, life time.Duration) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	var permitted []string
	for _, h := range hosts {
		// A name constraint "example.org" permits it and its subdomains;
		// ".example.org" only the subdomains (RFC 5280 4.2.1.10).
		if h.Wildcard() {
			permitted = append(permitted, h.Name[1:])
		} else {
			permitted = append(permitted, h.Name)
		}
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{CommonName: "mcp-forge egress credentials (one run)", Organization: []string{"MCP-Forge"}},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.Add(life + time.Hour),
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         permitted,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Authority{cert: cert, der: der, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

// PEM is the CA's certificate.
func (a *Authority) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.der})
}

// maxLeaves bounds the certificates kept: a *.domain credential has as many
// names as a run cares to make up.
const maxLeaves = 64

// Leaf is the certificate the proxy shows the sandbox for name.
func (a *Authority) Leaf(name string) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.leaves[name]; c != nil {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    a.cert.NotBefore,
		NotAfter:     a.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("certificate for %s: %w", name, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der, a.der}, PrivateKey: key}
	if len(a.leaves) < maxLeaves {
		a.leaves[name] = c
	}
	return c, nil
}

// systemRootFiles are where Linux distributions keep their trust store as
// one PEM file (crypto/x509's list).
var systemRootFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// systemRoots is the host's trust store as PEM ("" when there is none):
// the sandbox's bundle holds it and the grant's CA, since the variables
// that name the bundle replace the sandbox's own store.
var systemRoots = sync.OnceValue(func() []byte {
	files := systemRootFiles
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		files = append([]string{f}, files...)
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte("-----BEGIN CERTIFICATE-----")) {
			if !bytes.HasSuffix(b, []byte("\n")) {
				b = append(b, '\n')
			}
			return b
		}
	}
	return nil
})

// HasSystemRoots reports whether this machine's trust store was found for
// the sandboxes' bundles.
func HasSystemRoots() bool { return systemRoots() != nil }

// BundleName is the bundle's name in a run's network directory
// (/forge/net in the sandbox).
const BundleName = "ca-bundle.pem"

// BundleEnv are the variables that point TLS clients at the bundle: OpenSSL
// (Python's ssl and urllib, R's openssl) and uv, requests, curl and R's
// libcurl, Node, git, pip.
var BundleEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT"}

// Bundle is the system roots and the CA, as the sandbox reads them.
func (a *Authority) Bundle() []byte {
	var b strings.Builder
	b.Write(systemRoots())
	b.WriteString("# mcp-forge egress credentials: this run's CA, trusted by this sandbox only\n")
	b.Write(a.PEM())
	return []byte(b.String())
}
