package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/jobs"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// fakeJobs holds records by owner and id; WaitJob finishes a job.
type fakeJobs struct {
	mu       sync.Mutex
	recs     map[string]jobs.Record // owner/id
	onChange func(jobs.Record)
}

func (f *fakeJobs) OnJobChange(fn func(jobs.Record)) { f.onChange = fn }

func (f *fakeJobs) put(owner string, r jobs.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.Client = owner
	f.recs[owner+"/"+r.ID] = r
}

func (f *fakeJobs) Job(client, id, _ string) (jobs.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.recs[client+"/"+id]
	if !ok {
		return jobs.Record{}, jobs.ErrNoJob
	}
	return r, nil
}

func (f *fakeJobs) WaitJob(_ context.Context, client, id string, _ int) (jobs.Record, error) {
	r, err := f.Job(client, id, "")
	if err != nil {
		return r, err
	}
	res, _ := json.Marshal(engine.Result{ExecuteResult: backend.ExecuteResult{Success: true, Stdout: "hi\n", ResultRepr: "42"}})
	r.State, r.Result, r.Finished = jobs.Done, res, time.Now()
	f.put(client, r)
	return r, nil
}

func (f *fakeJobs) Jobs(client string) []jobs.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []jobs.Record
	for _, r := range f.recs {
		if r.Client == client {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeJobs) CancelJob(_ context.Context, client, id string) (jobs.Record, error) {
	r, err := f.Job(client, id, "")
	if err != nil {
		return r, err
	}
	r.State, r.Reason = jobs.Cancelled, "cancel_job was called"
	f.put(client, r)
	return r, nil
}

func (f *fakeJobs) LanguageName(string) string { return "Python" }

func newService() (*Service, *fakeJobs) {
	f := &fakeJobs{recs: map[string]jobs.Record{}}
	f.put("alice", jobs.Record{ID: "job-1", Language: "python", State: jobs.Running, Created: time.Now()})
	f.put("alice", jobs.Record{ID: "job-done", Language: "python", State: jobs.Done, Created: time.Now(), Finished: time.Now()})
	f.put("bob", jobs.Record{ID: "job-bob", Language: "python", State: jobs.Running, Created: time.Now()})
	return New(f, config.Default()), f
}

func TestStartCall(t *testing.T) {
	for _, tc := range []struct {
		params, want string // want "": passes untouched
	}{
		{`{"name":"execute_python","arguments":{"code":"1"},"task":{"ttl":1000}}`, `{"arguments":{"background":true,"code":"1"},"name":"execute_python"}`},
		{`{"name":"execute_r","task":{}}`, `{"arguments":{"background":true},"name":"execute_r"}`},
		{`{"name":"execute_python","arguments":{"code":"1","background":false},"task":{}}`, `{"arguments":{"background":true,"code":"1"},"name":"execute_python"}`},
		{`{"name":"execute_python","arguments":{"code":"1"}}`, ""},
		{`{"name":"execute_python","arguments":{"code":"1"},"task":null}`, ""},
		{`{"name":"list_sessions","task":{}}`, "error"},
		{`{"name":"execute_python","task":{},"argumentS":""}`, "invalid"},
		{`{"name":"execute_python","Task":{},"arguments":{}}`, "invalid"},
		{`{"name":"execute_python","arguments":[1],"task":{}}`, ""},
		{`not json`, ""},
	} {
		got, ok, err := StartCall(json.RawMessage(tc.params))
		if tc.want == "error" || tc.want == "invalid" {
			code := map[string]int64{"error": jsonrpc.CodeMethodNotFound, "invalid": jsonrpc.CodeInvalidParams}[tc.want]
			var we *jsonrpc.Error
			if !errors.As(err, &we) || we.Code != code {
				t.Errorf("%s: %v, want code %d", tc.params, err, code)
			}
			continue
		}
		if err != nil || ok != (tc.want != "") || (ok && string(got) != tc.want) {
			t.Errorf("%s: %s %v %v, want %q", tc.params, got, ok, err, tc.want)
		}
	}
}

// tasks/* as the protocol defines them, each owner seeing only its own.
func TestAnswer(t *testing.T) {
	s, _ := newService()
	ctx := context.Background()
	ask := func(owner, method, params string) (map[string]any, error) {
		b, err := s.Answer(ctx, owner, method, json.RawMessage(params))
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m, nil
	}
	code := func(err error) int64 {
		var we *jsonrpc.Error
		if errors.As(err, &we) {
			return we.Code
		}
		return 0
	}
	if m, err := ask("alice", MethodGet, `{"taskId":"job-1"}`); err != nil || m["status"] != Working || m["pollInterval"] == nil || m["ttl"] == nil {
		t.Errorf("get: %v %v", m, err)
	}
	for _, tc := range []struct{ owner, method, params, want string }{
		{"alice", MethodGet, `{"taskId":"job-bob"}`, "not found"},
		{"alice", MethodGet, `{"taskId":"nope"}`, "not found"},
		{"alice", MethodResult, `{"taskId":"job-bob"}`, "not found"},
		{"alice", MethodCancel, `{"taskId":"job-bob"}`, "not found"},
		{"alice", MethodCancel, `{"taskId":"job-done"}`, "terminal status completed"},
		{"alice", MethodGet, `{}`, "taskId is required"},
		{"alice", MethodGet, `[1]`, "must be an object"},
	} {
		_, err := ask(tc.owner, tc.method, tc.params)
		if code(err) != jsonrpc.CodeInvalidParams || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want invalid params saying %q", tc.method, tc.params, err, tc.want)
		}
	}
	m, err := ask("alice", MethodList, `{}`)
	if l, _ := m["tasks"].([]any); err != nil || len(l) != 2 {
		t.Errorf("list: %v %v", m, err)
	}
	m, err = ask("alice", MethodResult, `{"taskId":"job-1"}`) // waits: the fake finishes it
	meta, _ := m["_meta"].(map[string]any)
	sc, _ := m["structuredContent"].(map[string]any)
	if err != nil || sc["result_repr"] != "42" || meta[RelatedTask] == nil || m["isError"] == true {
		t.Errorf("result: %v %v", m, err)
	}
	if m, err := ask("bob", MethodCancel, `{"taskId":"job-bob"}`); err != nil || m["status"] != Cancelled {
		t.Errorf("cancel: %v %v", m, err)
	}
}

