package forward

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/held"
)

type recorder struct {
	mu      sync.Mutex
	entries []audit.Entry
}

func (r *recorder) Record(e audit.Entry) {
	r.mu.Lock()
	r.entries = append(r.entries, e)
	r.mu.Unlock()
}

type echoIn struct {
	Session string `json:"session_id"`
}

type echoOut struct {
	By   string `json:"by"`
	Auth string `json:"auth"`
}

// replica is one server of two: serves says whether it holds the session
// (else it notes that "ns/other" does and refuses, as the engine does).
func replica(t *testing.T, name string, serves bool, fw func() *Forwarder) *httptest.Server {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "execute_python"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
		if !serves {
			held.Note(ctx, "ns/other")
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "session-held: retry"}}}, echoOut{}, nil
		}
		if tok := req.Params.GetProgressToken(); tok != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2, Message: "half"})
		}
		return nil, echoOut{By: name, Auth: req.Extra.Header.Get("Authorization")}, nil
	})
	if f := fw(); f != nil {
		s.AddReceivingMiddleware(f.Middleware)
	}
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(srv.Close)
	return srv
}

func port(t *testing.T, srv *httptest.Server) int {
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// A call refused for a session another replica serves is answered by
// that replica, with the caller's credential and its progress; the
// replica reached never forwards again (no loop); one that cannot be
// reached leaves the refusal; each forward is audited.
func TestForward(t *testing.T) {
	rec := &recorder{}
	a := replica(t, "a", true, func() *Forwarder { return nil })
	// A replica that also believes the session is elsewhere: reached by a
	// forwarded call, it must answer, not forward again.
	aLooping := replica(t, "a-looping", false, func() *Forwarder {
		return New(func(context.Context, string) (string, error) { return "127.0.0.1", nil }, 1, "", "ns/a", "test", rec, hclog.NewNullLogger())
	})
	located := ""
	var locateErr error
	var fw *Forwarder
	b := replica(t, "b", false, func() *Forwarder {
		fw = New(func(_ context.Context, r string) (string, error) { located = r; return "127.0.0.1", locateErr }, 0, "", "ns/b", "test", rec, hclog.NewNullLogger())
		return fw
	})
	defer fw.Close()

	var progress []string
	var pmu sync.Mutex
	c := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "1"}, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		pmu.Lock()
		progress = append(progress, r.Params.Message+" "+strconv.Quote(toString(r.Params.ProgressToken)))
		pmu.Unlock()
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.URL, HTTPClient: &http.Client{Transport: bearer{"k1"}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func() *mcp.CallToolResult {
		p := &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"session_id": "s"}}
		p.SetProgressToken("mine")
		res, err := cs.CallTool(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	for _, tc := range []struct {
		name      string
		to        *httptest.Server
		locate    error
		want      string // "by" of the answer; "": the refusal
		forwarded bool
	}{
		{"forwarded", a, nil, "a", true},
		{"no loop", aLooping, nil, "", true},
		{"unreachable", a, errors.New("replica ns/other is not running"), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			locateErr = tc.locate
			fw.port = port(t, tc.to)
			pmu.Lock()
			progress = nil
			pmu.Unlock()
			rec.mu.Lock()
			rec.entries = nil
			rec.mu.Unlock()
			res := call()
			out, _ := res.StructuredContent.(map[string]any)
			switch {
			case tc.want != "" && (res.IsError || out["by"] != tc.want || out["auth"] != "Bearer k1"):
				t.Fatalf("answer %+v %v, want %s's with the caller's credential", out, res.IsError, tc.want)
			case tc.want == "" && (!res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "session-held")):
				t.Fatalf("answer %+v, want the refusal", res)
			}
			if located != "ns/other" {
				t.Errorf("located %q, want the replica the engine noted", located)
			}
			pmu.Lock()
			got := strings.Join(progress, ",")
			pmu.Unlock()
			if tc.want != "" && got != `half "mine"` {
				t.Errorf("progress %q, want the holder's with the caller's own token", got)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.entries) != 1 || rec.entries[0].Event != audit.SessionForward || rec.entries[0].Success != tc.forwarded || rec.entries[0].Details["to"] != "ns/other" {
				t.Errorf("audit %+v, want one session.forward (success %v), none from the replica reached", rec.entries, tc.forwarded)
			}
		})
	}
}

func toString(v any) string {
	s, _ := v.(string)
	return s
}
