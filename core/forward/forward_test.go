package forward

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/audit/audittest"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
)

type echoIn struct {
	Session string `json:"session_id"`
}

type echoOut struct {
	By   string `json:"by"`
	Auth string `json:"auth"`
}

// server is one replica: serves says whether it holds the sessions (else
// it refuses them as the engine does, naming "ns/other" as the replica
// that serves session "s"; see refuse); calls counts its tool calls;
// refundsDone counts refused calls that were forwarded after all (the
// tenant middleware's refund, which a middleware inside the forwarder's
// asks for as the tenants' does).
type server struct {
	srv                *httptest.Server
	calls, refundsDone atomic.Int32
}

// refuse is the tool result of a refusal of session: as the tools answer
// an engine's error (toolsets.Failure), it keeps the error beside it.
// Session "s" is held by ns/other (rule session-held); "claimed" is
// claimed at the same instant by a replica not named; "plain" is refused
// for another reason; "failed" is refused with a Go error (which go-sdk
// keeps beside the result itself).
func refuse(session string) (*mcp.CallToolResult, error) {
	held := &refusal.Error{Rule: "session-held", Msg: "session-held: retry", Err: &runtime.HeldError{By: "ns/other"}}
	var err error
	switch session {
	case "claimed":
		held.Err = &runtime.HeldError{}
		err = held
	case "plain":
		err = &refusal.Error{Rule: "session-id", Msg: "session-id: no such session"}
	case "failed":
		return nil, held
	default:
		err = held
	}
	res := toolcall.Error(err.Error())
	res.SetError(err)
	return res, nil
}

func replica(t *testing.T, name string, serves bool, fw *Forwarder, tools ...string) *server {
	t.Helper()
	r := &server{}
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	for _, tool := range append([]string{"execute_python"}, tools...) {
		mcp.AddTool(s, &mcp.Tool{Name: tool}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
			r.calls.Add(1)
			if !serves {
				res, err := refuse(in.Session)
				return res, echoOut{}, err
			}
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2, Message: "half"})
				time.Sleep(50 * time.Millisecond) // a run goes on after its progress
			}
			return nil, echoOut{By: name, Auth: req.Extra.Header.Get("Authorization")}, nil
		})
	}
	// As the tenants' middleware: inside the forwarder's.
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if tr, ok := res.(*mcp.CallToolResult); ok {
				toolcall.OnForwarded(tr, func() { r.refundsDone.Add(1) })
			}
			return res, err
		}
	})
	if fw != nil {
		s.AddReceivingMiddleware(fw.Middleware)
	}
	r.srv = httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(r.srv.Close)
	return r
}

func portOf(t *testing.T, url string) int {
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
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

type progressLog struct {
	mu  sync.Mutex
	got []string
}

func (p *progressLog) handler(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
	tok, _ := r.Params.ProgressToken.(string)
	p.mu.Lock()
	p.got = append(p.got, r.Params.Message+" "+tok)
	p.mu.Unlock()
}

func (p *progressLog) take() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := strings.Join(p.got, ",")
	p.got = nil
	return out
}

