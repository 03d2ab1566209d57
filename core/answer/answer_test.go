package answer

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func text(s string) *mcp.TextContent { return &mcp.TextContent{Text: s} }

func TestFit(t *testing.T) {
	const budget = 10000
	for _, tc := range []struct {
		name  string
		res   mcp.CallToolResult
		check func(t *testing.T, res mcp.CallToolResult)
	}{
		{name: "under the budget: untouched", res: mcp.CallToolResult{Content: []mcp.Content{text("hi")}},
			check: func(t *testing.T, res mcp.CallToolResult) {
				if res.Content[0].(*mcp.TextContent).Text != "hi" {
					t.Errorf("changed: %+v", res.Content[0])
				}
			}},
		{name: "embedded resources become links", res: mcp.CallToolResult{Content: []mcp.Content{text("ok"),
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "mcp://forge/sessions/s/files/output/a.txt", MIMEType: "text/plain", Text: strings.Repeat("a", 20000)}}}},
			check: func(t *testing.T, res mcp.CallToolResult) {
				if l, ok := res.Content[1].(*mcp.ResourceLink); !ok || l.URI != "mcp://forge/sessions/s/files/output/a.txt" {
					t.Errorf("not a link: %#v", res.Content[1])
				}
				if !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "sent as a link") {
					t.Errorf("not said: %q", res.Content[0].(*mcp.TextContent).Text)
				}
			}},
		{name: "the largest images go first", res: mcp.CallToolResult{Content: []mcp.Content{text("plots"),
			&mcp.ImageContent{MIMEType: "image/png", Data: make([]byte, 3000)}, &mcp.ImageContent{MIMEType: "image/png", Data: make([]byte, 9000)}}},
			check: func(t *testing.T, res mcp.CallToolResult) {
				if len(res.Content) != 2 || len(res.Content[1].(*mcp.ImageContent).Data) != 3000 {
					t.Errorf("kept %d blocks", len(res.Content))
				}
				if !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "image of 8.8 KiB left out") {
					t.Errorf("not said: %q", res.Content[0].(*mcp.TextContent).Text)
				}
			}},
		{name: "control bytes counted escaped: the text is cut", res: mcp.CallToolResult{Content: []mcp.Content{text(strings.Repeat("\x01", 5000))}},
			check: func(t *testing.T, res mcp.CallToolResult) {
				if tx := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(tx, "[cut here:") || res.IsError {
					t.Errorf("not cut: %d bytes, error %v", len(tx), res.IsError)
				}
			}},
		{name: "structured content alone too large: an error", res: mcp.CallToolResult{Content: []mcp.Content{text("x")},
			StructuredContent: json.RawMessage(`{"stdout":"` + strings.Repeat("y", 20000) + `"}`)},
			check: func(t *testing.T, res mcp.CallToolResult) {
				if !res.IsError || res.StructuredContent != nil || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "server.max_message") {
					t.Errorf("not an error: %+v", res)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.res
			Fit(&res, budget)
			if n, _ := Size(&res); n > budget {
				t.Errorf("fitted answer is %d bytes, over %d", n, budget)
			}
			tc.check(t, res)
		})
	}
}

// Size is what go-sdk writes: its text content escapes HTML and control
// bytes itself.
func TestSize(t *testing.T) {
	res := &mcp.CallToolResult{Content: []mcp.Content{text("<\x01>")}}
	n, err := Size(res)
	if err != nil {
		t.Fatal(err)
	}
	want := len(`{"content":[{"type":"text","text":"\u003c\u0001\u003e"}]}`)
	if n != want {
		data, _ := json.Marshal(res)
		t.Errorf("Size = %d, want %d (%s)", n, want, data)
	}
}

func TestGuard(t *testing.T) {
	g := Guard{Limit: 128 << 10, Log: hclog.NewNullLogger()}
	big := strings.Repeat("z", 256<<10)
	resource := g.Receiving(func(context.Context, string, mcp.Request) (mcp.Result, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "mcp://x", Text: big}}}, nil
	})
	if _, err := resource(context.Background(), "resources/read", nil); err == nil || !strings.Contains(err.Error(), "server.max_message") {
		t.Errorf("a resource over the bound: %v", err)
	}
	tool := g.Receiving(func(context.Context, string, mcp.Request) (mcp.Result, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{text(big)}}, nil
	})
	res, err := tool(context.Background(), "tools/call", nil)
	if n, _ := Size(res); err != nil || n > g.budget() {
		t.Errorf("a tool result over the bound: %d bytes, %v", n, err)
	}

	var sent *mcp.ProgressNotificationParams
	send := g.Sending(func(_ context.Context, _ string, req mcp.Request) (mcp.Result, error) {
		sent = req.GetParams().(*mcp.ProgressNotificationParams)
		return nil, nil
	})
	p := &mcp.ProgressNotificationParams{ProgressToken: "t", Progress: 1, Message: strings.Repeat("\x02", ProgressText)}
	if _, err := send(context.Background(), "notifications/progress", &mcp.ServerRequest[*mcp.ProgressNotificationParams]{Params: p}); err != nil {
		t.Fatal(err)
	}
	if n, _ := Size(sent); n > ProgressText+200 {
		t.Errorf("progress of %d bytes sent", n)
	}
}

// A handler's panic is an error answer, not the server's end.
func TestGuardRecovers(t *testing.T) {
	g := Guard{Limit: 1 << 20, Log: hclog.NewNullLogger()}
	h := g.Receiving(func(context.Context, string, mcp.Request) (mcp.Result, error) {
		var b []byte
		_ = b[:-1+len(b)]
		return nil, nil
	})
	if _, err := h(context.Background(), "resources/read", nil); err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Errorf("after a panic: %v", err)
	}
}