// A call refused before a job started is a failed task whose result is
// the refusal; the task tools are marked, the capabilities said.
func TestCreatedAndMarks(t *testing.T) {
	s, _ := newService()
	b, err := s.Created("alice", json.RawMessage(`{"content":[{"type":"text","text":"started"}],"structuredContent":{"job_id":"job-1","success":true}}`))
	if err != nil || !strings.Contains(string(b), `"taskId":"job-1"`) || !strings.Contains(string(b), `"status":"working"`) {
		t.Fatalf("created: %s %v", b, err)
	}
	b, err = s.Created("alice", json.RawMessage(`{"content":[{"type":"text","text":"timeout 999 is over 300"}],"isError":true}`))
	var ct struct{ Task Task }
	if err != nil || json.Unmarshal(b, &ct) != nil || ct.Task.Status != Failed {
		t.Fatalf("refused: %s %v", b, err)
	}
	res, err := s.Answer(context.Background(), "alice", MethodResult, json.RawMessage(`{"taskId":"`+ct.Task.TaskID+`"}`))
	if err != nil || !strings.Contains(string(res), "timeout 999") || !strings.Contains(string(res), RelatedTask) {
		t.Fatalf("refused result: %s %v", res, err)
	}
	if _, err := s.Answer(context.Background(), "bob", MethodGet, json.RawMessage(`{"taskId":"`+ct.Task.TaskID+`"}`)); err == nil {
		t.Fatal("bob sees alice's refused task")
	}
	caps, _ := Capabilities(json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}`))
	if !strings.Contains(string(caps), `"tasks":{"cancel":{},"list":{},"requests":{"tools":{"call":{}}}}`) || !strings.Contains(string(caps), Extension) {
		t.Fatalf("capabilities: %s", caps)
	}
	tools, _ := Tools(json.RawMessage(`{"tools":[{"name":"execute_python"},{"name":"wait_job"}]}`))
	if string(tools) != `{"tools":[{"execution":{"taskSupport":"optional"},"name":"execute_python"},{"name":"wait_job"}]}` {
		t.Fatalf("tools: %s", tools)
	}
}

// Over HTTP: tasks/* answered in front of the MCP handler; a task call's
// answer rewritten in an event stream (other events untouched) and in a
// JSON answer.
func TestHandler(t *testing.T) {
	s, _ := newService()
	var seen string
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen = string(b)
		answer := `{"jsonrpc":"2.0","id":7,"result":{"content":[],"structuredContent":{"job_id":"job-1"}}}`
		if r.Header.Get("Accept") == "application/json" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, answer)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message\ndata: %s\n\n", `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}`)
		w.(http.Flusher).Flush()
		fmt.Fprintf(w, "event: message\ndata: %s\n\n", answer)
	})
	h := s.Handler(next, func(r *http.Request) (string, error) { return r.Header.Get("X-Owner"), nil }, 1<<20)
	post := func(body, accept string) (string, string) {
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		req.Header.Set("X-Owner", "alice")
		req.Header.Set("Accept", accept)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Header().Get("Content-Type"), w.Body.String()
	}
	ct, body := post(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"job-1"}}`, "")
	if ct != "application/json" || !strings.Contains(body, `"status":"working"`) || seen != "" {
		t.Fatalf("tasks/get: %s %s (the MCP handler saw %q)", ct, body, seen)
	}
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":"1"},"task":{}}}`
	for _, accept := range []string{"text/event-stream", "application/json"} {
		_, body = post(call, accept)
		if !strings.Contains(seen, `"background":true`) || strings.Contains(seen, `"task"`) {
			t.Fatalf("%s: the MCP handler saw %s", accept, seen)
		}
		if !strings.Contains(body, `"task":{"taskId":"job-1"`) || strings.Contains(body, "structuredContent") {
			t.Fatalf("%s: %s", accept, body)
		}
		if accept == "text/event-stream" && !strings.Contains(body, "notifications/progress") {
			t.Fatalf("the stream's other events went: %s", body)
		}
	}
	_, body = post(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":"1"}}}`, "text/event-stream")
	if !strings.Contains(body, "structuredContent") || strings.Contains(seen, "background") {
		t.Fatalf("a call without a task was changed: %s / %s", seen, body)
	}
}

