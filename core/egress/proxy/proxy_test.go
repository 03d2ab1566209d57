package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
)

// mapResolver is the test-only resolver: names to addresses, nothing else.
type mapResolver map[string][]string

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	list, ok := m[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, s := range list {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

// dialLog dials for real and keeps every address it was handed.
type dialLog struct {
	mu    sync.Mutex
	addrs []string
}

func (d *dialLog) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.addrs = append(d.addrs, addr)
	d.mu.Unlock()
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

func (d *dialLog) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.addrs...)
}

// world is local servers reached through a proxy by made-up names.
type world struct {
	t         testing.TB
	http      *httptest.Server
	tls       *httptest.Server
	hport     int // of http
	tport     int // of tls
	echo      net.Listener
	eport     int
	resolver  mapResolver
	dials     *dialLog
	rec       *recorder
	caPool    *x509.CertPool
	headerTTL time.Duration
}

func port(t testing.TB, addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{t: t, dials: &dialLog{}, rec: &recorder{}, headerTTL: 300 * time.Millisecond}
	mux := http.NewServeMux()
	mux.HandleFunc("/data", func(rw http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("size"))
		rw.Header().Set("Content-Length", strconv.Itoa(n))
		_, _ = rw.Write(bytes.Repeat([]byte("x"), n))
	})
	mux.HandleFunc("/redirect", func(rw http.ResponseWriter, r *http.Request) {
		http.Redirect(rw, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/upload", func(rw http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return
		}
		fmt.Fprintf(rw, "%d", n)
	})
	mux.HandleFunc("/headers", func(rw http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(rw).Encode(map[string]any{"host": r.Host, "header": r.Header, "uri": r.RequestURI})
	})
	w.http = httptest.NewServer(mux)
	w.tls = httptest.NewTLSServer(mux)
	t.Cleanup(w.http.Close)
	t.Cleanup(w.tls.Close)
	w.hport, w.tport = port(t, w.http.Listener.Addr().String()), port(t, w.tls.Listener.Addr().String())
	w.caPool = x509.NewCertPool()
	w.caPool.AddCert(w.tls.Certificate())
	var err error
	if w.echo, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.echo.Close() })
	w.eport = port(t, w.echo.Addr().String())
	go func() {
		for {
			c, err := w.echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	// example.com is a name in httptest's certificate.
	w.resolver = mapResolver{"files.test": {"127.0.0.1"}, "example.com": {"127.0.0.1"}, "other.test": {"127.0.0.1"},
		"echo.test": {"127.0.0.1"}, "internal.test": {"10.1.2.3"}, "metadata.test": {"169.254.169.254"},
		"mixed.test": {"10.9.9.9", "127.0.0.1"}, "v6.test": {"::1"}}
	return w
}

// policy is the world's operator policy: its names, loopback allowed only
// by the explicit 127.0.0.1/32.
func (w *world) policy(edit func(*config.Network)) *egress.Policy {
	w.t.Helper()
	n := network(func(n *config.Network) {
		h, tp, e := strconv.Itoa(w.hport), strconv.Itoa(w.tport), strconv.Itoa(w.eport)
		n.AllowedHosts = []string{"files.test:" + h, "example.com:" + tp, "other.test:" + h, "echo.test:" + e, "internal.test:80",
			"metadata.test:80", "mixed.test:" + h, "nowhere.test:80", "v6.test:" + h, "127.0.0.1:" + h}
		n.AllowedCIDRs = []string{"127.0.0.1/32"}
		if edit != nil {
			edit(n)
		}
	})
	p, err := egress.NewPolicy(n, nil, w.rec)
	if err != nil {
		w.t.Fatal(err)
	}
	return p
}

// grant asks for hosts and serves the proxy for them on a local listener;
// it returns the grant and the proxy's URL.
func (w *world) grant(p *egress.Policy, hosts ...string) (*egress.Grant, *url.URL) {
	w.t.Helper()
	return w.serve(p, egress.Request{Hosts: hosts})
}

// serve grants r (as the tester's run) and serves the proxy for it.
func (w *world) serve(p *egress.Policy, r egress.Request) (*egress.Grant, *url.URL) {
	w.t.Helper()
	r.Client, r.Session, r.RunID = "tester", "sess-1", "run-1"
	g, err := p.Grant(context.Background(), r)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(g.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	px := New(Options{Resolver: w.resolver, Dial: w.dials.dial, HeaderTimeout: w.headerTTL, MaxHeaderBytes: 8 << 10})
	done := make(chan struct{})
	go func() { defer close(done); _ = px.Serve(ctx, ln, g) }()
	w.t.Cleanup(func() { cancel(); <-done })
	return g, &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

func (w *world) client(proxy *url.URL) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy),
		TLSClientConfig: &tls.Config{RootCAs: w.caPool}, DisableKeepAlives: true}}
}

