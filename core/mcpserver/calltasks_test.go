package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// Over stateless HTTP each request is its own go-sdk session, which ends
// with the answer; a build made a task runs on after it, and must still be
// its tenant's (its rate limit, its image's owner, its audit lines), and
// the identity must then be forgotten.
func TestCallTaskKeepsItsCallerOverHTTP(t *testing.T) {
	pm, _ := fixture()
	r := newServer(t, pm, func(c *config.Config) { c.EnvironmentBuilder.Enabled = false })
	r.srv.SetIdentity(func(mcp.Request) (string, error) { return "tenant-a", nil })
	seen := make(chan string, 4)
	mcp.AddTool(r.srv.MCP(), &mcp.Tool{Name: "build_environment"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]any, error) {
		time.Sleep(100 * time.Millisecond) // the request's answer has gone meanwhile
		seen <- r.srv.client(req.Session) + " " + r.srv.conn(req.Session)
		return nil, map[string]any{}, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return r.srv.MCP() }, &mcp.StreamableHTTPOptions{Stateless: true})
	h := r.srv.Tasks().Handler(inner, func(*http.Request) (string, error) { return "tenant-a", nil }, 1<<20)
	for _, task := range []string{``, `,"task":{}`, `,"task":{}`} {
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"build_environment","arguments":{}`+task+`}}`))
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		h.ServeHTTP(httptest.NewRecorder(), req)
		select {
		case who := <-seen:
			if who != "tenant-a tenant-a" {
				t.Fatalf("the call%s ran as %q, want tenant-a", task, who)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the tool never ran")
		}
	}
	testWaitFor(t, "the ended sessions' identities to be forgotten", func() bool {
		n := 0
		r.srv.conns.Range(func(any, any) bool { n++; return true })
		return n == 0
	})
}

// A call made a task passes the argument check apart from its request:
// bad arguments are still audited with their rule, and the task failed.
func TestCallTaskArgumentsAudited(t *testing.T) {
	r := newRig(t)
	r.srv.SetEnvironments(nil, "not in this test")
	ct, st := mcp.NewInMemoryTransports()
	ss, err := r.srv.MCP().Connect(context.Background(), r.srv.Tasks().Transport(st, "local"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	conn, err := ct.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	call := func(id float64, method, params string) json.RawMessage {
		t.Helper()
		jid, _ := jsonrpc.MakeID(id)
		if err := conn.Write(context.Background(), &jsonrpc.Request{ID: jid, Method: method, Params: json.RawMessage(params)}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			m, err := conn.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if resp, ok := m.(*jsonrpc.Response); ok && resp.ID == jid {
				if resp.Error != nil {
					t.Fatalf("%s: %v", method, resp.Error)
				}
				return resp.Result
			}
		}
	}
	call(1, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}`)
	conn.Write(context.Background(), &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)})
	audited := func() int {
		n := 0
		for _, e := range r.audit() {
			if e.Details["tool"] == "build_environment" {
				n++
			}
		}
		return n
	}
	before := audited()
	var created struct{ Task struct{ TaskID string } }
	json.Unmarshal(call(2, "tools/call", `{"name":"build_environment","arguments":{"name":5},"task":{}}`), &created)
	res := call(3, "tasks/result", `{"taskId":"`+created.Task.TaskID+`"}`)
	if !strings.Contains(string(res), `"isError":true`) {
		t.Fatalf("the task's result: %s", res)
	}
	if audited() != before+1 {
		t.Fatalf("the bad arguments were audited %d times, want once", audited()-before)
	}
}

func testWaitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}