// fakeConn is a connection whose reads are fed and whose writes are kept.
type fakeConn struct {
	in  chan jsonrpc.Message
	mu  sync.Mutex
	out []jsonrpc.Message
}

func (f *fakeConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case m := <-f.in:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeConn) Write(_ context.Context, m jsonrpc.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out = append(f.out, m)
	return nil
}

func (f *fakeConn) written() []jsonrpc.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]jsonrpc.Message(nil), f.out...)
}

func (f *fakeConn) Close() error      { return nil }
func (f *fakeConn) SessionID() string { return "" }

type fakeTransport struct{ c *fakeConn }

func (t fakeTransport) Connect(context.Context) (mcp.Connection, error) { return t.c, nil }

// On stdio: a task call goes to the server as a job and its answer comes
// back as the task; tasks/get is answered without the server; the task's
// end is told (notifications/tasks/status), its output is not.
func TestConnection(t *testing.T) {
	s, f := newService()
	fc := &fakeConn{in: make(chan jsonrpc.Message, 4)}
	c, err := s.Transport(fakeTransport{fc}, "alice").Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id, _ := jsonrpc.MakeID(float64(3))
	fc.in <- &jsonrpc.Request{ID: id, Method: "tools/call", Params: json.RawMessage(`{"name":"execute_python","arguments":{"code":"1"},"task":{}}`)}
	m, err := c.Read(context.Background())
	if req, ok := m.(*jsonrpc.Request); err != nil || !ok || !strings.Contains(string(req.Params), `"background":true`) {
		t.Fatalf("the server read %v %v", m, err)
	}
	if err := c.Write(context.Background(), &jsonrpc.Response{ID: id, Result: json.RawMessage(`{"content":[],"structuredContent":{"job_id":"job-1"}}`)}); err != nil {
		t.Fatal(err)
	}
	gid, _ := jsonrpc.MakeID("g")
	fc.in <- &jsonrpc.Request{ID: gid, Method: MethodGet, Params: json.RawMessage(`{"taskId":"job-1"}`)}
	go c.Read(context.Background()) // answers tasks/get itself, then waits for more
	deadline := time.Now().Add(5 * time.Second)
	for len(fc.written()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r, _ := f.Job("alice", "job-1", "")
	r.Progress++
	f.onChange(r) // output only: nothing told
	r.State = jobs.Done
	f.onChange(r)
	f.onChange(r) // told once
	var got []string
	for _, m := range fc.written() {
		b, _ := jsonrpc.EncodeMessage(m)
		got = append(got, string(b))
	}
	if len(got) != 3 || !strings.Contains(got[0], `"task":{"taskId":"job-1"`) || !strings.Contains(got[1], `"id":"g"`) ||
		!strings.Contains(got[2], `"notifications/tasks/status"`) || !strings.Contains(got[2], `"status":"completed"`) {
		t.Fatalf("written:\n%s", strings.Join(got, "\n"))
	}
	c.Close()
}

// Found by a hostile review, each now refused or bounded.
func TestHostile(t *testing.T) {
	t.Run("a rebinding page cannot read tasks of a loopback server", func(t *testing.T) {
		s, _ := newService()
		h := s.Handler(http.NotFoundHandler(), func(*http.Request) (string, error) { return "alice", nil }, 1<<20)
		for _, tc := range []struct {
			host, ctype string
			want        int
		}{{"evil.example:3000", "application/json", http.StatusForbidden}, {"127.0.0.1:3000", "text/plain", http.StatusUnsupportedMediaType},
			{"localhost:3000", "application/json; charset=utf-8", http.StatusOK}} {
			req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tasks/list","params":{}}`))
			req.Host = tc.host
			req.Header.Set("Content-Type", tc.ctype)
			req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 3000}))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tc.want || (tc.want != http.StatusOK && strings.Contains(w.Body.String(), "job-1")) {
				t.Errorf("Host %s, %s: %d %s, want %d", tc.host, tc.ctype, w.Code, w.Body.String(), tc.want)
			}
		}
	})
	t.Run("one owner's refusals do not push out another's", func(t *testing.T) {
		s, _ := newService()
		refused := json.RawMessage(`{"content":[{"type":"text","text":"no"}],"isError":true}`)
		b, _ := s.Created("alice", refused)
		var ct struct{ Task Task }
		json.Unmarshal(b, &ct)
		for range maxRefused + 10 {
			s.Created("mallory", refused)
		}
		if _, err := s.Answer(context.Background(), "alice", MethodResult, json.RawMessage(`{"taskId":"`+ct.Task.TaskID+`"}`)); err != nil {
			t.Fatal(err)
		}
		if n := len(s.refused); n > maxRefused+1 {
			t.Fatalf("%d refused tasks kept", n)
		}
	})
	t.Run("a null answer is no task", func(t *testing.T) {
		s, _ := newService()
		if _, err := s.Created("alice", json.RawMessage(`null`)); err == nil {
			t.Fatal("a null answer made a task")
		}
		if _, err := related(json.RawMessage(`null`), "x"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a cancelled task is cancelled while its sandbox stops", func(t *testing.T) {
		s, f := newService()
		stuck := &stuckCancel{fakeJobs: f}
		s.jobs = stuck
		b, err := s.Answer(context.Background(), "alice", MethodCancel, json.RawMessage(`{"taskId":"job-1"}`))
		if err != nil || !strings.Contains(string(b), `"status":"cancelled"`) {
			t.Fatalf("cancel: %s %v", b, err)
		}
		b, _ = s.Answer(context.Background(), "alice", MethodGet, json.RawMessage(`{"taskId":"job-1"}`))
		if !strings.Contains(string(b), `"status":"cancelled"`) {
			t.Fatalf("get after cancel: %s", b)
		}
		if _, err := s.Answer(context.Background(), "alice", MethodCancel, json.RawMessage(`{"taskId":"job-1"}`)); err == nil {
			t.Fatal("cancelled twice")
		}
	})
	t.Run("a code error completes the call, in every view", func(t *testing.T) {
		r := jobs.Record{State: jobs.Failed, HasResult: true}
		if status(r) != Completed {
			t.Fatal(status(r))
		}
	})
	t.Run("a task that ended before it was remembered is not kept", func(t *testing.T) {
		s, f := newService()
		fc := &fakeConn{in: make(chan jsonrpc.Message, 1)}
		cn, _ := s.Transport(fakeTransport{fc}, "alice").Connect(context.Background())
		c := cn.(*conn)
		r, _ := f.Job("alice", "job-done", "")
		b, _ := json.Marshal(map[string]any{"task": s.task(r)})
		c.started(b)
		r, _ = f.Job("alice", "job-1", "")
		b, _ = json.Marshal(map[string]any{"task": s.task(r)})
		r.State = jobs.Done
		f.put("alice", r) // it ends between the answer and started
		c.started(b)
		if len(c.told) != 0 || len(fc.written()) != 1 {
			t.Fatalf("told %v, written %d", c.told, len(fc.written()))
		}
	})
}

// stuckCancel's CancelJob returns while the job still runs.
type stuckCancel struct{ *fakeJobs }

func (s *stuckCancel) CancelJob(_ context.Context, client, id string) (jobs.Record, error) {
	return s.Job(client, id, "")
}

// A body that fails while read here fails the same way for the handler
// behind (a body deadline's error names its setting).
func TestHandlerPassesBodyErrors(t *testing.T) {
	s, _ := newService()
	var got error
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, got = io.ReadAll(r.Body) })
	h := s.Handler(next, func(*http.Request) (string, error) { return "alice", nil }, 1<<20)
	req := httptest.NewRequest(http.MethodPost, "/mcp", io.MultiReader(strings.NewReader(`{"jsonrpc"`), failed{errors.New("request body incomplete after 2s (server.request_body_timeout)")}))
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got == nil || !strings.Contains(got.Error(), "server.request_body_timeout") {
		t.Fatalf("the handler behind read %v", got)
	}
}
