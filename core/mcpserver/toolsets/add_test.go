package toolsets

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type probeIn struct {
	Code    string            `json:"code"`
	Timeout int               `json:"timeout,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Files   []probeFile       `json:"files,omitempty"`
}

type probeFile struct {
	Path     string `json:"path"`
	Content  string `json:"content,omitempty"`
	Encoding string `json:"encoding,omitempty"`
}

type probeOut struct {
	Got   probeIn `json:"got"`
	Calls int     `json:"calls"`
}

// add checks and decodes arguments as go-sdk's mcp.AddTool does: the
// same tool registered both ways answers every input alike, and a refused
// input never reaches the handler.
func TestAddToolMatchesSDK(t *testing.T) {
	ctx := context.Background()
	calls := map[string]int{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	for _, name := range []string{"ours", "sdk"} {
		tool := &mcp.Tool{Name: name, InputSchema: Schema[probeIn](), OutputSchema: Schema[probeOut]()}
		h := func(_ context.Context, _ *mcp.CallToolRequest, in probeIn) (*mcp.CallToolResult, probeOut, error) {
			calls[name]++
			return nil, probeOut{Got: in, Calls: calls[name]}, nil
		}
		if name == "ours" {
			add(srv, tool, h)
		} else {
			mcp.AddTool(srv, tool, h)
		}
	}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, args := range []string{
		`{"code":"y = 1"}`,
		`{"code":"x","timeout":30,"env":{"A":"1"},"files":[{"path":"a.csv","content":"1"}]}`,
		`{"code":"ü\u0000"}`,
		`{}`,                             // code missing
		`{"code":1}`,                     // wrong type
		`{"code":"x","timeout":"soon"}`,  // wrong type
		`{"code":"x","timeout":1.5}`,     // not an integer
		`{"code":"x","CODE":"y"}`,        // unknown (a case variant)
		`{"code":"x","other":true}`,      // unknown
		`{"code":null}`,                  // null
		`{"code":"x","env":{"A":1}}`,     // wrong value type
		`{"code":"x","files":[{"x":1}]}`, // nested unknown, nested missing
		`{"code":"a","code":"b"}`,        // duplicate: the last wins
	} {
		var results [2]string
		for i, name := range []string{"ours", "sdk"} {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
			if err != nil {
				t.Fatalf("%s %s: %v", name, args, err)
			}
			var text string
			for _, c := range res.Content {
				if tc, ok := c.(*mcp.TextContent); ok {
					text += tc.Text
				}
			}
			var structured any
			if res.StructuredContent != nil {
				raw, _ := json.Marshal(res.StructuredContent)
				json.Unmarshal(raw, &structured)
			}
			results[i] = fmt.Sprintf("isError=%v structured=%v text=%s", res.IsError, structured, text)
			if res.IsError {
				continue
			}
			// The text fallback of a result without content is its JSON,
			// key order aside.
			var fromText any
			if err := json.Unmarshal([]byte(text), &fromText); err != nil || fmt.Sprint(fromText) != fmt.Sprint(structured) {
				t.Errorf("%s %s: text %s is not the structured content %v", name, args, text, structured)
			}
			results[i] = fmt.Sprintf("isError=%v structured=%v", res.IsError, structured)
		}
		if results[0] != results[1] {
			t.Errorf("arguments %s:\n ours %s\n  sdk %s", args, results[0], results[1])
		}
	}
	if calls["ours"] != calls["sdk"] || calls["ours"] != 4 {
		t.Errorf("handler calls: %v, want 4 each (the valid inputs)", calls)
	}
}
