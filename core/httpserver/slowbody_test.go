package httpserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
)

type recorder struct {
	mu      sync.Mutex
	entries []audit.Entry
}

func (r *recorder) Record(e audit.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, e)
}

func (r *recorder) rules() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.entries {
		out = append(out, fmt.Sprint(e.Event, " ", e.Details["rule"]))
	}
	return out
}

// A client that sends its headers and then stalls, trickles its body or
// never finishes it is cut when the body deadline passes, whether the
// handler reads the body or refuses the request unread; a client that
// sent its whole body keeps its request (and its context) as long as the
// handler runs, well past the deadline.
func TestBodyDeadline(t *testing.T) {
	const d = 300 * time.Millisecond
	reads := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select { // a long call after the body: must not be cancelled by the deadline
		case <-r.Context().Done():
			http.Error(w, "request context cancelled: "+fmt.Sprint(r.Context().Err()), http.StatusInternalServerError)
		case <-time.After(4 * d):
			fmt.Fprint(w, "ok")
		}
	})
	refuses := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no token", http.StatusUnauthorized)
	})
	const full = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	cases := []struct {
		name     string
		handler  http.Handler
		head     string // headers after the request line
		body     string // sent at once after the headers
		trickle  bool   // then a byte every d/4, never the end
		code     int
		contains string
		audited  bool
		atLeast  time.Duration // the response may not come earlier
	}{
		{"stalled body", reads, "Content-Length: 1000\r\n", `{"jsonrpc":`, false, 400, RuleBodyTimeout, true, d},
		{"trickled body", reads, "Content-Length: 100000\r\n", ` `, true, 400, RuleBodyTimeout, true, d},
		{"stalled chunked body", reads, "Transfer-Encoding: chunked\r\n", "400\r\n{\"jsonrpc\":", false, 400, RuleBodyTimeout, true, d},
		{"refused, body unread and stalled", refuses, "Transfer-Encoding: chunked\r\n", "400\r\n{\"jsonrpc\":", false, 401, "no token", false, 0},
		{"whole body, then a long call", reads, fmt.Sprintf("Content-Length: %d\r\n", len(full)), full, false, 200, "ok", false, 4 * d},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := &recorder{}
			srv := httptest.NewServer(limitBodyTime(c.handler, d, rec, hclog.NewNullLogger()))
			defer srv.Close()
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			if _, err := io.WriteString(conn, "POST /mcp HTTP/1.1\r\nHost: "+srv.Listener.Addr().String()+"\r\n"+c.head+"\r\n"+c.body); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			if c.trickle {
				go func() {
					tick := time.NewTicker(d / 4)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
							if _, err := conn.Write([]byte(" ")); err != nil {
								return
							}
						}
					}
				}()
			}
			// The bound: far above the deadline, far below "forever".
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no response within the bound: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			took := time.Since(start)
			if resp.StatusCode != c.code || !strings.Contains(string(b), c.contains) {
				t.Errorf("got %d %q, want %d containing %q", resp.StatusCode, b, c.code, c.contains)
			}
			if took < c.atLeast {
				t.Errorf("answered after %s, before %s", took, c.atLeast)
			}
			if c.code != 200 {
				// The connection is closed (a reset if the client was still
				// writing): what is left of the body is never read.
				if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("connection still open after the response (read: %v)", err)
				}
			}
			got := rec.rules()
			if want := BodyTimeout + " " + RuleBodyTimeout; c.audited != (len(got) == 1 && got[0] == want) {
				t.Errorf("audit %q, audited=%v", got, c.audited)
			}
		})
	}
}
