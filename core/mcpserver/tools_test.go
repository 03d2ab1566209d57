package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

func TestExecuteResult(t *testing.T) {
	r := newRig(t)
	r.backends["python"].Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		switch req.Code {
		case "value":
			return backend.ExecuteResult{Success: true, Stdout: "hi\n", StdoutBytes: 3, ResultJSON: `{"a": [1, 2]}`, ResultRepr: "{'a': [1, 2]}", Duration: time.Second,
				Images: []backend.Image{{Name: "plot.png", MIMEType: "image/png", Data: []byte("\x89PNG")}}}, nil
		case "no json form":
			return backend.ExecuteResult{Success: true, ResultRepr: "<object>", ResultIsRepr: true}, nil
		case "broken json":
			return backend.ExecuteResult{Success: true, ResultJSON: "{nope", ResultRepr: "x"}, nil
		}
		return backend.ExecuteResult{}, nil
	}
	vc := r.client(t)
	var o ExecuteOutput
	res := vc.call(t, "execute_python", map[string]any{"code": "value"}, &o)
	var v map[string][]int
	if res.IsError || json.Unmarshal([]byte(o.Result), &v) != nil || len(v["a"]) != 2 || o.ResultRepr != "{'a': [1, 2]}" || o.Backend != "python" ||
		o.Stdout != "hi\n" || o.Truncated || len(o.Images) != 1 || o.ExecutionTime != 1 {
		t.Fatalf("%+v", o)
	}
	if len(res.Content) != 2 || !strings.Contains(text(res), "Python ran successfully") {
		t.Fatalf("%s", text(res))
	}
	for code, repr := range map[string]string{"no json form": "<object>", "broken json": "x"} {
		o = ExecuteOutput{}
		vc.call(t, "execute_python", map[string]any{"code": code}, &o)
		if o.Result != "" || o.ResultRepr != repr {
			t.Errorf("%s: %+v", code, o)
		}
	}
	// sessions say which backend kept them
	o = ExecuteOutput{}
	vc.call(t, "execute_r", map[string]any{"code": "1", "session_id": "s"}, &o)
	if o.Backend != "irkernel" {
		t.Fatalf("%+v", o)
	}
}

