package engine

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine/enginetest"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
)

type oneTool struct{}

func (oneTool) ListTools(context.Context) ([]bridge.Tool, error) {
	return []bridge.Tool{{Server: "mem", Name: "read"}, {Server: "mem", Name: "drop"}}, nil
}
func (oneTool) CallTool(context.Context, bridge.CallRequest) (bridge.CallResult, error) {
	return bridge.CallResult{Structured: json.RawMessage(`{}`)}, nil
}
func (oneTool) Generate(_ context.Context, r bridge.GenerateRequest) (map[string][]byte, error) {
	return map[string][]byte{"python/forge_tools/__init__.py": []byte("# " + strings.Join(r.Tools, " "))}, nil
}

// A run's mcp_tools become a grant its backend receives and that ends with
// the run; a session's grant lives from its start to its end; a backend
// that does not forward grants is refused.
func TestToolGrants(t *testing.T) {
	var tools *toolbridge.Service
	var grants []string
	capture := func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		grants = append(grants, req.ToolsGrant)
		if req.ToolsGrant != "" {
			if _, err := tools.Grant(map[bool]string{true: "kernel", false: "snake"}[req.SessionID != ""], req.ToolsGrant); err != nil {
				t.Errorf("the grant is not live during the run: %v", err)
			}
		}
		return backend.ExecuteResult{Success: true}, nil
	}
	r := newRig(t, func(c *config.Config) {
		c.MCPTools = map[string]config.MCPTool{"mem": {Command: "x", Deny: []string{"drop"}}}
	}, func(r *rig) {
		r.snake.Caps.MCPTools, r.kernel.Caps.MCPTools = true, true
		r.snake.Run, r.kernel.Run = capture, capture
		r.pm.Add("snake", r.snake).Add("kernel", r.kernel)
	})
	root, err := os.MkdirTemp("", "tg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	rec, _ := enginetest.Audit(t)
	cfg := config.Default()
	cfg.MCPTools = map[string]config.MCPTool{"mem": {Command: "x", Deny: []string{"drop"}}}
	tools, err = toolbridge.New(cfg, "fb", func(context.Context) (bridge.Bridge, error) { return oneTool{}, nil }, filepath.Join(root, "tools"), rec, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	r.e.SetTools(tools, "")

	if _, err := r.exec(t, Request{Language: "python", MCPTools: []string{"mem"}}); err != nil {
		t.Fatal(err)
	}
	if len(grants) != 1 || grants[0] == "" || tools.Live() != 0 {
		t.Fatalf("grants %v, %d live after the run", grants, tools.Live())
	}
	for _, tc := range []struct {
		req  Request
		rule string
		msg  string
	}{
		{Request{Language: "r", MCPTools: []string{"mem"}}, RuleMCPTools, "does not forward tool grants"},
		{Request{Language: "python", MCPTools: []string{"mem.nope"}}, toolbridge.RuleUnknown, `server mem has no tool "nope"`},
		{Request{Language: "python", MCPTools: []string{"mem.drop"}}, toolbridge.RuleDenied, "denied by policy: mcp_tools.mem.deny"},
		{Request{Language: "python", MCPTools: []string{"other"}}, toolbridge.RuleUnknown, "no such MCP server"},
	} {
		_, err := r.exec(t, tc.req)
		if rule := refusedBy(t, err); rule != tc.rule || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: got %s %q, want %s with %q", tc.req.MCPTools, rule, err, tc.rule, tc.msg)
		}
	}

	// A session started without tools gets no grant (its kernel may come
	// from the warm pool), and asking later says what to do.
	grants = nil
	if _, err := r.exec(t, Request{Language: "python", SessionID: "plain"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.exec(t, Request{Language: "python", SessionID: "plain", MCPTools: []string{"mem.read"}}); refusedBy(t, err) != RuleMCPTools || !strings.Contains(err.Error(), "first call") {
		t.Fatalf("tools asked after a plain start: %v", err)
	}
	if len(grants) != 1 || grants[0] != "" || tools.Live() != 0 {
		t.Fatalf("a session started without tools got grants %v (%d live)", grants, tools.Live())
	}
	// A session started with tools gets its grant when it opens, keeps it,
	// and later calls add tools to it.
	grants = nil
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s", MCPTools: []string{"mem.read"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s", MCPTools: []string{"mem"}}); err != nil {
		t.Fatal(err)
	}
	if len(grants) != 2 || grants[0] == "" || grants[0] != grants[1] || tools.Live() != 1 {
		t.Fatalf("session grants %v (%d live)", grants, tools.Live())
	}
	g, _ := tools.Grant("kernel", grants[0])
	if got := strings.Join(g.Tools(), ","); got != "mem.read" { // mem.drop is denied
		t.Fatalf("session grant holds %s", got)
	}
	if err := r.e.DestroySession(context.Background(), "c1", "s"); err != nil {
		t.Fatal(err)
	}
	if tools.Live() != 0 {
		t.Fatal("the session's grant outlived it")
	}
}
