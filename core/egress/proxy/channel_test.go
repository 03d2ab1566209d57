package proxy

import (
	"bufio"
	"context"
	"errors"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A channel serves its grant on its socket, only to the plugin it was
// opened for, and its Close cuts what is open and removes its directory.
func TestChannel(t *testing.T) {
	w := newWorld(t)
	p := w.policy(nil)
	g, err := p.Grant(context.Background(), egress.Request{Hosts: []string{"files.test"}, RunID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	px := New(Options{Resolver: w.resolver, Dial: w.dials.dial})
	root := filepath.Join(t.TempDir(), "net")
	cs, err := egress.NewChannels(px, root)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := cs.Open(g, "python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Lookup("r", ch.Token()); err == nil {
		t.Fatal("another plugin looked the channel up")
	}
	if _, err := cs.Lookup("python", "0123"); err == nil {
		t.Fatal("an unknown token was looked up")
	}
	if got, err := cs.Lookup("python", ch.Token()); err != nil || got != ch {
		t.Fatalf("lookup: %v %v", got, err)
	}

	// A granted GET through the socket, and an open connection cut by Close.
	c, err := net.Dial("unix", filepath.Join(ch.Dir(), egress.SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	url := "http://files.test:" + strconv.Itoa(w.hport) + "/data"
	io.WriteString(c, "GET "+url+" HTTP/1.1\r\nHost: files.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET through the channel: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	ch.Close()
	ch.Close() // idempotent
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection outlived the channel")
	}
	if _, err := os.Stat(ch.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the channel's directory is left: %v", err)
	}
	if _, err := cs.Lookup("python", ch.Token()); err == nil {
		t.Fatal("a closed channel was looked up")
	}
	if n, _, _ := g.Used(); n != 1 {
		t.Fatalf("%d connections counted, want 1", n)
	}
}

func TestHostsResolver(t *testing.T) {
	r := HostsResolver{Hosts: map[string]netip.Addr{"a.test": netip.MustParseAddr("10.0.0.1")}, Next: mapResolver{"b.test": {"10.0.0.2"}}}
	for _, c := range []struct{ network, host, want string }{
		{"ip", "a.test", "10.0.0.1"}, {"ip", "A.Test.", "10.0.0.1"}, {"ip4", "a.test", "10.0.0.1"}, {"ip6", "a.test", ""},
		{"ip", "b.test", "10.0.0.2"}, {"ip", "c.test", ""},
	} {
		got, err := r.LookupNetIP(context.Background(), c.network, c.host)
		if (c.want == "") != (err != nil) || (err == nil && got[0].String() != c.want) {
			t.Errorf("%s %s: %v %v, want %q", c.network, c.host, got, err, c.want)
		}
	}
}

// A sandbox cannot make the core hold more than egress.MaxOpen of its connections
// at once, nor write more than egress.MaxRefusalLines refusals one line each:
// what is past them is counted in one line when the grant ends.
func TestFloodBounds(t *testing.T) {
	w := newWorld(t)
	g, u := w.grant(w.policy(nil), "files.test")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 0; i < egress.MaxOpen; i++ {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "G") // a request that never ends
		held = append(held, c)
	}
	time.Sleep(200 * time.Millisecond) // the proxy has them all
	for i := 0; i < 5; i++ {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("connection %d over the bound: %v, want closed at once", egress.MaxOpen+i+1, err)
		}
		c.Close()
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	time.Sleep(200 * time.Millisecond)
	url := "http://nope.test/"
	for i := 0; i < egress.MaxRefusalLines+50; i++ {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET "+url+" HTTP/1.1\r\nHost: nope.test\r\n\r\n")
		io.Copy(io.Discard, c)
		c.Close()
	}
	g.Close()
	over, refused := 0, 0
	for _, e := range w.rec.all(egress.EventConnection) {
		switch {
		case e.Details["rule"] == egress.RuleOpenConnections:
			over++
		case e.Details["outcome"] == egress.OutcomeRefused: // the held ones' unfinished requests too
			refused++
		}
	}
	if over != 1 || refused != egress.MaxRefusalLines {
		t.Fatalf("%d lines over the open bound (want 1), %d refusal lines (want %d)", over, refused, egress.MaxRefusalLines)
	}
	sum := w.rec.all(egress.EventSuppressed)
	if len(sum) != 1 {
		t.Fatalf("%d summaries, want 1", len(sum))
	}
	if n, _ := sum[0].Details["refused"].(int); n < 50 || sum[0].Details["closed_over_open_limit"] != 5 {
		t.Fatalf("summary: %+v", sum)
	}
}
