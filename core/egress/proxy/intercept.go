package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/config/hostpattern"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/egress/credential"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// interceptIdle bounds an intercepted connection's idle time between
// requests (HTTP/1.1 keep-alive, HTTP/2 without streams).
const interceptIdle = 60 * time.Second

// interception is one CONNECT to a host with a credential: the sandbox's
// TLS ends here, every request on it is checked to be for that host,
// gets the credential and goes out over the proxy's own TLS to the real
// host. Redirects go back as they are: one the code follows is a new
// request, checked as any other.
type interception struct {
	p *Proxy
	g *egress.Grant
	t hostpattern.Pattern
	c *credential.Granted

	requests atomic.Int32
	// paid: the CONNECT counted against max_connections pays for the first
	// upstream connection.
	paid    atomic.Bool
	mu      sync.Mutex // ups, address
	ups     []*egress.Upstream
	address string

	// The upstream, chosen once its protocol is known: one HTTP/2
	// connection for every request (h2), or the transport's HTTP/1.1
	// connections (at most maxUpstreamH1 at once). upMu makes the first
	// dial (and a redial of a closed HTTP/2 connection) one at a time: a
	// burst of HTTP/2 streams would otherwise dial one connection each.
	tr    *http.Transport
	upMu  sync.Mutex
	h2    *http.ClientConn
	h1    bool
	stash net.Conn // dialled to learn the protocol, for the transport's next dial (under mu)
}

// maxUpstreamH1 bounds the HTTP/1.1 connections to the host one
// intercepted connection uses at once (its HTTP/2 streams in parallel).
const maxUpstreamH1 = 4

// intercept serves a CONNECT to t, whose credential is c.
func (p *Proxy) intercept(ctx context.Context, client *egress.Conn, br *bufio.Reader, g *egress.Grant, t hostpattern.Pattern, c *credential.Granted, l *connLog) {
	l.host, l.port, l.credential = t.Host(), t.Port, c.Name
	if err := g.Check(t); err != nil {
		p.refuse(client, g, l, err)
		return
	}
	if err := g.CheckAudit(); err != nil {
		p.refuseStatus(client, g, l, http.StatusServiceUnavailable, refusal.New(egress.RuleAudit, "the audit log cannot be written, so no connection is made: tell the operator"))
		return
	}
	// The CONNECT counts, whether or not a request follows: making the
	// leaf certificate and serving TLS is work a loop of CONNECTs would
	// otherwise get for free.
	if err := g.Open(); err != nil {
		p.refuse(client, g, l, err)
		return
	}
	leaf, err := g.Authority().Leaf(t.Name)
	if err != nil {
		l.outcome, l.err = egress.OutcomeError, clean(err.Error())
		p.answer(client, http.StatusInternalServerError, "", l.err)
		record(g, l)
		return
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		l.outcome, l.err = egress.OutcomeError, clean(err.Error())
		record(g, l)
		return
	}
	in := &interception{p: p, g: g, t: t, c: c}
	in.paid.Store(true)
	in.tr = &http.Transport{
		DialTLSContext:         in.dialUp,
		ForceAttemptHTTP2:      true,
		MaxConnsPerHost:        maxUpstreamH1,
		MaxIdleConnsPerHost:    maxUpstreamH1,
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
		IdleConnTimeout:        interceptIdle,
	}
	defer in.close()
	tc := tls.Server(&readerConn{Conn: client, r: br}, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	ln := &oneConn{c: tc, closed: make(chan struct{})}
	srv := &http.Server{
		Handler:           in,
		ReadHeaderTimeout: p.headerTO, // the TLS handshake too
		IdleTimeout:       interceptIdle,
		MaxHeaderBytes:    p.maxHeader,
		ErrorLog:          log.New(io.Discard, "", 0),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				ln.end()
			}
		},
	}
	go func() { _ = srv.Serve(ln) }()
	select {
	case <-ln.closed:
	case <-ctx.Done():
	}
	_ = srv.Close()
	in.record(l, client)
}

// close ends the upstream connections.
func (in *interception) close() {
	in.upMu.Lock()
	if in.h2 != nil {
		in.h2.Close()
	}
	in.upMu.Unlock()
	in.tr.CloseIdleConnections()
	in.mu.Lock()
	if in.stash != nil {
		in.stash.Close()
	}
	defer in.mu.Unlock()
	for _, up := range in.ups {
		up.Close()
		in.g.Untrack(up.Conn)
	}
}

// record writes the connection's audit line: the bytes of every upstream
// connection it opened.
func (in *interception) record(l *connLog, client *egress.Conn) {
	in.mu.Lock()
	l.ups, l.address = in.ups, in.address
	in.mu.Unlock()
	rule := client.CutBy()
	for _, up := range l.ups {
		rule = firstNonEmpty(rule, up.CutBy())
	}
	switch {
	case rule != "":
		l.outcome, l.rule, l.err = egress.OutcomeCut, rule, in.g.Ended(rule).Error()
	case in.requests.Load() == 0:
		l.outcome, l.err = egress.OutcomeError, "no request arrived: the sandbox did not finish TLS with the proxy (its client must trust "+egress.SandboxDir+"/"+credential.BundleName+", which SSL_CERT_FILE names)"
	default:
		l.outcome = egress.OutcomeDone
	}
	record(in.g, l)
}