// conns are the connection lines, waiting a little for ones still being
// written (a connection is audited when it ends).
func (w *world) conns(n int) []audit.Entry {
	deadline := time.Now().Add(3 * time.Second)
	for {
		got := w.rec.all(egress.EventConnection)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// count waits for n lines of outcome and rule and returns how many came.
func (w *world) count(outcome, rule string, n int) int {
	deadline := time.Now().Add(3 * time.Second)
	for {
		got := 0
		for _, e := range w.rec.all(egress.EventConnection) {
			if e.Details["outcome"] == outcome && e.Details["rule"] == rule {
				got++
			}
		}
		if got >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// last is the newest connection line once no more arrive for a moment.
func (w *world) last() audit.Entry {
	w.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	n := -1
	for {
		got := w.rec.all(egress.EventConnection)
		if len(got) > 0 && len(got) == n || time.Now().After(deadline) {
			if len(got) == 0 {
				w.t.Fatal("no connection was audited")
			}
			return got[len(got)-1]
		}
		n = len(got)
		time.Sleep(50 * time.Millisecond)
	}
}

// Requests through the proxy by a real http.Client: what is granted is
// served, everything else refused with its rule, and every connection is
// audited without its path or query.
func TestProxyRequests(t *testing.T) {
	w := newWorld(t)
	h, tp := strconv.Itoa(w.hport), strconv.Itoa(w.tport)
	_, proxy := w.grant(w.policy(nil), "files.test", "example.com", "internal.test", "metadata.test", "mixed.test", "nowhere.test", "v6.test")
	cases := []struct {
		name    string
		url     string
		status  int    // of a response; 0: the client fails (a refused CONNECT)
		rule    string // of the last audit line; "": outcome done
		address string // the last line's dialled address ("": none)
		says    string // in the refusal's text
	}{
		{"granted name over http", "http://files.test:" + h + "/data?size=1024&secret=q", 200, "", "127.0.0.1:" + h, ""},
		{"granted name over https (CONNECT)", "https://example.com:" + tp + "/data?size=1024", 200, "", "127.0.0.1:" + tp, ""},
		{"ungranted name", "http://other.test:" + h + "/data?size=1", 403, egress.RuleHost, "", "other.test is not granted to this run"},
		{"ungranted name over https", "https://other.test:" + tp + "/", 0, egress.RuleHost, "", ""},
		{"IP literal", "http://127.0.0.1:" + h + "/data?size=1", 403, egress.RuleIPLiteral, "", "IP address this run was not granted"},
		{"IP literal over https", "https://127.0.0.1:" + tp + "/", 0, egress.RuleIPLiteral, "", ""},
		{"name of a private address", "http://internal.test/", 403, egress.RuleAddress, "", "10.1.2.3 is private"},
		{"name of the metadata service", "http://metadata.test/latest/meta-data/", 403, egress.RuleAddress, "", "metadata"},
		{"name of a loopback IPv6 address outside the CIDR", "http://v6.test:" + h + "/", 403, egress.RuleAddress, "", "::1 is loopback"},
		{"only the allowed one of two addresses", "http://mixed.test:" + h + "/data?size=10", 200, "", "127.0.0.1:" + h, ""},
		{"CONNECT to another port", "https://example.com:" + h + "/", 0, egress.RulePort, "", ""},
		{"plain request to another port", "http://files.test:" + tp + "/", 403, egress.RulePort, "", "granted on port " + h + " only"},
		{"a name that does not resolve", "http://nowhere.test/", 502, egress.RuleResolve, "", "does not resolve"},
		{"redirect to an ungranted host", "http://files.test:" + h + "/redirect?to=" + url.QueryEscape("http://other.test:"+h+"/data?size=1"), 403, egress.RuleHost, "", "other.test"},
	}
	c := w.client(proxy)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(w.rec.all(egress.EventConnection))
			resp, err := c.Get(tc.url)
			var body []byte
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			switch {
			case tc.status == 0:
				if err == nil {
					t.Fatalf("want the client to fail, got %s", resp.Status)
				}
				if !strings.Contains(err.Error(), "403") && !strings.Contains(err.Error(), "Forbidden") {
					t.Errorf("the client's error %q does not show the refusal", err)
				}
			case err != nil:
				t.Fatal(err)
			case resp.StatusCode != tc.status:
				t.Fatalf("status %s, want %d: %s", resp.Status, tc.status, body)
			case tc.rule != "" && resp.Header.Get(egress.RuleHeader) != tc.rule:
				t.Errorf("%s header %q, want %q", egress.RuleHeader, resp.Header.Get(egress.RuleHeader), tc.rule)
			case tc.says != "" && !strings.Contains(string(body), tc.says):
				t.Errorf("body %q does not say %q", body, tc.says)
			case tc.status == 200 && !bytes.HasPrefix(body, []byte("x")):
				t.Errorf("body %q", body)
			}
			// The line of this case: the redirect's case has two, the
			// served redirect and the refused request that followed it.
			lines := w.conns(before + 1)
			if len(lines) <= before {
				t.Fatal("the connection was not audited")
			}
			e := lines[len(lines)-1]
			if strings.Contains(tc.url, "/redirect") {
				lines = w.conns(before + 2)
			}
			for _, x := range lines[before:] {
				if x.Details["rule"] == nil == (tc.rule == "") {
					e = x
				}
			}
			if tc.rule == "" {
				if e.Details["outcome"] != egress.OutcomeDone || !e.Success {
					t.Errorf("audited %+v, want outcome done", e)
				}
			} else if e.Details["rule"] != tc.rule || e.Details["outcome"] != egress.OutcomeRefused || e.Success || e.Severity != audit.Warning {
				t.Errorf("audited %+v, want refused by %s", e, tc.rule)
			}
			if tc.address != "" && e.Details["address"] != tc.address {
				t.Errorf("audited address %v, want %s", e.Details["address"], tc.address)
			}
			if e.UserID != "tester" || e.SessionID != "sess-1" || e.Details["run_id"] != "run-1" {
				t.Errorf("the line does not say whose connection it was: %+v", e)
			}
			line, _ := json.Marshal(e)
			for _, secret := range []string{"secret=q", "size=", "/data", "meta-data"} {
				if bytes.Contains(line, []byte(secret)) {
					t.Errorf("the audit line holds the request's %q: %s", secret, line)
				}
			}
			if tc.status == 200 {
				if down, _ := e.Details["bytes_down"].(int64); down < 10 {
					t.Errorf("bytes_down %v", e.Details["bytes_down"])
				}
			}
		})
	}
	// The redirect itself was served, and the followed request refused.
	var served bool
	for _, e := range w.rec.all(egress.EventConnection) {
		if e.Details["host"] == "files.test" && e.Details["outcome"] == egress.OutcomeDone {
			served = true
		}
	}
	if !served {
		t.Error("no served request to files.test was audited")
	}
	// Every dial was of a checked address, never a name, never a refused one.
	for _, a := range w.dials.list() {
		ap, err := netip.ParseAddrPort(a)
		if err != nil || ap.Addr() != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("dialled %q: only 127.0.0.1 (granted by CIDR) may be", a)
		}
	}
}

