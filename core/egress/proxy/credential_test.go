package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/egress/credential"
)

const testSecret = "s3cr3t-VALUE-0123456789"

// credWorld is the proxy world with an HTTPS server (HTTP/1.1 and HTTP/2)
// that records what it receives and echoes the request's headers.
type credWorld struct {
	*world
	srv    *httptest.Server
	sport  int
	caFile string // the server's CA, for the credential's ca_file

	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	host, proto, auth, rng string
}

func newCredWorld(t *testing.T) *credWorld { return newCredWorldWith(t, nil, true) }

// newCredWorldWith serves next (nil: the header echo) after recording the
// request, over HTTP/2 when h2.
func newCredWorldWith(t *testing.T, next http.HandlerFunc, h2 bool) *credWorld {
	w := &credWorld{world: newWorld(t)}
	w.headerTTL = time.Second // an HTTP/2 client's first frames take longer than the plain proxy tests allow
	if next == nil {
		next = func(rw http.ResponseWriter, r *http.Request) {
			if to := r.URL.Query().Get("to"); to != "" {
				http.Redirect(rw, r, to, http.StatusFound)
				return
			}
			rw.Header().Set("X-Echo", r.Header.Get("Authorization"))
			_ = json.NewEncoder(rw).Encode(map[string]any{"header": r.Header, "proto": r.Proto})
		}
	}
	w.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		w.seen = append(w.seen, seenRequest{host: r.Host, proto: r.Proto, auth: r.Header.Get("Authorization") + r.Header.Get("X-Api-Key"), rng: r.Header.Get("Range")})
		w.mu.Unlock()
		next(rw, r)
	}))
	w.srv.EnableHTTP2 = h2
	w.srv.StartTLS()
	t.Cleanup(w.srv.Close)
	w.sport = port(t, w.srv.Listener.Addr().String())
	w.caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(w.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	w.resolver["api.example.com"] = []string{"127.0.0.1"}
	w.resolver["alt.example.com"] = []string{"127.0.0.1"}
	t.Setenv("FORGE_TEST_CREDENTIAL", testSecret)
	return w
}

func (w *credWorld) requests() []seenRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]seenRequest(nil), w.seen...)
}

// policy allows example.com (a name of httptest's certificate) on the
// server's port, with credential "api" for it, and the other names on it
// too, without one.
func (w *credWorld) credPolicy(edit func(*config.Network)) *egress.Policy {
	return w.policy(func(n *config.Network) {
		sp := strconv.Itoa(w.sport)
		n.AllowedHosts = append(n.AllowedHosts, "example.com:"+sp, "alt.example.com:"+sp, "api.example.com:"+sp, "127.0.0.1:"+sp)
		n.Credentials = map[string]config.Credential{"api": {Hosts: []string{"example.com:" + sp}, ValueEnv: "FORGE_TEST_CREDENTIAL", CAFile: w.caFile}}
		if edit != nil {
			edit(n)
		}
	})
}

// grantCreds grants hosts and credentials and serves the proxy for them.
func (w *credWorld) grantCreds(p *egress.Policy, creds []string, hosts ...string) (*egress.Grant, *url.URL) {
	w.t.Helper()
	return w.serve(p, egress.Request{Hosts: hosts, Credentials: creds})
}

