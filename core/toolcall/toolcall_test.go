package toolcall

import (
	"encoding/json"
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