// The upstream request is the client's, minus hop-by-hop headers and the
// proxy's credentials, to the checked address with the right Host.
func TestProxyForwardsRequest(t *testing.T) {
	w := newWorld(t)
	_, proxy := w.grant(w.policy(nil), "files.test")
	req, _ := http.NewRequest("GET", "http://files.test:"+strconv.Itoa(w.hport)+"/headers?a=1", nil)
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	req.Header.Set("X-Keep", "yes")
	req.Header.Set("Connection", "X-Drop")
	req.Header.Set("X-Drop", "hop")
	resp, err := w.client(proxy).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Host   string
		Header http.Header
		URI    string
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Host != "files.test:"+strconv.Itoa(w.hport) || got.URI != "/headers?a=1" {
		t.Errorf("upstream saw Host %q URI %q", got.Host, got.URI)
	}
	if got.Header.Get("X-Keep") != "yes" || got.Header.Get("Proxy-Authorization") != "" || got.Header.Get("X-Drop") != "" {
		t.Errorf("upstream headers %v", got.Header)
	}
}

// Keep-alive between client and proxy: several requests on one client
// connection, each its own audited upstream connection.
func TestProxyKeepAlive(t *testing.T) {
	w := newWorld(t)
	_, proxy := w.grant(w.policy(nil), "files.test")
	c := w.client(proxy)
	c.Transport.(*http.Transport).DisableKeepAlives = false
	for i := 0; i < 3; i++ {
		resp, err := c.Get("http://files.test:" + strconv.Itoa(w.hport) + "/data?size=5")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "xxxxx" {
			t.Fatalf("request %d: %q", i, b)
		}
	}
	if n := len(w.conns(3)); n != 3 {
		t.Errorf("%d connection lines, want 3", n)
	}
}