// Every way a call can fail is a tool result with isError whose structured
// content matches the tool's output schema (the validating client checks).
func TestEveryErrorIsAValidToolResult(t *testing.T) {
	r := newRig(t)
	r.backends["python"].Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		if req.Code == "crash" {
			return backend.ExecuteResult{}, errors.New("plugin went away")
		}
		return backend.ExecuteResult{ExitCode: 1, Error: &backend.ExecError{Name: "ZeroDivisionError", Message: "division by zero", Line: 1, Traceback: []string{"tb"}}}, nil
	}
	vc := r.client(t)
	vc.call(t, "execute_python", map[string]any{"code": "x = 1", "session_id": "mine"}, nil)
	other := r.client(t)

	type errOut struct {
		Error *ErrorInfo `json:"error"`
	}
	cases := []struct {
		name, tool string
		args       map[string]any
		client     *validatingClient
		typ, msg   string
	}{
		{"user code", "execute_python", map[string]any{"code": "1/0"}, vc, "ZeroDivisionError", "division by zero"},
		{"server", "execute_python", map[string]any{"code": "crash"}, vc, "ServerError", "plugin went away"},
		{"refused", "execute_python", map[string]any{"code": ""}, vc, "RequestError", "code is empty"},
		{"limit", "execute_python", map[string]any{"code": "1", "timeout": 99999}, vc, "RequestError", "execution.max_timeout"},
		{"environment", "execute_python", map[string]any{"code": "1", "environment": map[string]any{"FORGE_X": "v"}}, vc, "RequestError", "reserved"},
		{"image", "execute_python", map[string]any{"code": "1", "custom_image": "evil:latest"}, vc, "RequestError", "images.allowed"},
		{"backend", "execute_python", map[string]any{"code": "1", "backend": "r"}, vc, "RequestError", "does not run Python"},
		{"view another's", "document_state", map[string]any{"session_id": "mine"}, other, "RequestError", "no such session"},
		{"session of another language", "execute_r", map[string]any{"code": "1", "session_id": "mine"}, vc, "RequestError", "runs Python"},
		{"traversal session id", "execute_python", map[string]any{"code": "1", "session_id": "../../etc"}, vc, "RequestError", "is invalid"},
		{"restart unknown", "restart_session", map[string]any{"session_id": "nope"}, vc, "RequestError", "no such session"},
		{"restart invalid", "restart_session", map[string]any{"session_id": "a/b"}, vc, "RequestError", "is invalid"},
		{"restart another's", "restart_session", map[string]any{"session_id": "mine"}, other, "RequestError", "no such session"},
		{"document unknown", "document_state", map[string]any{"session_id": "nope", "note": "n"}, vc, "RequestError", "no such session"},
		{"document bad name", "document_state", map[string]any{"session_id": "mine", "variables": map[string]any{"": "x"}}, vc, "RequestError", "variable name"},
		{"destroy unknown", "destroy_session", map[string]any{"session_id": "nope"}, vc, "RequestError", "no such session"},
		{"destroy invalid", "destroy_session", map[string]any{"session_id": strings.Repeat("x", 129)}, vc, "RequestError", "is invalid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o errOut
			res := tc.client.call(t, tc.tool, tc.args, &o)
			if !res.IsError || o.Error == nil || o.Error.Type != tc.typ || !strings.Contains(o.Error.Message, tc.msg) || !strings.Contains(text(res), tc.msg) {
				t.Fatalf("isError=%v %+v %s", res.IsError, o.Error, text(res))
			}
		})
	}
	// Input that does not match the input schema is refused by the SDK,
	// as a tool error too.
	// It says what to do and is audited (rule arguments-invalid) like the
	// refusals of our own handlers.
	res, err := vc.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"timeout": "soon"}})
	if err != nil || !res.IsError || !strings.Contains(text(res), "do not match its input schema") || !strings.Contains(text(res), "inputSchema") {
		t.Fatalf("%v %+v %s", err, res, text(res))
	}
	// Refusals are audited with their rule.
	rules := map[string]bool{}
	for _, e := range r.audit() {
		if e.Event == "request.refused" || e.Event == "security.violation" {
			rules[e.Details["rule"].(string)] = true
		}
	}
	for _, want := range []string{"code-empty", "timeout-max", "env-reserved", "image-not-allowed", "backend-language", "session-language", "session-id", "session-not-found", "variable-name", "arguments-invalid"} {
		if !rules[want] {
			t.Errorf("no refusal audited with rule %s (%v)", want, rules)
		}
	}
}

func TestSessionTools(t *testing.T) {
	r := newRig(t)
	vc := r.client(t)
	vc.call(t, "execute_python", map[string]any{"code": "x = 1", "session_id": "s"}, nil)
	var list SessionsOutput
	vc.call(t, "list_sessions", map[string]any{}, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].ID != "s" || list.Sessions[0].Backend != "jupyter" || list.Sessions[0].State != "idle" {
		t.Fatalf("%+v", list)
	}
	var doc SessionOutput
	if res := vc.call(t, "document_state", map[string]any{"session_id": "s", "variables": map[string]any{"x": "one"}, "note": "n"}, &doc); res.IsError ||
		doc.Documented["x"] != "one" || len(doc.Variables) != 1 || doc.Error != nil {
		t.Fatalf("%+v", doc)
	}
	res, err := vc.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "mcp://forge/sessions/s/variables"})
	if err != nil || !strings.Contains(res.Contents[0].Text, `"name": "x"`) {
		t.Fatalf("%v %+v", err, res)
	}
	var rs SessionOutput
	if res := vc.call(t, "restart_session", map[string]any{"session_id": "s"}, &rs); res.IsError || rs.State != "idle" || len(rs.Variables) != 0 {
		t.Fatalf("%+v", rs)
	}
	var d DestroyOutput
	if res := vc.call(t, "destroy_session", map[string]any{"session_id": "s"}, &d); res.IsError || !d.Destroyed {
		t.Fatalf("%+v", d)
	}
	list = SessionsOutput{}
	vc.call(t, "list_sessions", map[string]any{}, &list)
	if list.Sessions == nil || len(list.Sessions) != 0 {
		t.Fatalf("%+v", list)
	}
	for _, uri := range []string{"mcp://forge/sessions/s/state", "mcp://forge/sessions/..%2Fx/state"} {
		if _, err := vc.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("%s: read", uri)
		}
	}
}

