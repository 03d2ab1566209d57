package mcpserver

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// The history resource and export_notebook give HTML, code and output with
// <, > and & as they were written: Go's HTML escapes (\u003c) would make a
// DataFrame's text/html up to six times its size and the JSON unreadable.
func TestHistoryWithoutHTMLEscapes(t *testing.T) {
	r := newRig(t)
	r.backends["jupyter"].Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		return backend.ExecuteResult{Success: true, Stdout: "a < b & c > d\n", ResultRepr: "df",
			Rich: map[string]string{"text/html": "<table><tr><td>1</td></tr></table>"}}, nil
	}
	vc := r.client(t)
	code := "df[df.a < 2 & (df.b > 1)]"
	vc.call(t, "execute_python", map[string]any{"code": code, "session_id": "h"}, nil)
	wants := []string{`a < b & c > d`, `<table><tr><td>1</td></tr></table>`, code}
	for _, uri := range []string{"mcp://forge/sessions/h/history", "mcp://forge/sessions/h/notebook"} {
		rr, err := vc.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatalf("%s: %v", uri, err)
		}
		for _, w := range wants {
			if !strings.Contains(rr.Contents[0].Text, w) {
				t.Errorf("%s lacks %q as written:\n%s", uri, w, rr.Contents[0].Text)
			}
		}
	}
}
