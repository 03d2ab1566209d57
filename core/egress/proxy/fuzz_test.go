package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/config/hostpattern"
	"github.com/mcp-forge/mcp-forge/core/egress"
)

// FuzzTarget: any host a request names either parses to a normalized
// target that reads back as itself, or is refused; the grant's check
// never lets through a host or port it did not grant.
func FuzzTarget(f *testing.F) {
	for _, s := range []string{"files.test:80", "FILES.test.:80", "[::1]:443", "127.0.0.1", "*.test:443", "a..b", "x:0", "2130706433:80",
		"files.test:080", "files.test.evil.org:80", "evilfiles.test:80", "[fe80::1%25eth0]:80", "xn--bcher-kva.test"} {
		f.Add(s)
	}
	p, err := egress.NewPolicy(network(func(n *config.Network) {
		n.AllowedHosts = []string{"files.test:80", "*.wild.test:443", "203.0.113.7:8080"}
	}), nil, &recorder{})
	if err != nil {
		f.Fatal(err)
	}
	g, err := p.Grant(context.Background(), egress.Request{Hosts: []string{"files.test", "*.wild.test", "203.0.113.7"}})
	if err != nil {
		f.Fatal(err)
	}
	defer g.Close()
	f.Fuzz(func(t *testing.T, s string) {
		tgt, err := target(s, 80)
		if err != nil {
			return
		}
		if tgt.Port < 1 || tgt.Port > 65535 || tgt.Wildcard() || (tgt.Name == "") == !tgt.Addr.IsValid() {
			t.Fatalf("%q parsed to %+v", s, tgt)
		}
		if tgt.Name != strings.ToLower(tgt.Name) || strings.HasSuffix(tgt.Name, ".") {
			t.Fatalf("%q: name %q not normalized", s, tgt.Name)
		}
		back, err := hostpattern.Parse(tgt.String())
		if err != nil || back != tgt {
			t.Fatalf("%q: %q reads back as %+v, %v", s, tgt, back, err)
		}
		if g.Check(tgt) == nil {
			ok := tgt.Name == "files.test" && tgt.Port == 80 ||
				strings.HasSuffix(tgt.Name, ".wild.test") && tgt.Port == 443 ||
				tgt.Addr.String() == "203.0.113.7" && tgt.Port == 8080
			if !ok {
				t.Fatalf("%q (%s) passes a grant of files.test:80, *.wild.test:443, 203.0.113.7:8080", s, tgt)
			}
		}
	})
}

// FuzzServeConn: whatever bytes a sandbox sends, the proxy answers or
// closes within its timeouts and dials only the checked address of a
// granted host.
func FuzzServeConn(f *testing.F) {
	for _, s := range []string{
		"GET http://files.test/ HTTP/1.1\r\nHost: files.test\r\n\r\n",
		"CONNECT files.test:80 HTTP/1.1\r\n\r\nhello",
		"CONNECT files.test:443 HTTP/1.1\r\n\r\n",
		"GET http://other.test/ HTTP/1.1\r\nHost: files.test\r\n\r\n",
		"GET http://files.test/ HTTP/1.1\r\nHost: other.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"POST http://files.test/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
		"GET http://127.0.0.1/ HTTP/1.1\r\n\r\nGET http://files.test/ HTTP/1.1\r\n\r\n",
		"GET http://files.test@127.0.0.1/ HTTP/1.0\r\n\r\n",
		"\x00\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var mu sync.Mutex
		var dialled []string
		px := New(Options{
			Resolver: mapResolver{"files.test": {"203.0.113.10"}, "other.test": {"127.0.0.1"}},
			Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
				mu.Lock()
				dialled = append(dialled, addr)
				mu.Unlock()
				return nil, errors.New("no network in a fuzz test")
			},
			OwnAddrs:       func() ([]netip.Addr, error) { return nil, nil },
			HeaderTimeout:  50 * time.Millisecond,
			MaxHeaderBytes: 4 << 10,
		})
		p, err := egress.NewPolicy(network(func(n *config.Network) { n.AllowedHosts = []string{"files.test:80", "other.test:80"} }), nil, &recorder{})
		if err != nil {
			t.Fatal(err)
		}
		g, err := p.Grant(context.Background(), egress.Request{Hosts: []string{"files.test"}})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		server, client := net.Pipe()
		done := make(chan struct{})
		go func() { defer close(done); px.ServeConn(context.Background(), server, g) }()
		go func() { _, _ = io.WriteString(client, in) }()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("ServeConn still busy with %q after 5 s", in)
		}
		client.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, a := range dialled {
			if a != "203.0.113.10:80" {
				t.Fatalf("%q made the proxy dial %q", in, a)
			}
		}
	})
}