// roundTrip sends req to the host: over the HTTP/2 connection, or the
// HTTP/1.1 transport, once the first dial has told which.
func (in *interception) roundTrip(req *http.Request) (*http.Response, error) {
	in.upMu.Lock()
	if in.h2 != nil && in.h2.Err() != nil {
		in.h2.Close() // gone away or broken: the next request dials again
		in.h2 = nil
	}
	if h2, h1 := in.h2, in.h1; h2 != nil || h1 {
		in.upMu.Unlock()
		if h2 != nil {
			return h2.RoundTrip(req)
		}
		return in.tr.RoundTrip(req)
	}
	defer in.upMu.Unlock()
	conn, err := in.dialTLS(req.Context(), "h2", "http/1.1")
	if err != nil {
		return nil, err
	}
	in.mu.Lock()
	in.stash = conn // the transport's next dial takes it
	in.mu.Unlock()
	if conn.ConnectionState().NegotiatedProtocol != "h2" {
		in.h1 = true
		return in.tr.RoundTrip(req)
	}
	cc, err := in.tr.NewClientConn(req.Context(), "https", in.t.String())
	if err != nil {
		return nil, err
	}
	in.h2 = cc
	// Waits at the host's concurrency limit rather than dialling more.
	return cc.RoundTrip(req)
}

// dialUp is the transport's dial: the connection dialled to learn the
// protocol, then new ones.
func (in *interception) dialUp(ctx context.Context, _, _ string) (net.Conn, error) {
	in.mu.Lock()
	c := in.stash
	in.stash = nil
	in.mu.Unlock()
	if c != nil {
		return c, nil
	}
	return in.dialTLS(ctx, "h2", "http/1.1")
}

// dialTLS opens an upstream connection: to the connection's target,
// checked and counted as every connection of the grant (the first one
// paid by the CONNECT), then TLS verified against the host's trust store
// (or the credential's ca_file).
func (in *interception) dialTLS(ctx context.Context, protos ...string) (*tls.Conn, error) {
	l := &connLog{}
	up, _, err := in.p.dialTarget(ctx, in.g, in.t, l, !in.paid.CompareAndSwap(true, false))
	if err != nil {
		return nil, err
	}
	in.mu.Lock()
	in.ups = append(in.ups, up)
	if in.address == "" {
		in.address = l.address
	}
	in.mu.Unlock()
	tc := tls.Client(up, &tls.Config{ServerName: in.t.Name, RootCAs: in.c.Roots, NextProtos: protos, MinVersion: tls.VersionTLS12})
	hctx, cancel := context.WithTimeout(ctx, in.p.dialTO)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		up.Close()
		return nil, &tlsFailed{host: in.t.String(), err: err}
	}
	return tc, nil
}

// tlsFailed is an upstream whose TLS failed: most often a certificate
// the host's trust store does not vouch for.
type tlsFailed struct {
	host string
	err  error
}

func (e *tlsFailed) Error() string {
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var ce x509.CertificateInvalidError
	switch {
	case errors.As(e.err, &ue), errors.As(e.err, &he), errors.As(e.err, &ce):
		return fmt.Sprintf("the certificate of %s is not trusted, so its credential is not sent (%s)", e.host, clean(e.err.Error()))
	}
	return fmt.Sprintf("TLS with %s failed (%s)", e.host, clean(e.err.Error()))
}

// authority is the host as a request names it, and the port.
func (in *interception) authority() string {
	if in.t.Port == config.CredentialPort {
		return in.t.Name
	}
	return in.t.Name + ":" + strconv.Itoa(in.t.Port)
}

// sameHost reports whether r is for the connection's host and port: its
// Host (HTTP/1.1) or :authority (HTTP/2), and its URL's when absolute.
func (in *interception) sameHost(r *http.Request) bool {
	is := func(hostport string) bool {
		t, err := target(hostport, config.CredentialPort)
		return err == nil && !t.Addr.IsValid() && t.Name == in.t.Name && t.Port == in.t.Port
	}
	if !is(r.Host) {
		return false
	}
	return r.URL.Host == "" || (is(r.URL.Host) && (r.URL.Scheme == "" || r.URL.Scheme == "https"))
}

