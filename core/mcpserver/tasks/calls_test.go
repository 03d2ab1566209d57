package tasks

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
)

// rawClient speaks JSON-RPC to a go-sdk server served through the tasks
// transport, as a client with tasks does.
type rawClient struct {
	t    *testing.T
	conn mcp.Connection
	seen []jsonrpc.Message // notifications and answers read while waiting
}

func (c *rawClient) send(id any, method, params string) {
	c.t.Helper()
	msg := &jsonrpc.Request{Method: method, Params: json.RawMessage(params)}
	if id != nil {
		msg.ID = makeID(id)
	}
	if err := c.conn.Write(context.Background(), msg); err != nil {
		c.t.Fatal(err)
	}
}

// answer reads until the answer to id.
func (c *rawClient) answer(id any) *jsonrpc.Response {
	c.t.Helper()
	want := makeID(id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		m, err := c.conn.Read(ctx)
		if err != nil {
			c.t.Fatalf("waiting for the answer to %v: %v", id, err)
		}
		c.seen = append(c.seen, m)
		if r, ok := m.(*jsonrpc.Response); ok && key(r.ID) == key(want) {
			return r
		}
	}
}

// connect serves srv to alice through s's transport, and is the client
// that initialized the connection.
func connect(t *testing.T, s *Service, srv *mcp.Server) *rawClient {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), s.Transport(st, "alice"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	conn, err := ct.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := &rawClient{t: t, conn: conn}
	init := c.call(1, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}`)
	if caps, _ := init["capabilities"].(map[string]any); caps["tasks"] == nil {
		t.Fatalf("initialize: %v", init)
	}
	c.send(nil, "notifications/initialized", `{}`)
	return c
}

func makeID(n any) jsonrpc.ID {
	id, err := jsonrpc.MakeID(float64(n.(int)))
	if err != nil {
		panic(err)
	}
	return id
}

func (c *rawClient) call(id any, method, params string) map[string]any {
	c.t.Helper()
	c.send(id, method, params)
	r := c.answer(id)
	if r.Error != nil {
		c.t.Fatalf("%s %s: %v", method, params, r.Error)
	}
	var out map[string]any
	if err := json.Unmarshal(r.Result, &out); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// A build_environment call made a task runs apart from its request: it
// answers at once with the task; tasks/get, tasks/list, tasks/result and
// tasks/cancel act on it; the tool's own answer is the result; a cancel
// ends the tool's context; the status is told; another owner, or a call
// naming a task it was not given, reaches nothing.
func TestCallTasks(t *testing.T) {
	s, _ := newService()
	release := make(chan struct{})
	stopped := make(chan error, 4)
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	srv.AddReceivingMiddleware(s.Middleware)
	mcp.AddTool(srv, &mcp.Tool{Name: "build_environment"}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
		Name string `json:"name"`
	}) (*mcp.CallToolResult, map[string]any, error) {
		select {
		case <-release:
			return nil, map[string]any{"success": true, "image": "mcp-forge/custom:" + in.Name}, nil
		case <-ctx.Done():
			stopped <- ctx.Err()
			return nil, nil, ctx.Err()
		}
	})
	c := connect(t, s, srv)
	list := c.call(2, "tools/list", `{}`)
	if b, _ := json.Marshal(list); !strings.Contains(string(b), `"taskSupport":"optional"`) {
		t.Fatalf("build_environment not offered as a task: %s", b)
	}

	created := c.call(3, "tools/call", `{"name":"build_environment","arguments":{"name":"demo"},"task":{"ttl":60000}}`)
	task, _ := created["task"].(map[string]any)
	id, _ := task["taskId"].(string)
	if !strings.HasPrefix(id, "task-") || task["status"] != Working {
		t.Fatalf("created: %v", created)
	}
	if got := c.call(4, MethodGet, `{"taskId":"`+id+`"}`); got["status"] != Working {
		t.Fatalf("tasks/get: %v", got)
	}
	if b, _ := json.Marshal(c.call(5, MethodList, `{}`)); !strings.Contains(string(b), id) {
		t.Fatalf("tasks/list: %s", b)
	}
	if _, err := s.Answer(context.Background(), "bob", MethodGet, json.RawMessage(`{"taskId":"`+id+`"}`)); err == nil {
		t.Fatal("another owner read the task")
	}
	c.send(6, MethodResult, `{"taskId":"`+id+`"}`) // waits for the end
	close(release)
	r := c.answer(6)
	if r.Error != nil || !strings.Contains(string(r.Result), `mcp-forge/custom:demo`) || !strings.Contains(string(r.Result), RelatedTask) {
		t.Fatalf("tasks/result: %s %v", r.Result, r.Error)
	}
	if got := c.call(7, MethodGet, `{"taskId":"`+id+`"}`); got["status"] != Completed {
		t.Fatalf("tasks/get after the end: %v", got)
	}
	told := false
	for _, m := range c.seen {
		if n, ok := m.(*jsonrpc.Request); ok && n.Method == "notifications/tasks/status" && strings.Contains(string(n.Params), `"completed"`) {
			told = true
		}
	}
	if !told {
		t.Error("the end was not told (notifications/tasks/status)")
	}

	// Cancelled: at once, and the tool's context ends.
	release = make(chan struct{})
	created = c.call(8, "tools/call", `{"name":"build_environment","arguments":{"name":"other"},"task":{}}`)
	id2, _ := created["task"].(map[string]any)["taskId"].(string)
	if got := c.call(9, MethodCancel, `{"taskId":"`+id2+`"}`); got["status"] != Cancelled {
		t.Fatalf("tasks/cancel: %v", got)
	}
	select {
	case err := <-stopped:
		if err != context.Canceled {
			t.Fatalf("the tool stopped with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled tool's context did not end")
	}
	c.send(10, MethodCancel, `{"taskId":"`+id2+`"}`)
	if r := c.answer(10); r.Error == nil || !strings.Contains(r.Error.Error(), "terminal") {
		t.Fatalf("cancelling again: %v", r)
	}
	if got := c.call(11, MethodGet, `{"taskId":"`+id2+`"}`); got["status"] != Cancelled {
		t.Fatalf("tasks/get after cancel: %v", got)
	}

	// A call naming a task it was not given runs nothing.
	c.send(12, "tools/call", `{"name":"build_environment","arguments":{"name":"x"},"_meta":{"`+CallMeta+`":"`+id2+`"}}`)
	if r := c.answer(12); r.Error == nil || !strings.Contains(r.Error.Error(), "names no task") {
		t.Fatalf("a forged task mark: %v %s", r.Error, r.Result)
	}
}

// Over streamable HTTP, in front of go-sdk's own handler: the call made a
// task answers at once, and the task is the owner's (the tenant's), across
// requests.
func TestCallTasksOverHTTP(t *testing.T) {
	s, _ := newService()
	release := make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	srv.AddReceivingMiddleware(s.Middleware)
	mcp.AddTool(srv, &mcp.Tool{Name: "build_environment"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]any, error) {
		select {
		case <-release:
			return nil, map[string]any{"success": true}, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	h := s.Handler(inner, func(r *http.Request) (string, error) { return r.Header.Get("X-Owner"), nil }, 1<<20)
	post := func(owner, body string) map[string]any {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		req.Header.Set("X-Owner", owner)
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		w := httptest.NewRecorder()
		done := make(chan struct{})
		go func() { h.ServeHTTP(w, req); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer to %s", body)
		}
		var m map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s: %d %s", body, w.Code, w.Body)
		}
		return m
	}
	created := post("alice", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"build_environment","arguments":{},"task":{}}}`)
	task, _ := created["result"].(map[string]any)["task"].(map[string]any)
	id, _ := task["taskId"].(string)
	if !strings.HasPrefix(id, "task-") {
		t.Fatalf("created: %v", created)
	}
	get := `{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"` + id + `"}}`
	if got := post("alice", get); got["result"].(map[string]any)["status"] != Working {
		t.Fatalf("tasks/get: %v", got)
	}
	if got := post("bob", get); got["error"] == nil {
		t.Fatalf("another tenant read the task: %v", got)
	}
	close(release)
	res := post("alice", `{"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId":"`+id+`"}}`)
	if b, _ := json.Marshal(res); !strings.Contains(string(b), `"success":true`) {
		t.Fatalf("tasks/result: %s", b)
	}
}