func connect(t *testing.T, url, key string, p *progressLog) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "client", Version: "1"}, &mcp.ClientOptions{ProgressNotificationHandler: p.handler})
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{key}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// lossy is a holder whose answers to tools/call never come back: the
// connection is cut once the call reached it.
func lossy(t *testing.T, real http.Handler) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		real.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The calls of a session another replica serves are answered by that
// replica, with each caller's own credential over one connection and its
// progress with its own token: asked first (nothing runs here), or after
// a refusal here (whose rate token is then given back). The replica
// reached never forwards again; an unreachable one leaves the refusal; a
// protocol error of the holder is passed on; an answer lost on the way
// says the code may have run. Every forward is audited.
func TestForward(t *testing.T) {
	rec := &audittest.Recorder{}
	routeTo := atomic.Value{}
	routeTo.Store("")
	var locateErr atomic.Value
	locateErr.Store(errors.New(""))
	locate := func(context.Context, string) (string, error) {
		if err := locateErr.Load().(error); err.Error() != "" {
			return "", err
		}
		return "127.0.0.1", nil
	}
	a := replica(t, "a", true, nil)
	// Also believes the session is elsewhere and forwards: reached by a
	// forwarded call it must answer, not forward again.
	aLooping := replica(t, "a-looping", false, New(func(context.Context, *mcp.CallToolRequest) string { return "ns/other" }, locate, 1, "", "ns/a", "test", rec, hclog.NewNullLogger()))
	fw := New(func(context.Context, *mcp.CallToolRequest) string { return routeTo.Load().(string) }, locate, 0, "", "ns/b", "test", rec, hclog.NewNullLogger())
	defer fw.Close()
	b := replica(t, "b", false, fw, "execute_r")
	var alice, bob progressLog
	onB := connect(t, b.srv.URL, "k1", &alice)
	bobOnB := connect(t, b.srv.URL, "k2", &bob)

	call := func(cs *mcp.ClientSession, tool, session string) (*mcp.CallToolResult, error) {
		p := &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"session_id": session}}
		p.SetProgressToken("mine")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return cs.CallTool(ctx, p)
	}
	text := func(res *mcp.CallToolResult) string {
		if res == nil || len(res.Content) == 0 {
			return ""
		}
		s, _ := res.Content[0].(*mcp.TextContent)
		return s.Text
	}
	lost := lossy(t, a.srv.Config.Handler)

	for _, tc := range []struct {
		name     string
		route    string
		to       string // the holder's URL
		locate   string // a locate error
		tool     string
		session  string // see refuse
		who      *mcp.ClientSession
		wantBy   string // the answer is this replica's; "": a refusal or error
		wantText string // in the refusal or error
		bCalls   int32  // calls that ran on b
		refunds  int32
		audited  bool // a session.forward line
		success  bool // audited as forwarded
	}{
		{"asked first", "ns/other", a.srv.URL, "", "execute_python", "s", onB, "a", "", 0, 0, true, true},
		{"refused, then forwarded", "", a.srv.URL, "", "execute_python", "s", onB, "a", "", 1, 1, true, true},
		{"refused with a Go error, then forwarded", "", a.srv.URL, "", "execute_python", "failed", onB, "a", "", 1, 1, true, true},
		{"another caller, the same connection", "ns/other", a.srv.URL, "", "execute_python", "s", bobOnB, "a", "", 0, 0, true, true},
		{"no loop", "", aLooping.srv.URL, "", "execute_python", "s", onB, "", "session-held", 1, 1, true, true},
		{"unreachable", "", a.srv.URL, "replica ns/other is not running", "execute_python", "s", onB, "", "session-held", 1, 0, true, false},
		{"claimed by a replica not named", "", a.srv.URL, "", "execute_python", "claimed", onB, "", "session-held", 1, 0, false, false},
		{"refused for another reason", "", a.srv.URL, "", "execute_python", "plain", onB, "", "no such session", 1, 0, false, false},
		{"the holder's protocol error", "ns/other", a.srv.URL, "", "execute_r", "s", onB, "", "unknown tool", 0, 0, true, false},
		{"the answer lost", "ns/other", lost.URL, "", "execute_python", "s", onB, "", "may have run", 0, 0, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			routeTo.Store(tc.route)
			locateErr.Store(errors.New(tc.locate))
			fw.port = portOf(t, tc.to)
			b.calls.Store(0)
			b.refundsDone.Store(0)
			res, err := call(tc.who, tc.tool, tc.session)
			var out map[string]any
			if res != nil {
				out, _ = res.StructuredContent.(map[string]any)
			}
			key := map[*mcp.ClientSession]string{onB: "Bearer k1", bobOnB: "Bearer k2"}[tc.who]
			switch {
			case tc.wantBy != "" && (err != nil || res.IsError || out["by"] != tc.wantBy || out["auth"] != key):
				t.Fatalf("answer %+v %v, want %s's with the caller's credential %s", res, err, tc.wantBy, key)
			case tc.wantBy == "" && err == nil && !strings.Contains(text(res), tc.wantText):
				t.Fatalf("answer %q, want one saying %q", text(res), tc.wantText)
			case tc.wantBy == "" && err != nil && !strings.Contains(err.Error(), tc.wantText):
				t.Fatalf("error %v, want one saying %q", err, tc.wantText)
			}
			if n := b.calls.Load(); n != tc.bCalls {
				t.Errorf("%d calls ran on b, want %d", n, tc.bCalls)
			}
			if n := b.refundsDone.Load(); n != tc.refunds {
				t.Errorf("%d refunds on b, want %d", n, tc.refunds)
			}
			progress := map[*mcp.ClientSession]*progressLog{onB: &alice, bobOnB: &bob}[tc.who].take()
			if tc.wantBy != "" && progress != "half mine" {
				t.Errorf("progress %q, want the holder's with the caller's own token", progress)
			}
			es := rec.Take()
			switch {
			case !tc.audited && len(es) != 0:
				t.Errorf("audit %+v, want none: nothing was forwarded", es)
			case tc.audited && (len(es) != 1 || es[0].Event != audit.SessionForward || es[0].Success != tc.success || es[0].Details["to"] != "ns/other" || es[0].Details["session"] != tc.session):
				t.Errorf("audit %+v, want one session.forward of session %s (success %v), none from the replica reached", es, tc.session, tc.success)
			}
		})
	}
}