// sandboxClient trusts what the sandbox's bundle holds: the grant's CA
// (and, for the hosts without a credential, the server's own).
func sandboxClient(g *egress.Grant, proxy *url.URL, h2 bool, extra *x509.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(g.Authority().Bundle())
	if extra != nil {
		pool.AddCert(extra)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// The credential reaches its host over TLS, HTTP/1.1 and HTTP/2, in place
// of the placeholder the code sent; the code's copy of the response has
// the placeholder where the host echoed the value, and no audit line holds
// the value.
func TestCredentialAdded(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1.1", true: "h2"}[h2], func(t *testing.T) {
			w := newCredWorld(t)
			g, proxy := w.grantCreds(w.credPolicy(nil), []string{"api"})
			c := sandboxClient(g, proxy, h2, nil)
			req, _ := http.NewRequest("GET", "https://example.com:"+strconv.Itoa(w.sport)+"/headers", nil)
			req.Header.Set("Authorization", "Bearer "+credential.Placeholder("api"))
			req.Header.Set("X-Other", "still "+credential.Placeholder("api")) // any copy of the placeholder is dropped
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %s: %s", resp.Status, body)
			}
			if want := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]; resp.Proto != want {
				t.Fatalf("the sandbox spoke %s with the proxy, want %s", resp.Proto, want)
			}
			// The proxy speaks HTTP/2 to a host that does, whatever the sandbox spoke.
			if seen := w.requests(); len(seen) != 1 || seen[0].auth != "Bearer "+testSecret || seen[0].proto != "HTTP/2.0" {
				t.Fatalf("the server saw %+v, want one HTTP/2 request with the credential", seen)
			}
			if bytes.Contains(body, []byte(testSecret)) || strings.Contains(resp.Header.Get("X-Echo"), testSecret) {
				t.Fatalf("the value came back to the sandbox: %s %v", body, resp.Header)
			}
			if !bytes.Contains(body, []byte("Bearer "+credential.Placeholder("api"))) || bytes.Contains(body, []byte("X-Other")) {
				t.Fatalf("body %s: want the placeholder where the value was, and no X-Other", body)
			}
			g.Close()
			lines := w.rec.all(egress.EventCredential)
			if len(lines) != 1 || lines[0].Details["cred"] != "api" || lines[0].Details["status"] != 200 {
				t.Fatalf("network.credential lines: %+v", lines)
			}
			w.conns(1)
			w.rec.mu.Lock()
			all, _ := json.Marshal(w.rec.entries)
			w.rec.mu.Unlock()
			if bytes.Contains(all, []byte(testSecret)) {
				t.Fatalf("the audit holds the value: %s", all)
			}
			if !bytes.Contains(all, []byte(`"creds":["api"]`)) {
				t.Fatalf("the grant's line does not name the credential: %s", all)
			}
		})
	}
}