// A cancelled task holds its place among the owner's running ones until
// its tool returns: cancelling does not make room for more goroutines than
// maxRunningCalls while the tools go on.
func TestCallTasksBoundHoldsThroughCancel(t *testing.T) {
	s, _ := newService()
	release := make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	srv.AddReceivingMiddleware(s.Middleware)
	mcp.AddTool(srv, &mcp.Tool{Name: "build_environment"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]any, error) {
		<-release // a tool that does not heed its context
		return nil, map[string]any{}, nil
	})
	c := connect(t, s, srv)
	n := 2
	for i := 0; i < maxRunningCalls; i++ {
		created := c.call(n, "tools/call", `{"name":"build_environment","arguments":{},"task":{}}`)
		id, _ := created["task"].(map[string]any)["taskId"].(string)
		c.call(n+1, MethodCancel, `{"taskId":"`+id+`"}`)
		n += 2
	}
	c.send(n, "tools/call", `{"name":"build_environment","arguments":{},"task":{}}`)
	if r := c.answer(n); r.Error == nil || !strings.Contains(r.Error.Error(), "running already") {
		t.Fatalf("a task past the bound while cancelled tools still run: %s %v", r.Result, r.Error)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n++
		c.send(n, "tools/call", `{"name":"build_environment","arguments":{},"task":{}}`)
		if r := c.answer(n); r.Error == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no room once the tools returned: %v", r.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A tool that answers with a question for the user (a multi round-trip
// result) cannot be continued through a task: the task failed, saying
// how to be asked, and its result holds the question.
func TestCallTaskInputRequiredFails(t *testing.T) {
	s, _ := newService()
	id, err := s.startCall("alice", "build_environment")
	if err != nil {
		t.Fatal(err)
	}
	if !s.claim(id, "build_environment", func() {}) {
		t.Fatal("claim")
	}
	var asks mcp.CallToolResult
	if err := json.Unmarshal([]byte(`{"resultType":"input_required","requestState":"q1","content":[]}`), &asks); err != nil || !asks.NeedsInput() {
		t.Fatalf("a multi round-trip result: %v", err)
	}
	s.finishCall(id, &asks, nil)
	tk, ok := s.current("alice", id)
	if !ok || tk.Status != Failed || !strings.Contains(tk.StatusMessage, "without a task") {
		t.Fatalf("task: %+v", tk)
	}
	b, err := s.Answer(context.Background(), "alice", MethodResult, json.RawMessage(`{"taskId":"`+id+`"}`))
	if err != nil || !strings.Contains(string(b), "input_required") {
		t.Fatalf("result: %s %v", b, err)
	}
}

// At shutdown the running call tasks are cancelled and waited for, and
// none starts any more.
func TestCallTasksClose(t *testing.T) {
	s, _ := newService()
	ended := make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	srv.AddReceivingMiddleware(s.Middleware)
	mcp.AddTool(srv, &mcp.Tool{Name: "build_environment"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]any, error) {
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // its last words (an audit line)
		close(ended)
		return nil, nil, ctx.Err()
	})
	c := connect(t, s, srv)
	c.call(2, "tools/call", `{"name":"build_environment","arguments":{},"task":{}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Close(ctx)
	select {
	case <-ended:
	default:
		t.Fatal("Close returned before the running tool ended")
	}
	c.send(3, "tools/call", `{"name":"build_environment","arguments":{},"task":{}}`)
	if r := c.answer(3); r.Error == nil || !strings.Contains(r.Error.Error(), "stopping") {
		t.Fatalf("a task after Close: %s %v", r.Result, r.Error)
	}
}