func (in *interception) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in.requests.Add(1)
	start := time.Now()
	fail := func(status int, rule string, err error) {
		why := in.scrub(err.Error()) // an upstream's error may quote what it was sent
		in.audit(r.Method, status, rule, why, start)
		msg := "mcp-forge egress: " + clean(why)
		if rule != "" {
			w.Header().Set(egress.RuleHeader, rule)
			msg += " (rule " + rule + ")"
		}
		http.Error(w, msg, status)
	}
	if err := in.g.CheckAudit(); err != nil {
		fail(http.StatusServiceUnavailable, egress.RuleAudit, errors.New("the audit log cannot be written, so no credential is added: tell the operator"))
		return
	}
	if !in.sameHost(r) {
		// Never to another host: not on this connection, whatever the
		// client's connection reuse (HTTP/2 coalescing, a kept-alive
		// connection, an absolute URI) asks.
		fail(http.StatusMisdirectedRequest, egress.RuleCredentialHost, fmt.Errorf("this connection carries requests for %s only, not %s: open a connection to that host", in.t, clean(r.Host)))
		return
	}
	if r.Method == http.MethodConnect {
		// A tunnel inside the tunnel (HTTP/2's extended CONNECT too) would
		// carry bytes past these checks.
		fail(http.StatusMethodNotAllowed, egress.RuleRequest, fmt.Errorf("CONNECT inside a connection to %s is not proxied", in.t))
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "https://"+in.authority()+r.URL.RequestURI(), r.Body)
	if err != nil {
		fail(http.StatusBadRequest, egress.RuleRequest, err)
		return
	}
	out.Header = r.Header.Clone()
	dropHop(out.Header)
	// The transport asks for gzip and decodes it: every response body is
	// then one the proxy can check for the value.
	out.Header.Del("Accept-Encoding")
	// A range of an echo would cut the value in pieces the scrubber
	// cannot recognise: the whole body is asked for.
	out.Header.Del("Range")
	out.Header.Del("If-Range")
	out.ContentLength = r.ContentLength
	in.c.Apply(out.Header)
	resp, err := in.roundTrip(out)
	if err != nil {
		var tf *tlsFailed
		var re *refusal.Error
		switch {
		case errors.As(err, &tf):
			fail(http.StatusBadGateway, egress.RuleCredentialTLS, tf)
		case errors.As(err, &re):
			fail(http.StatusForbidden, re.Rule, re)
		default:
			fail(http.StatusBadGateway, "", fmt.Errorf("upstream %s: %s", in.t, clean(err.Error())))
		}
		return
	}
	defer resp.Body.Close()
	if ce := encoded(resp.Header); ce != "" {
		fail(http.StatusBadGateway, egress.RuleCredentialBody, fmt.Errorf("%s answered with a %s-encoded body, which the proxy cannot check for the credential, so it is not passed on", in.t, clean(ce)))
		return
	}
	dropHop(resp.Header)
	resp.Header.Del("Content-Length") // the placeholder is not the value's length
	for k, vs := range resp.Header {
		if in.scrub(strings.ToLower(k)) != strings.ToLower(k) {
			continue // a header named after the value (its case changed on the way)
		}
		for _, v := range vs {
			w.Header().Add(k, string(in.c.Scrub([]byte(v))))
		}
	}
	w.WriteHeader(resp.StatusCode)
	sw := credential.NewWriter(w, in.c)
	_, err = io.Copy(sw, resp.Body)
	if ferr := sw.Flush(); err == nil {
		err = ferr
	}
	why := ""
	if err != nil {
		why = clean(in.scrub(err.Error()))
	}
	in.audit(r.Method, resp.StatusCode, "", why, start)
}

// scrub is s without the credential's value, in any letter case.
func (in *interception) scrub(s string) string {
	for _, f := range in.c.Forms() {
		for {
			i := strings.Index(strings.ToLower(s), strings.ToLower(f))
			if i < 0 {
				break
			}
			s = s[:i] + credential.Placeholder(in.c.Name) + s[i+len(f):]
		}
	}
	return s
}

// encoded names a content coding of h other than identity ("": none),
// whichever of its values or list items says it.
func encoded(h http.Header) string {
	for _, v := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return c
			}
		}
	}
	return ""
}

// audit writes the line of one request the credential was added to, or
// refused to: never the value, the path or the query.
func (in *interception) audit(method string, status int, rule, why string, start time.Time) {
	d := map[string]any{"host": in.t.Host(), "port": in.t.Port, "cred": in.c.Name, "method": clean(method), "status": status,
		"duration_ms": time.Since(start).Milliseconds()}
	if rule != "" {
		d["rule"] = rule
		if in.g.CountRefusal() { // with the grant's other refusals
			return
		}
	}
	in.g.Record(egress.EventCredential, rule == "" && why == "", why, d)
}

// readerConn is a connection whose first bytes were already read into r.
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// oneConn is a listener of one connection, for serving it with
// net/http's server (HTTP/1.1 and HTTP/2 alike).
type oneConn struct {
	mu     sync.Mutex
	c      net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConn) end() { l.once.Do(func() { close(l.closed) }) }

func (l *oneConn) Close() error { l.end(); return nil }

func (l *oneConn) Addr() net.Addr { return &net.UnixAddr{Name: "intercepted", Net: "unix"} }
