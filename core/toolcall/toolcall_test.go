package toolcall

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestSessionID(t *testing.T) {
	for args, want := range map[string]string{
		`{"code":"1","session_id":"s1"}`: "s1",
		`{"code":"1"}`:                   "",
		`{"session_id":5}`:               "",
		`[1,2]`:                          "",
		``:                               "",
	} {
		call := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "execute_python", Arguments: json.RawMessage(args)}}
		if got := SessionID(call); got != want {
			t.Errorf("SessionID(%s) = %q, want %q", args, got, want)
		}
	}
	if SessionID(nil) != "" || SessionID(&mcp.CallToolRequest{}) != "" {
		t.Error("a call without arguments names a session")
	}
}

// A refusal made before any tool ran has the structured error every
// tool's output has, its detail beside type and message.
func TestRefused(t *testing.T) {
	res := Refused("QuotaExceeded", "too many runs", map[string]any{"quota": "tenants.x.max_runs"})
	data, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"error":{"message":"too many runs","quota":"tenants.x.max_runs","type":"QuotaExceeded"},"success":false}`
	if !res.IsError || string(data) != want || res.Content[0].(*mcp.TextContent).Text != "too many runs" {
		t.Fatalf("%v %s", res.IsError, data)
	}
	if r := Error("x"); !r.IsError || r.StructuredContent != nil || Text("y").IsError {
		t.Fatal("Error and Text")
	}
}

// OnForwarded's functions run when Forwarded says the call went to another
// replica, each once per Forwarded and never for a result without an
// error of its own; what is sent stays as it was, and the error is still
// found under them.
func TestOnForwarded(t *testing.T) {
	cause := errors.New("held elsewhere")
	res := Error("retry")
	res.SetError(cause)
	var got []string
	OnForwarded(res, func() { got = append(got, "inner") })
	OnForwarded(res, func() { got = append(got, "outer") })
	if !errors.Is(res.GetError(), cause) || !res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "retry" {
		t.Fatalf("the result changed: %+v, error %v", res, res.GetError())
	}
	if len(got) != 0 {
		t.Fatalf("ran before the call was forwarded: %v", got)
	}
	Forwarded(res)
	if strings.Join(got, ",") != "outer,inner" {
		t.Fatalf("ran %v, want both", got)
	}

	ok := Text("ran here")
	OnForwarded(ok, func() { t.Error("ran for a result without an error") })
	Forwarded(ok)
	if ok.IsError || ok.GetError() != nil {
		t.Fatalf("a result without an error became one: %+v", ok)
	}
	Forwarded(nil)
	OnForwarded(nil, func() {})
}
