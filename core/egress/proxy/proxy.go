// Package proxy is the egress proxy (docs/network.md): it serves HTTP
// proxy traffic for a run's grant (core/egress): plain HTTP requests in
// absolute form and CONNECT tunnels, only to granted names and ports, and
// ends the run's TLS to a host with a credential to add it (intercept.go).
// It resolves names itself and dials the address it checked (never the
// name, so a second answer cannot rebind it), refuses loopback, private,
// link-local, metadata, multicast, CGNAT and the core's own addresses
// unless the operator granted that range, and has the grant enforce its
// budgets and audit every connection.
//
// The proxy reads bytes from any net.Conn it is handed: a run's
// egress.Channel hands it those of the run's socket.
package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/config/hostpattern"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// Resolver looks names up for the proxy; *net.Resolver is one, and tests
// map names to local servers.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// HostsResolver answers names of hosts (network.hosts) itself and asks
// next for the others.
type HostsResolver struct {
	Hosts map[string]netip.Addr
	Next  Resolver
}

// LookupNetIP implements Resolver.
func (r HostsResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := r.Hosts[strings.ToLower(strings.TrimSuffix(host, "."))]; ok {
		if (network == "ip4" && !a.Is4()) || (network == "ip6" && !a.Is6()) {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []netip.Addr{a}, nil
	}
	return r.Next.LookupNetIP(ctx, network, host)
}

// Dialer opens a TCP connection to an address ("ip:port"); the proxy only
// ever hands it an address it checked.
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// Defaults of Options.
const (
	DefaultHeaderTimeout  = 10 * time.Second
	DefaultDialTimeout    = 10 * time.Second
	DefaultMaxHeaderBytes = 32 << 10
	// MaxResponseHeaderBytes bounds an upstream response's status line and
	// headers (net/http's client default).
	MaxResponseHeaderBytes = 1 << 20
)

// Options configure a Proxy; the zero value of each field is its default.
type Options struct {
	Resolver Resolver // nil: net.DefaultResolver (the core's resolver)
	Dial     Dialer   // nil: a net.Dialer
	// OwnAddrs lists the core's own addresses (nil: this machine's
	// interfaces), refused like loopback.
	OwnAddrs func() ([]netip.Addr, error)
	Log      hclog.Logger
	// HeaderTimeout bounds the wait for a request's headers (a client that
	// trickles them holds a goroutine and a connection: slowloris), and
	// the idle time between two requests of one connection.
	HeaderTimeout  time.Duration
	DialTimeout    time.Duration // each address tried
	MaxHeaderBytes int           // request line and headers
}

// Proxy serves HTTP proxy traffic for grants: plain HTTP requests in
// absolute form, forwarded one upstream connection each without following
// redirects, and CONNECT tunnels whose bytes pass untouched (no TLS
// interception).
type Proxy struct {
	resolver  Resolver
	dial      Dialer
	own       *ownAddrs
	log       hclog.Logger
	headerTO  time.Duration
	dialTO    time.Duration
	maxHeader int
	all       atomic.Int32 // client connections served, all grants
}

// New is a Proxy with o's settings.
func New(o Options) *Proxy {
	p := &Proxy{resolver: o.Resolver, dial: o.Dial, log: o.Log, headerTO: o.HeaderTimeout, dialTO: o.DialTimeout, maxHeader: o.MaxHeaderBytes,
		own: &ownAddrs{lookup: o.OwnAddrs}}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.dial == nil {
		p.dial = (&net.Dialer{}).DialContext
	}
	if p.own.lookup == nil {
		p.own.lookup = interfaceAddrs
	}
	if p.log == nil {
		p.log = hclog.NewNullLogger()
	}
	if p.headerTO <= 0 {
		p.headerTO = DefaultHeaderTimeout
	}
	if p.dialTO <= 0 {
		p.dialTO = DefaultDialTimeout
	}
	if p.maxHeader <= 0 {
		p.maxHeader = DefaultMaxHeaderBytes
	}
	return p
}

// Serve serves every connection ln accepts for g until ln fails (closed)
// or ctx ends, then waits for those connections to end.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener, g *egress.Grant) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	var open atomic.Int32 // this grant's connections being served
	backoff := time.Duration(0)
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of descriptors, for one: wait and go on, as net/http
			// does, rather than leave the run's socket unserved.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("egress: accept failed; retrying", "error", err, "in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		backoff = 0
		if open.Load() >= egress.MaxOpen || p.all.Load() >= egress.MaxOpenAll {
			c.Close()
			g.Overflowed()
			continue
		}
		open.Add(1)
		p.all.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer open.Add(-1)
			defer p.all.Add(-1)
			p.ServeConn(ctx, c, g)
		}()
	}
}