// A holder's HTTP layer turning a call away (429: busy; 401: a credential
// it does not take) ran nothing: the call is answered here as if never
// forwarded (the refusal says retry), and one tenant's refused credential
// fails no other tenant's call in flight to the same replica.
func TestForwardRefusals(t *testing.T) {
	rec := &audittest.Recorder{}
	slow := mcp.NewServer(&mcp.Implementation{Name: "holder", Version: "1"}, nil)
	mcp.AddTool(slow, &mcp.Tool{Name: "execute_python"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
		time.Sleep(300 * time.Millisecond)
		return nil, echoOut{By: "holder", Auth: req.Extra.Header.Get("Authorization")}, nil
	})
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return slow }, &mcp.StreamableHTTPOptions{Stateless: true})
	var busy atomic.Bool
	holder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") == "Bearer bad":
			http.Error(w, "unknown API key", http.StatusUnauthorized)
		case busy.Load():
			http.Error(w, "too many requests in flight", http.StatusTooManyRequests)
		default:
			mcpHandler.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(holder.Close)
	fw := New(func(context.Context, *mcp.CallToolRequest) string { return "ns/other" },
		func(context.Context, string) (string, error) { return "127.0.0.1", nil }, portOf(t, holder.URL), "", "ns/b", "test", rec, hclog.NewNullLogger())
	defer fw.Close()
	b := mcp.NewServer(&mcp.Implementation{Name: "b", Version: "1"}, nil)
	mcp.AddTool(b, &mcp.Tool{Name: "execute_python"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
		res, err := refuse(in.Session)
		return res, echoOut{}, err
	})
	b.AddReceivingMiddleware(fw.Middleware)
	// Tenants are who their keys say (the TokenInfo the server's auth gives).
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		return &auth.TokenInfo{UserID: "tenant-" + token, Expiration: time.Now().Add(time.Hour)}, nil
	}
	bsrv := httptest.NewServer(auth.RequireBearerToken(verify, nil)(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return b }, &mcp.StreamableHTTPOptions{Stateless: true})))
	t.Cleanup(bsrv.Close)
	var pl progressLog
	alice, mallory := connect(t, bsrv.URL, "alice", &pl), connect(t, bsrv.URL, "bad", &pl)
	call := func(cs *mcp.ClientSession) (*mcp.CallToolResult, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"session_id": "s"}})
	}

	busy.Store(true)
	res, err := call(alice)
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "session-held") {
		t.Fatalf("a busy holder: %+v %v, want the refusal (nothing ran)", res, err)
	}
	busy.Store(false)

	done := make(chan error, 1)
	go func() {
		res, err := call(alice)
		if err == nil && (res.IsError || res.StructuredContent.(map[string]any)["by"] != "holder") {
			err = errors.New("alice's answer: " + res.Content[0].(*mcp.TextContent).Text)
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if res, err := call(mallory); err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "session-held") {
		t.Errorf("a credential the holder refuses: %+v %v, want the refusal", res, err)
	}
	if err := <-done; err != nil {
		t.Errorf("alice's call in flight while mallory's was refused: %v", err)
	}
	for _, e := range rec.Take() {
		if strings.Contains(e.Error, "may have run") {
			t.Errorf("audited as maybe run: %+v", e)
		}
	}
}