// raw sends bytes to the proxy and returns its answer (status line, the
// rule header) and how long it took.
func raw(t *testing.T, proxy *url.URL, send string, wait time.Duration) (string, string) {
	t.Helper()
	c, err := net.Dial("tcp", proxy.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, send); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to %q: %v", send[:min(len(send), 60)], err)
	}
	resp.Body.Close()
	return resp.Status, resp.Header.Get(egress.RuleHeader)
}

// Requests that are not proxy requests, or not HTTP, or too big, or too
// slow, are answered and audited with their rule.
func TestProxyMalformed(t *testing.T) {
	w := newWorld(t)
	_, proxy := w.grant(w.policy(nil), "files.test", "echo.test")
	h := strconv.Itoa(w.hport)
	cases := []struct {
		name   string
		send   string
		status int
		rule   string
	}{
		{"origin-form with a Host", "GET /data HTTP/1.1\r\nHost: files.test:" + h + "\r\n\r\n", 400, egress.RuleRequest},
		{"no host at all", "GET / HTTP/1.1\r\n\r\n", 400, egress.RuleRequest},
		{"https as a plain request", "GET https://files.test:" + h + "/ HTTP/1.1\r\nHost: files.test\r\n\r\n", 400, egress.RuleRequest},
		{"ftp", "GET ftp://files.test/ HTTP/1.1\r\nHost: files.test\r\n\r\n", 400, egress.RuleRequest},
		{"CONNECT without a port", "CONNECT echo.test HTTP/1.1\r\nHost: echo.test\r\n\r\n", 400, egress.RuleRequest},
		{"CONNECT to a wildcard", "CONNECT *.test:443 HTTP/1.1\r\n\r\n", 400, egress.RuleRequest},
		{"CONNECT to a bad name", "CONNECT bad_name.test:443 HTTP/1.1\r\n\r\n", 400, egress.RuleRequest},
		{"upgrade", "GET http://files.test:" + h + "/ HTTP/1.1\r\nHost: files.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", 400, egress.RuleRequest},
		{"not HTTP", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03hello\r\n\r\n", 400, egress.RuleRequest},
		{"huge headers", "GET http://files.test:" + h + "/ HTTP/1.1\r\nHost: files.test\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n", 431, egress.RuleHeaders},
		{"slowloris", "GET http://files.test:" + h + "/ HTTP/1.1\r\nHost: files.test\r\nX-Slow: a", 408, egress.RuleHeaderTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(w.rec.all(egress.EventConnection))
			start := time.Now()
			status, rule := raw(t, proxy, tc.send, 5*time.Second)
			if !strings.HasPrefix(status, strconv.Itoa(tc.status)) || rule != tc.rule {
				t.Fatalf("answer %q rule %q, want %d %s", status, rule, tc.status, tc.rule)
			}
			if tc.rule == egress.RuleHeaderTimeout && time.Since(start) > 3*w.headerTTL {
				t.Errorf("the slow client was answered after %s, header timeout %s", time.Since(start), w.headerTTL)
			}
			lines := w.conns(before + 1)
			if len(lines) <= before || lines[len(lines)-1].Details["rule"] != tc.rule {
				t.Fatalf("not audited with %s: %+v", tc.rule, lines[before:])
			}
		})
	}
	if d := w.dials.list(); len(d) != 0 {
		t.Errorf("malformed requests dialled %v", d)
	}
	// An idle connection is closed after the header timeout, unaudited:
	// it asked for nothing.
	c, err := net.Dial("tcp", proxy.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	before := len(w.rec.all(egress.EventConnection))
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("idle connection: read %d, %v; want EOF", n, err)
	}
	if n := len(w.rec.all(egress.EventConnection)); n != before {
		t.Errorf("an idle connection was audited")
	}
}