// ServeConn serves one client connection (one the in-sandbox forwarder
// accepted, carried here) for g: requests one after another, or one
// CONNECT tunnel. It returns when the connection ends, ctx ends or g is
// spent, and closes conn.
func (p *Proxy) ServeConn(ctx context.Context, conn net.Conn, g *egress.Grant) {
	defer conn.Close()
	client, err := g.Track(conn)
	if err != nil {
		l := &connLog{start: time.Now(), method: "-", host: "-"}
		p.refuse(client0(conn), g, l, err)
		return
	}
	defer g.Untrack(client)
	// The proxy stopping (ctx) ends the connection as the run's end would.
	stop := context.AfterFunc(ctx, func() { client.Cut(egress.RuleClosed) })
	defer stop()
	lim := &headerLimit{r: client}
	br := bufio.NewReaderSize(lim, 4096)
	for {
		buffered := br.Buffered()
		lim.arm(p.maxHeader + 4096)
		_ = client.SetReadDeadline(time.Now().Add(p.headerTO))
		req, err := http.ReadRequest(br)
		_ = client.SetReadDeadline(time.Time{})
		read := lim.disarm()
		if err != nil {
			if buffered == 0 && read == 0 {
				return // an idle connection closed, timed out or cut: nothing was asked
			}
			p.malformed(client, g, lim.over, err)
			return
		}
		if req.Method == http.MethodConnect {
			p.tunnel(ctx, client, br, req, g)
			return
		}
		if !p.forward(ctx, client, req, g) {
			return
		}
	}
}

// client0 is conn as a tracked one, for answering a refusal before it
// was tracked.
func client0(c net.Conn) *egress.Conn { return &egress.Conn{Conn: c} }

// malformed answers a request that could not be read, and audits it.
func (p *Proxy) malformed(client *egress.Conn, g *egress.Grant, over bool, err error) {
	l := &connLog{start: time.Now(), method: "-", host: "-"}
	var ne net.Error
	switch {
	case client.CutBy() != "":
		return // cut while it waited for a request: nothing was connected, nothing to audit
	case over:
		p.refuseStatus(client, g, l, http.StatusRequestHeaderFieldsTooLarge,
			refusal.New(egress.RuleHeaders, "the request's line and headers are over %d bytes", p.maxHeader))
	case errors.As(err, &ne) && ne.Timeout():
		p.refuseStatus(client, g, l, http.StatusRequestTimeout,
			refusal.New(egress.RuleHeaderTimeout, "the request's headers did not arrive within %s", p.headerTO))
	default:
		p.refuseStatus(client, g, l, http.StatusBadRequest,
			refusal.New(egress.RuleRequest, "the request could not be read as HTTP: %s", clean(err.Error())))
	}
}

// target parses a request's host[:port]; defPort applies without a port
// (0: a port is required).
func target(hostport string, defPort int) (hostpattern.Pattern, error) {
	if hostport == "" {
		return hostpattern.Pattern{}, refusal.New(egress.RuleRequest, "the request names no host: send an absolute URL (http://host/path) or CONNECT host:port")
	}
	t, err := hostpattern.Parse(hostport)
	if err != nil {
		return hostpattern.Pattern{}, refusal.New(egress.RuleRequest, "the request's host: %s", clean(err.Error()))
	}
	if t.Wildcard() {
		return hostpattern.Pattern{}, refusal.New(egress.RuleRequest, "the request's host %s is a wildcard, not a host", clean(t.Name))
	}
	if t.Port == 0 {
		if defPort == 0 {
			return hostpattern.Pattern{}, refusal.New(egress.RuleRequest, "CONNECT %s names no port: CONNECT host:port", clean(hostport))
		}
		t.Port = defPort
	}
	return t, nil
}