// Sessions belong to their connection: another one neither sees nor reads
// them.
func TestConnectionsOwnTheirSessions(t *testing.T) {
	r := newRig(t)
	a, b := r.client(t), r.client(t)
	a.call(t, "execute_python", map[string]any{"code": "1", "session_id": "s"}, nil)
	var list SessionsOutput
	b.call(t, "list_sessions", map[string]any{}, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("%+v", list)
	}
	if _, err := b.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "mcp://forge/sessions/s/state"}); err == nil {
		t.Fatal("another connection read the session")
	}
	env, err := b.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: EnvironmentURI})
	if err != nil || strings.Contains(env.Contents[0].Text, `"session_id"`) {
		t.Fatalf("%v %s", err, env.Contents[0].Text)
	}
	env, _ = a.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: EnvironmentURI})
	if !strings.Contains(env.Contents[0].Text, `"session_id": "s"`) {
		t.Fatalf("%s", env.Contents[0].Text)
	}
}

// A session's output is forwarded as progress notifications to a client
// that asked for them.
func TestProgressNotifications(t *testing.T) {
	r := newRig(t)
	r.backends["jupyter"].Run = func(_ context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		if emit != nil {
			emit(backend.StreamEvent{Name: "stdout", Text: "step 1\n"})
			emit(backend.StreamEvent{Name: "stderr", Text: "warn\n"})
		}
		return backend.ExecuteResult{Success: true, Stdout: "step 1\n"}, nil
	}
	var mu sync.Mutex
	var got []*mcp.ProgressNotificationParams
	cs := r.connect(t, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		got = append(got, req.Params)
		mu.Unlock()
	}})
	params := &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": "1", "session_id": "p"}}
	params.SetProgressToken("tok")
	if res, err := cs.CallTool(context.Background(), params); err != nil || res.IsError {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].ProgressToken != "tok" || got[0].Message != "stdout: step 1\n" || got[1].Progress != 2 || got[1].Message != "stderr: warn\n" {
		t.Fatalf("%+v", got)
	}
	// Without a token, no notifications (and no emitter at all).
	var calledWith func(backend.StreamEvent)
	r.backends["jupyter"].Run = func(_ context.Context, _ backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		calledWith = emit
		return backend.ExecuteResult{Success: true}, nil
	}
	cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": "1", "session_id": "p"}})
	if calledWith != nil {
		t.Fatal("an emitter without a progress token")
	}
}

func TestEnvironmentResource(t *testing.T) {
	r := newRig(t)
	cs := r.connect(t, nil)
	res, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: EnvironmentURI})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Languages map[string]struct {
			Name      string
			Stateless struct{ Backend string }
			Session   struct{ Backend string }
		}
		Images struct {
			InUse   map[string][]string `json:"in_use"`
			Allowed []string
		}
		Plugins []struct {
			Name, Image string
			Packages    []string
		}
	}
	if err := json.Unmarshal([]byte(res.Contents[0].Text), &info); err != nil {
		t.Fatal(err)
	}
	if info.Languages["r"].Name != "R" || info.Languages["r"].Session.Backend != "irkernel" || len(info.Images.InUse["mcp-forge/python:3.11"]) != 2 ||
		len(info.Plugins) != 4 || info.Plugins[0].Image == "" {
		t.Fatalf("%s", res.Contents[0].Text)
	}
}