// tunnelTo opens a CONNECT tunnel to echo.test through the proxy.
func tunnelTo(t *testing.T, w *world, proxy *url.URL) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", proxy.Host)
	if err != nil {
		t.Fatal(err)
	}
	target := "echo.test:" + strconv.Itoa(w.eport)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	if br.Buffered() != 0 {
		t.Fatal("bytes after the 200")
	}
	return c
}

func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo: %q %v", buf, err)
	}
}

// cutWithin asserts the tunnel ends promptly.
func cutWithin(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the tunnel is still open after %s", d)
	}
}

// Close (the run ended) cuts an open tunnel at once, and the grant takes
// no new connection; both audited with the rule.
func TestCloseCutsTunnel(t *testing.T) {
	w := newWorld(t)
	g, proxy := w.grant(w.policy(nil), "echo.test")
	c := tunnelTo(t, w, proxy)
	defer c.Close()
	msg := "ping: bytes pass untouched \x00\xff"
	echo(t, c, msg)
	g.Close()
	cutWithin(t, c, 2*time.Second)
	e := w.last()
	if e.Details["outcome"] != egress.OutcomeCut || e.Details["rule"] != egress.RuleClosed || e.Details["bytes_up"] != int64(len(msg)) || e.Details["bytes_down"] != int64(len(msg)) {
		t.Errorf("cut tunnel audited as %+v", e)
	}
	status, rule := raw(t, proxy, "CONNECT echo.test:"+strconv.Itoa(w.eport)+" HTTP/1.1\r\n\r\n", 5*time.Second)
	if !strings.HasPrefix(status, "403") || rule != egress.RuleClosed {
		t.Errorf("after Close: %s %s", status, rule)
	}
}