// Nothing carries the credential to another host: a request for another
// host on the intercepted connection, an absolute URI naming another host,
// a redirect the client follows, the same server reached by an IP
// literal, by another name mapped to the same address or on a port
// without the credential.
func TestCredentialNeverElsewhere(t *testing.T) {
	w := newCredWorld(t)
	sp := strconv.Itoa(w.sport)
	g, proxy := w.grantCreds(w.credPolicy(nil), []string{"api"}, "alt.example.com:"+sp, "api.example.com:"+sp, "127.0.0.1:"+sp)
	// Raw requests inside the intercepted TLS.
	raw := func(request string) string {
		c, err := net.Dial("tcp", proxy.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT example.com:%s HTTP/1.1\r\nHost: example.com:%s\r\n\r\n", sp, sp)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(g.Authority().PEM())
		tc := tls.Client(c, &tls.Config{ServerName: "example.com", RootCAs: pool, NextProtos: []string{"http/1.1"}})
		if _, err := io.WriteString(tc, request); err != nil {
			t.Fatal(err)
		}
		resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s %s", resp.StatusCode, resp.Header.Get(egress.RuleHeader), b)
	}
	for name, req := range map[string]string{
		"other Host":        "GET /headers HTTP/1.1\r\nHost: other.test:" + sp + "\r\n\r\n",
		"absolute URI":      "GET https://other.test:" + sp + "/headers HTTP/1.1\r\nHost: example.com:" + sp + "\r\n\r\n",
		"plain http URI":    "GET http://example.com:" + sp + "/headers HTTP/1.1\r\nHost: example.com:" + sp + "\r\n\r\n",
		"other port in URI": "GET https://example.com:1/headers HTTP/1.1\r\nHost: example.com:" + sp + "\r\n\r\n",
	} {
		if got := raw(req); !strings.HasPrefix(got, "421 "+egress.RuleCredentialHost) {
			t.Errorf("%s: %s, want 421 with rule %s", name, got, egress.RuleCredentialHost)
		}
	}
	if n := len(w.requests()); n != 0 {
		t.Fatalf("the server got %d requests meant for other hosts", n)
	}
	// A second request with another Host on a kept-alive connection:
	// the first one is served, the second is refused.
	if got := raw("GET /headers HTTP/1.1\r\nHost: example.com:" + sp + "\r\n\r\n"); !strings.HasPrefix(got, "200 ") {
		t.Fatalf("a request for the host: %s", got)
	}
	// Other ways to the same server: no credential.
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, u := range []string{
		"https://alt.example.com:" + sp + "/h",                                    // another name for the address (a subdomain of the credential's host)
		"https://api.example.com:" + sp + "/h",                                    // and another
		"https://127.0.0.1:" + sp + "/h",                                          // an IP literal of the host
		"https://example.com:" + sp + "/r?to=https://alt.example.com:" + sp + "/", // a redirect the client follows
	} {
		resp, err := insecure.Get(u)
		if err != nil {
			if !strings.Contains(u, "example.com") {
				t.Fatalf("%s: %v", u, err)
			}
			continue // the redirect's first hop is intercepted: this client does not trust the grant's CA
		}
		resp.Body.Close()
	}
	viaCA := sandboxClient(g, proxy, false, w.srv.Certificate())
	viaCA.CheckRedirect = nil
	resp, err := viaCA.Get("https://example.com:" + sp + "/r?to=https://api.example.com:" + sp + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, s := range w.requests() {
		host, _, _ := net.SplitHostPort(s.host)
		if (s.auth != "") != (host == "example.com") {
			t.Fatalf("request for %s arrived with credential %q", s.host, s.auth)
		}
	}
	if n := len(w.requests()); n < 6 {
		t.Fatalf("the server saw %d requests, want every other way served: %+v", n, w.requests())
	}
}

// A host whose certificate the proxy does not trust gets no credential,
// and the code is told why.
func TestCredentialUntrustedHost(t *testing.T) {
	w := newCredWorld(t)
	p := w.credPolicy(func(n *config.Network) {
		c := n.Credentials["api"]
		c.CAFile = "" // the system's roots: httptest's CA is not one
		n.Credentials["api"] = c
	})
	g, proxy := w.grantCreds(p, []string{"api"})
	resp, err := sandboxClient(g, proxy, false, nil).Get("https://example.com:" + strconv.Itoa(w.sport) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(egress.RuleHeader) != egress.RuleCredentialTLS || !strings.Contains(string(body), "not trusted") {
		t.Fatalf("%s %v: %s", resp.Status, resp.Header, body)
	}
	if n := len(w.requests()); n != 0 {
		t.Fatalf("the untrusted host got %d requests", n)
	}
}

// Found by a hostile review: what a sandbox (or a misbehaving host) could
// make the interception do, each now refused or bounded.
func TestCredentialHostile(t *testing.T) {
	get := func(c *http.Client, u string, h map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	t.Run("CONNECTs to made-up names of a wildcard credential spend the budget", func(t *testing.T) {
		w := newCredWorld(t)
		sp := strconv.Itoa(w.sport)
		_, proxy := w.grantCreds(w.policy(func(n *config.Network) {
			n.AllowedHosts, n.MaxConnections = []string{"*.example.com:" + sp}, 5
			n.Credentials = map[string]config.Credential{"api": {Hosts: []string{"*.example.com:" + sp}, ValueEnv: "FORGE_TEST_CREDENTIAL", CAFile: w.caFile}}
		}), []string{"api"})
		ok := 0
		for i := range 20 {
			c, err := net.Dial("tcp", proxy.Host)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "CONNECT n%d.example.com:%s HTTP/1.1\r\n\r\n", i, sp)
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == 200 {
				ok++
			}
			c.Close()
		}
		if ok != 5 {
			t.Fatalf("%d CONNECTs intercepted, want the budget's 5", ok)
		}
	})
	t.Run("a flood of misdirected requests is audited within the refusal cap", func(t *testing.T) {
		w := newCredWorld(t)
		g, proxy := w.grantCreds(w.credPolicy(nil), []string{"api"})
		c := sandboxClient(g, proxy, true, nil)
		for range egress.MaxRefusalLines + 50 {
			req, _ := http.NewRequest("GET", "https://example.com:"+strconv.Itoa(w.sport)+"/", nil)
			req.Host = "other.test:" + strconv.Itoa(w.sport)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if n := len(w.rec.all(egress.EventCredential)); n > egress.MaxRefusalLines {
			t.Fatalf("%d lines for refused requests, over %d", n, egress.MaxRefusalLines)
		}
	})
	t.Run("no credential while the audit log cannot be written", func(t *testing.T) {
		w := newCredWorld(t)
		g, proxy := w.grantCreds(w.credPolicy(nil), []string{"api"})
		c := sandboxClient(g, proxy, true, nil)
		u := "https://example.com:" + strconv.Itoa(w.sport) + "/"
		get(c, u, nil)
		w.rec.mu.Lock()
		w.rec.fail = errors.New("disk full")
		w.rec.mu.Unlock()
		resp, _ := get(c, u, nil) // the same kept-alive connection
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(egress.RuleHeader) != egress.RuleAudit || len(w.requests()) != 1 {
			t.Fatalf("%s %v; the server saw %d requests", resp.Status, resp.Header, len(w.requests()))
		}
	})
	t.Run("a range of an echo is not asked for", func(t *testing.T) {
		w := newCredWorld(t)
		g, proxy := w.grantCreds(w.credPolicy(nil), []string{"api"})
		resp, body := get(sandboxClient(g, proxy, false, nil), "https://example.com:"+strconv.Itoa(w.sport)+"/", map[string]string{"Range": "bytes=40-45", "If-Range": "x"})
		if seen := w.requests(); resp.StatusCode != 200 || len(seen) != 1 || seen[0].rng != "" || strings.Contains(body, testSecret) {
			t.Fatalf("%s %q; the server saw %+v", resp.Status, body, seen)
		}
	})
	t.Run("a content coding the proxy cannot read, in any header line", func(t *testing.T) {
		w := newCredWorldWith(t, func(rw http.ResponseWriter, r *http.Request) {
			rw.Header()["Content-Encoding"] = []string{"identity", "x-rot13"}
			io.WriteString(rw, "rot13 of the value")
		}, true)
		g, proxy := w.grantCreds(w.credPolicy(nil), []string{"api"})
		resp, _ := get(sandboxClient(g, proxy, false, nil), "https://example.com:"+strconv.Itoa(w.sport)+"/", nil)
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(egress.RuleHeader) != egress.RuleCredentialBody {
			t.Fatalf("%s %v", resp.Status, resp.Header)
		}
	})
	t.Run("a malformed answer quoting the value, and a header named after it", func(t *testing.T) {
		w := newCredWorldWith(t, func(rw http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/name" {
				rw.Header().Set("X-"+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), "1")
				return
			}
			c, bw, _ := rw.(http.Hijacker).Hijack()
			bw.WriteString("HTTP/1.1 200 OK\r\nX-Echo " + r.Header.Get("Authorization") + "\r\n\r\n")
			bw.Flush()
			c.Close()
		}, false)
		g, proxy := w.grantCreds(w.credPolicy(nil), []string{"api"})
		c := sandboxClient(g, proxy, false, nil)
		resp, body := get(c, "https://example.com:"+strconv.Itoa(w.sport)+"/", nil)
		if resp.StatusCode != http.StatusBadGateway || strings.Contains(strings.ToLower(body), strings.ToLower(testSecret)) {
			t.Fatalf("%s %q", resp.Status, body)
		}
		resp, _ = get(c, "https://example.com:"+strconv.Itoa(w.sport)+"/name", nil)
		for k := range resp.Header {
			if strings.Contains(strings.ToLower(k), strings.ToLower(testSecret)) {
				t.Fatalf("header %s reached the sandbox", k)
			}
		}
		w.rec.mu.Lock()
		all, _ := json.Marshal(w.rec.entries)
		w.rec.mu.Unlock()
		if strings.Contains(strings.ToLower(string(all)), strings.ToLower(testSecret)) {
			t.Fatalf("the audit holds the value: %s", all)
		}
	})
	t.Run("a burst of HTTP/2 streams dials the host once", func(t *testing.T) {
		w := newCredWorld(t)
		g, proxy := w.grantCreds(w.credPolicy(nil), []string{"api"})
		// One intercepted connection, fresh, and 50 streams on it at once.
		raw, err := net.Dial("tcp", proxy.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		fmt.Fprintf(raw, "CONNECT example.com:%d HTTP/1.1\r\n\r\n", w.sport)
		br := bufio.NewReader(raw)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(g.Authority().PEM())
		tc := tls.Client(raw, &tls.Config{ServerName: "example.com", RootCAs: pool, NextProtos: []string{"h2"}})
		tr := &http.Transport{ForceAttemptHTTP2: true, DialTLSContext: func(context.Context, string, string) (net.Conn, error) { return tc, tc.Handshake() }}
		cc, err := tr.NewClientConn(context.Background(), "https", "example.com:"+strconv.Itoa(w.sport))
		if err != nil {
			t.Fatal(err)
		}
		u := "https://example.com:" + strconv.Itoa(w.sport) + "/"
		var wg sync.WaitGroup
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("GET", u, nil)
				resp, err := cc.RoundTrip(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
		dials := 0
		for _, a := range w.dials.list() {
			if strings.HasSuffix(a, ":"+strconv.Itoa(w.sport)) {
				dials++
			}
		}
		if n, _, _ := g.Used(); dials != 1 || n != 1 || len(w.requests()) != 50 {
			t.Fatalf("%d dials, %d connections counted, %d requests served; want 1, 1, 50", dials, n, len(w.requests()))
		}
	})
}

// With require_approval the user is asked naming the credentials too.
func TestCredentialApproval(t *testing.T) {
	w := newCredWorld(t)
	var asked string
	p := w.credPolicy(func(n *config.Network) { n.RequireApproval = true })
	g, err := p.Grant(context.Background(), egress.Request{Credentials: []string{"api"}, Approve: func(_ context.Context, msg string) (bool, bool, error) {
		asked = msg
		return true, true, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if !strings.Contains(asked, "example.com:"+strconv.Itoa(w.sport)) || !strings.Contains(asked, "adding credential api") {
		t.Fatalf("the question %q does not name the host and the credential", asked)
	}
}