// connect checks a target against the grant, resolves it, checks the
// addresses and dials one of them. On a refusal or a failure it answers
// the client and audits, and returns nil.
func (p *Proxy) connect(ctx context.Context, client *egress.Conn, g *egress.Grant, t hostpattern.Pattern, l *connLog) *egress.Upstream {
	up, status, err := p.dialTarget(ctx, g, t, l, true)
	var df *dialFailed
	switch {
	case errors.As(err, &df):
		l.outcome, l.err = egress.OutcomeDialFailed, df.Error()
		p.answer(client, http.StatusBadGateway, "", l.err)
		record(g, l)
		return nil
	case err != nil:
		p.refuseStatus(client, g, l, status, err)
		return nil
	}
	l.up = up
	return up
}

// dialFailed is a target every checked address of which refused the
// connection.
type dialFailed struct{ msg string }

func (d *dialFailed) Error() string { return d.msg }

// dialTarget is connect without the answer: the connection, or the status
// and error to answer with (a *refusal.Error, or a *dialFailed). l gets
// the target and the address. open: the connection counts against the
// grant's max_connections (false: it was paid for already).
func (p *Proxy) dialTarget(ctx context.Context, g *egress.Grant, t hostpattern.Pattern, l *connLog, open bool) (*egress.Upstream, int, error) {
	l.host, l.port = t.Host(), t.Port
	if err := g.Check(t); err != nil {
		return nil, http.StatusForbidden, err
	}
	if open {
		if err := g.Open(); err != nil {
			return nil, http.StatusForbidden, err
		}
	}
	if err := g.CheckAudit(); err != nil {
		// Fail closed: a connection nobody could trace is not made.
		return nil, http.StatusServiceUnavailable, refusal.New(egress.RuleAudit, "the audit log cannot be written, so no connection is made: tell the operator")
	}
	addrs := []netip.Addr{t.Addr}
	if !t.Addr.IsValid() {
		rctx, cancel := context.WithTimeout(ctx, p.dialTO)
		var err error
		addrs, err = p.resolver.LookupNetIP(rctx, "ip", t.Name)
		cancel()
		if err != nil || len(addrs) == 0 {
			why := "no address"
			if err != nil {
				why = clean(err.Error())
			}
			return nil, http.StatusBadGateway, refusal.New(egress.RuleResolve, "%s does not resolve (%s)", t.Name, why)
		}
	}
	var ok []netip.Addr
	var refused []string
	for _, a := range addrs {
		a = a.Unmap()
		if why := p.refusedAddr(a, g); why != "" {
			refused = append(refused, a.String()+" is "+why)
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		l.address = addrs[0].Unmap().String()
		return nil, http.StatusForbidden, refusal.New(egress.RuleAddress, "%s is refused: %s; only the operator can allow such a range (network.allowed_cidrs)", t.Host(), strings.Join(refused, ", "))
	}
	var lastErr error
	for _, a := range ok {
		// The address checked, never the name: a second lookup could answer
		// another address (DNS rebinding).
		addr := netip.AddrPortFrom(a, uint16(t.Port)).String()
		dctx, cancel := context.WithTimeout(ctx, p.dialTO)
		c, err := p.dial(dctx, "tcp", addr)
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		l.address = addr
		up, err := g.TrackUpstream(c)
		if err != nil {
			c.Close()
			return nil, http.StatusForbidden, err
		}
		return up, 0, nil
	}
	l.address = netip.AddrPortFrom(ok[0], uint16(t.Port)).String()
	return nil, http.StatusBadGateway, &dialFailed{fmt.Sprintf("connect to %s: %s", t, clean(lastErr.Error()))}
}

// refusedAddr says why a may not be dialled ("": it may).
func (p *Proxy) refusedAddr(a netip.Addr, g *egress.Grant) string {
	if g.RangeGranted(a) {
		return ""
	}
	if why := refusedClass(a); why != "" {
		return why
	}
	own, err := p.own.has(a)
	if err != nil {
		p.log.Warn("egress: cannot list this machine's addresses; refusing every address until it can", "error", err)
		return "possibly the core's own (its addresses cannot be listed)"
	}
	if own {
		return "the core's own"
	}
	return ""
}

// tunnel serves CONNECT: after 200 the bytes pass both ways untouched
// until either side ends, the grant is spent or ctx ends.
func (p *Proxy) tunnel(ctx context.Context, client *egress.Conn, br *bufio.Reader, req *http.Request, g *egress.Grant) {
	l := &connLog{start: time.Now(), method: http.MethodConnect, host: "-"}
	t, err := target(req.Host, 0)
	if err != nil {
		p.refuse(client, g, l, err)
		return
	}
	if c := g.CredentialFor(t); c != nil {
		p.intercept(ctx, client, br, g, t, c, l)
		return
	}
	up := p.connect(ctx, client, g, t, l)
	if up == nil {
		return
	}
	defer g.Untrack(up.Conn)
	defer up.Close()
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		p.finish(g, l, client, err)
		return
	}
	errs := make(chan error, 2)
	go func() {
		_, err := io.Copy(up, br) // what the client sent after CONNECT is already in br
		if err == nil {
			_ = up.CloseWrite()
		}
		errs <- err
	}()
	go func() {
		_, err := io.Copy(client, up)
		if err == nil {
			if cw, ok := client.Conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
		}
		errs <- err
	}()
	first := <-errs
	if first != nil {
		up.Close()
		client.Close()
	}
	second := <-errs
	p.finish(g, l, client, errors.Join(first, second))
}