// Budgets: past each, new connections are refused; past bytes or time,
// open ones are cut. Each audited with its rule.
func TestBudgets(t *testing.T) {
	t.Run("connections", func(t *testing.T) {
		w := newWorld(t)
		_, proxy := w.grant(w.policy(func(n *config.Network) { n.MaxConnections = 3 }), "files.test")
		c := w.client(proxy)
		var codes []int
		for i := 0; i < 6; i++ {
			resp, err := c.Get("http://files.test:" + strconv.Itoa(w.hport) + "/data?size=1")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			codes = append(codes, resp.StatusCode)
			if i >= 3 && resp.Header.Get(egress.RuleHeader) != egress.RuleBudgetConnections {
				t.Errorf("request %d: rule %q", i, resp.Header.Get(egress.RuleHeader))
			}
		}
		if fmt.Sprint(codes) != "[200 200 200 403 403 403]" {
			t.Errorf("statuses %v", codes)
		}
		if n := len(w.dials.list()); n != 3 {
			t.Errorf("%d dials past a budget of 3", n)
		}
	})
	t.Run("download", func(t *testing.T) {
		w := newWorld(t)
		g, proxy := w.grant(w.policy(func(n *config.Network) { n.MaxDownload = 16 << 10 }), "files.test", "echo.test")
		open := tunnelTo(t, w, proxy) // cut too when the budget is spent elsewhere
		defer open.Close()
		resp, err := w.client(proxy).Get("http://files.test:" + strconv.Itoa(w.hport) + "/data?size=1048576")
		if err == nil {
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if n >= 16<<10 {
				t.Errorf("read %d bytes past a 16 KiB budget", n)
			}
		}
		cutWithin(t, open, 2*time.Second)
		if _, _, down := g.Used(); down != 16<<10 {
			t.Errorf("downloaded %d, want exactly the budget", down)
		}
		status, rule := raw(t, proxy, "CONNECT echo.test:"+strconv.Itoa(w.eport)+" HTTP/1.1\r\n\r\n", 5*time.Second)
		if !strings.HasPrefix(status, "403") || rule != egress.RuleBudgetDownload {
			t.Errorf("after the budget: %s %s", status, rule)
		}
		if cut := w.count(egress.OutcomeCut, egress.RuleBudgetDownload, 2); cut != 2 {
			t.Errorf("%d connections audited as cut by %s, want 2 (the download and the idle tunnel)", cut, egress.RuleBudgetDownload)
		}
	})
	t.Run("upload", func(t *testing.T) {
		w := newWorld(t)
		g, proxy := w.grant(w.policy(func(n *config.Network) { n.MaxUpload = 8 << 10 }), "echo.test")
		c := tunnelTo(t, w, proxy)
		defer c.Close()
		go func() { _, _ = c.Write(make([]byte, 1<<20)) }()
		cutWithin(t, c, 3*time.Second)
		if _, up, _ := g.Used(); up != 8<<10 {
			t.Errorf("uploaded %d, want exactly the budget", up)
		}
		if e := w.last(); e.Details["rule"] != egress.RuleBudgetUpload || e.Details["outcome"] != egress.OutcomeCut {
			t.Errorf("audited %+v", e)
		}
	})
	t.Run("duration", func(t *testing.T) {
		w := newWorld(t)
		_, proxy := w.grant(w.policy(func(n *config.Network) { n.MaxDuration = 1 }), "echo.test")
		c := tunnelTo(t, w, proxy)
		defer c.Close()
		echo(t, c, "still in time")
		cutWithin(t, c, 3*time.Second)
		if e := w.last(); e.Details["rule"] != egress.RuleBudgetDuration || e.Details["outcome"] != egress.OutcomeCut {
			t.Errorf("audited %+v", e)
		}
	})
}

