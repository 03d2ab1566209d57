package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A stateless run streams like a session run (issue 25): a Python or R
// program that prints a line, sleeps 3 s and prints another has its first
// line delivered as an MCP progress notification, the program's own text,
// seconds before the call returns; the result still holds all of it. Real
// server binary, real plugins, real sandboxes (Podman, or Kubernetes with
// FORGE_TEST_KUBE_CONFIG), the go-sdk client over stdio.
func TestStatelessRunStreamsProgress(t *testing.T) {
	type note struct {
		at  time.Time
		msg string
	}
	var mu sync.Mutex
	notes := map[string][]note{} // by progress token
	s := testenv.StartServerClient(t, "", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		tok, _ := r.Params.ProgressToken.(string)
		notes[tok] = append(notes[tok], note{time.Now(), r.Params.Message})
	}})
	cases := []struct {
		language, code string
	}{
		{"python", "import time\nprint('first line')\ntime.sleep(3)\nprint('second line')"},
		{"r", "cat('first line\\n')\nSys.sleep(3)\ncat('second line\\n')"},
	}
	for _, c := range cases {
		t.Run(c.language, func(t *testing.T) {
			params := &mcp.CallToolParams{Name: "execute_" + c.language, Arguments: map[string]any{"code": c.code, "timeout": 60}}
			params.SetProgressToken("stream-" + c.language)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			called := time.Now()
			res, err := s.Session.CallTool(ctx, params)
			answered := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			var out struct {
				Success bool   `json:"success"`
				Stdout  string `json:"stdout"`
			}
			b, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatalf("structured content %s: %v", b, err)
			}
			if !out.Success || out.Stdout != "first line\nsecond line\n" {
				t.Fatalf("result %+v: %s", out, testenv.Text(res))
			}
			mu.Lock()
			got := notes["stream-"+c.language]
			mu.Unlock()
			var first time.Time
			var streamed string
			for _, n := range got {
				if text, ok := strings.CutPrefix(n.msg, "stdout: "); ok {
					streamed += text
					if first.IsZero() && strings.Contains(streamed, "first line\n") {
						first = n.at
					}
				}
			}
			if first.IsZero() {
				t.Fatalf("no progress notification carried the first line before the answer; notifications: %+v", got)
			}
			// Printed before a 3 s sleep, it comes about 2.3 s ahead on an
			// idle machine (followed from 0.5 s into the run); well over a
			// second under load.
			if ahead := answered.Sub(first); ahead < 300*time.Millisecond {
				t.Fatalf("the first line came %s before the answer: not while the program slept", ahead)
			}
			if !strings.HasPrefix("first line\nsecond line\n", streamed) {
				t.Errorf("streamed stdout %q is not the program's own output", streamed)
			}
			t.Logf("%s: first line %s after the call, %s before the answer (%d notifications)", c.language,
				first.Sub(called).Round(time.Millisecond), answered.Sub(first).Round(time.Millisecond), len(got))
		})
	}
}