// finish writes a dialled connection's audit line.
func (p *Proxy) finish(g *egress.Grant, l *connLog, client *egress.Conn, err error) {
	switch rule := firstNonEmpty(l.up.CutBy(), client.CutBy()); {
	case rule != "":
		l.outcome, l.rule, l.err = egress.OutcomeCut, rule, g.Ended(rule).Error()
	case err != nil && !isClosed(err):
		l.outcome, l.err = egress.OutcomeError, clean(err.Error())
	default:
		l.outcome = egress.OutcomeDone
	}
	record(g, l)
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// isClosed reports an error of a connection that ended the ordinary way:
// one side closed (a reset is how many peers close a finished TLS stream).
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// hopHeaders are one connection's, never forwarded (RFC 9110 7.6.1), with
// the proxy's own credentials.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect"}

func dropHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// forward serves one plain HTTP request over its own upstream connection
// and reports whether the client connection may carry another. Redirects
// go back to the client as they are: one it follows is its own request,
// checked as any other.
func (p *Proxy) forward(ctx context.Context, client *egress.Conn, req *http.Request, g *egress.Grant) bool {
	l := &connLog{start: time.Now(), method: req.Method, host: "-"}
	defer req.Body.Close()
	switch {
	case req.URL.Scheme == "https":
		p.refuse(client, g, l, refusal.New(egress.RuleRequest, "https:// goes through CONNECT (set HTTPS_PROXY), not as a plain request"))
		return false
	case req.URL.Scheme != "http" || req.URL.Host == "":
		p.refuse(client, g, l, refusal.New(egress.RuleRequest, "a proxy request needs an absolute http:// URL (send it through HTTP_PROXY), got a request for %s", refusal.Quoted(clean(req.URL.Path))))
		return false
	case req.Header.Get("Upgrade") != "":
		// An upgraded connection would be a tunnel outside these checks'
		// accounting of requests; wss:// goes through CONNECT.
		p.refuse(client, g, l, refusal.New(egress.RuleRequest, "protocol upgrades are not proxied as plain HTTP: use wss:// (CONNECT)"))
		return false
	}
	t, err := target(req.URL.Host, 80)
	if err != nil {
		p.refuse(client, g, l, err)
		return false
	}
	up := p.connect(ctx, client, g, t, l)
	if up == nil {
		return false
	}
	defer g.Untrack(up.Conn)
	defer up.Close()
	if req.Header.Get("Expect") == "100-continue" {
		// The client waits for this before its body; upstream gets the
		// body at once.
		if _, err := io.WriteString(client, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			p.finish(g, l, client, err)
			return false
		}
	}
	u := *req.URL
	u.Scheme, u.Host, u.User = "", "", nil
	out := &http.Request{Method: req.Method, URL: &u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: req.Header.Clone(),
		Body: req.Body, ContentLength: req.ContentLength, Host: t.String(), Close: true}
	if t.Port == 80 {
		out.Host = t.Host()
		if t.Addr.Is6() {
			out.Host = "[" + out.Host + "]"
		}
	}
	if len(req.TransferEncoding) > 0 {
		out.TransferEncoding = []string{"chunked"}
	}
	dropHop(out.Header)
	if err := out.Write(up); err != nil {
		p.finish(g, l, client, err)
		p.answerIfFresh(client, l, err)
		return false
	}
	// The upstream's headers are bounded too: a hostile server could
	// otherwise fill the core's memory with one endless header.
	ulim := &headerLimit{r: up}
	ubr := bufio.NewReader(ulim)
	var resp *http.Response
	for {
		ulim.arm(MaxResponseHeaderBytes)
		resp, err = http.ReadResponse(ubr, out)
		ulim.disarm()
		if ulim.over {
			err = fmt.Errorf("the server's response headers are over %d bytes", MaxResponseHeaderBytes)
		}
		if err != nil || resp.StatusCode < 100 || resp.StatusCode >= 200 {
			break
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			err = errors.New("the server switched protocols, which was not asked for")
			break
		}
		// An interim response (103 Early Hints): the final one follows.
	}
	if err != nil {
		p.finish(g, l, client, err)
		p.answerIfFresh(client, l, err)
		return false
	}
	defer resp.Body.Close()
	dropHop(resp.Header)
	// Framing is ours to write: a body read to EOF (no length, not
	// chunked) ends this client connection too.
	toEOF := resp.ContentLength < 0 && len(resp.TransferEncoding) == 0
	resp.Close = toEOF || req.Close
	bw := bufio.NewWriter(client) // Response.Write writes a line at a time
	err = resp.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	p.finish(g, l, client, err)
	return err == nil && !resp.Close
}

// answerIfFresh answers 502 when the upstream failed before any response
// (and the grant did not cut it: then the connection is gone).
func (p *Proxy) answerIfFresh(client *egress.Conn, l *connLog, err error) {
	if l.rule == "" && client.CutBy() == "" {
		p.answer(client, http.StatusBadGateway, "", "upstream "+l.host+": "+clean(err.Error()))
	}
}

// refuse answers a refusal with 403 and audits it.
func (p *Proxy) refuse(client *egress.Conn, g *egress.Grant, l *connLog, err error) {
	p.refuseStatus(client, g, l, http.StatusForbidden, err)
}

func (p *Proxy) refuseStatus(client *egress.Conn, g *egress.Grant, l *connLog, status int, err error) {
	var re *refusal.Error
	l.outcome, l.err = egress.OutcomeRefused, clean(err.Error())
	if errors.As(err, &re) {
		l.rule = re.Rule
		if re.Rule == egress.RuleRequest && status == http.StatusForbidden {
			status = http.StatusBadRequest // the client's mistake, not the policy's
		}
	}
	if client != nil {
		p.answer(client, status, l.rule, l.err)
	}
	record(g, l)
}

// answer writes a final response and closes the connection: the reason
// phrase carries the message too, since most clients show only the status
// line of a refused CONNECT.
func (p *Proxy) answer(client *egress.Conn, status int, rule, msg string) {
	text := "mcp-forge egress: " + msg
	if rule != "" {
		text += " (rule " + rule + ")"
	}
	reason := http.StatusText(status)
	if len(text) <= 200 {
		reason += " - " + text
	}
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n", status, reason)
	if rule != "" {
		fmt.Fprintf(&b, "%s: %s\r\n", egress.RuleHeader, rule)
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s\n", len(text)+1, text)
	_ = client.SetWriteDeadline(time.Now().Add(p.headerTO))
	_, _ = io.WriteString(client, b.String())
	_ = client.Close()
}

// clean makes text safe for a status line and the audit log: printable
// ASCII only, at most 300 bytes.
func clean(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c >= 0x7f {
			b[i] = '?'
		}
	}
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// headerLimit caps what a request's line and headers may read.
type headerLimit struct {
	r     io.Reader
	left  int // < 0: no limit
	read  int
	armed bool
	over  bool
}

func (h *headerLimit) arm(n int) { h.left, h.read, h.armed, h.over = n, 0, true, false }

func (h *headerLimit) disarm() int { h.armed = false; return h.read }

var errHeaderLimit = errors.New("request headers too large")

func (h *headerLimit) Read(b []byte) (int, error) {
	if h.armed {
		if h.left <= 0 {
			h.over = true
			return 0, errHeaderLimit
		}
		if len(b) > h.left {
			b = b[:h.left]
		}
	}
	n, err := h.r.Read(b)
	if h.armed {
		h.left -= n
		h.read += n
	}
	return n, err
}