// An audit log that cannot be written refuses connections (fail closed).
func TestAuditDownRefuses(t *testing.T) {
	w := newWorld(t)
	_, proxy := w.grant(w.policy(nil), "files.test")
	w.rec.mu.Lock()
	w.rec.fail = fmt.Errorf("disk full")
	w.rec.mu.Unlock()
	resp, err := w.client(proxy).Get("http://files.test:" + strconv.Itoa(w.hport) + "/data?size=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get(egress.RuleHeader) != egress.RuleAudit {
		t.Errorf("with the audit log down: %s %s", resp.Status, resp.Header.Get(egress.RuleHeader))
	}
	if d := w.dials.list(); len(d) != 0 {
		t.Errorf("dialled %v unaudited", d)
	}
}

// When the machine's addresses cannot be listed, every address counts as
// the core's own.
func TestOwnAddresses(t *testing.T) {
	own := &ownAddrs{lookup: func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("203.0.113.5")}, nil }}
	if ok, _ := own.has(netip.MustParseAddr("203.0.113.5")); !ok {
		t.Error("an own address is not own")
	}
	if ok, _ := own.has(netip.MustParseAddr("203.0.113.6")); ok {
		t.Error("another address is own")
	}
	broken := &ownAddrs{lookup: func() ([]netip.Addr, error) { return nil, fmt.Errorf("netlink") }}
	if ok, err := broken.has(netip.MustParseAddr("8.8.8.8")); !ok || err == nil {
		t.Error("unlisted addresses do not fail closed")
	}
	p := New(Options{OwnAddrs: own.lookup})
	g := &egress.Grant{}
	if why := p.refusedAddr(netip.MustParseAddr("203.0.113.5"), g); !strings.Contains(why, "the core's own") {
		t.Errorf("own address: %q", why)
	}
	ranged, err := egress.NewPolicy(network(func(n *config.Network) { n.AllowedCIDRs = []string{"203.0.113.0/24"} }), nil, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	if g, err = ranged.Grant(context.Background(), egress.Request{Hosts: []string{"203.0.113.5"}}); err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if why := p.refusedAddr(netip.MustParseAddr("203.0.113.5"), g); why != "" {
		t.Errorf("an own address inside a granted CIDR: %q", why)
	}
}

// A request body is forwarded whole (chunked or not), and a hostile
// upstream's endless headers are cut off at the limit, not held in memory.
func TestProxyBodiesAndHostileUpstream(t *testing.T) {
	w := newWorld(t)
	hostile, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostile.Close()
	go func() {
		for {
			c, err := hostile.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = http.ReadRequest(bufio.NewReader(c))
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Endless: ")
				chunk := bytes.Repeat([]byte("a"), 64<<10)
				for i := 0; i < 64; i++ { // 4 MiB of one header
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	hp := strconv.Itoa(port(t, hostile.Addr().String()))
	w.resolver["hostile.test"] = []string{"127.0.0.1"}
	g, proxy := w.grant(w.policy(func(n *config.Network) { n.AllowedHosts = append(n.AllowedHosts, "hostile.test:"+hp) }), "files.test", "hostile.test")
	c := w.client(proxy)
	for _, chunked := range []bool{false, true} {
		body := io.Reader(bytes.NewReader(make([]byte, 100<<10)))
		if chunked {
			body = io.MultiReader(body) // no length known: sent chunked
		}
		resp, err := c.Post("http://files.test:"+strconv.Itoa(w.hport)+"/upload", "application/octet-stream", body)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != "102400" {
			t.Errorf("chunked %v: upstream received %q bytes", chunked, got)
		}
	}
	resp, err := c.Get("http://hostile.test:" + hp + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("endless headers: %s", resp.Status)
	}
	e := w.last()
	if e.Details["outcome"] != egress.OutcomeError || !strings.Contains(e.Error, "response headers are over") {
		t.Errorf("audited %+v", e)
	}
	if _, _, down := g.Used(); down > 2*MaxResponseHeaderBytes {
		t.Errorf("read %d bytes of headers", down)
	}
}
