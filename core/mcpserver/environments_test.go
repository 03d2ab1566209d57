package mcpserver

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// Without the environment service (it could not be set up) the tools stay
// and answer why, as tool errors with a structured result; the resource
// says so too. Their success path runs against real Podman in
// test/environments.
func TestEnvironmentToolsWithoutService(t *testing.T) {
	r := newRig(t)
	r.srv.SetEnvironments(nil, "the builds directory is not writable")
	vc := r.client(t)
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"build_environment", map[string]any{"name": "x", "packages": []string{"rich"}}},
		{"list_environments", map[string]any{}},
		{"delete_environment", map[string]any{"name": "x"}},
	} {
		var out struct {
			Error *ErrorInfo `json:"error"`
		}
		res := vc.call(t, tc.tool, tc.args, &out)
		if !res.IsError || out.Error == nil || !strings.Contains(out.Error.Message, "not available: the builds directory is not writable") {
			t.Errorf("%s: %s %+v", tc.tool, text(res), out.Error)
		}
	}
	rr, err := vc.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: EnvironmentsURI})
	if err != nil || !strings.Contains(rr.Contents[0].Text, `"unavailable": "the builds directory is not writable"`) {
		t.Fatalf("%v %+v", err, rr)
	}
}

// Disabled, the tools are not offered at all.
func TestEnvironmentToolsDisabled(t *testing.T) {
	pm, _ := fixture()
	cs := newServer(t, pm, func(c *config.Config) { c.EnvironmentBuilder.Enabled = false }).connect(t, nil)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if strings.Contains(tool.Name, "environment") {
			t.Fatalf("%s offered while environment_builder.enabled = false", tool.Name)
		}
	}
	if strings.Contains(cs.InitializeResult().Instructions, "build_environment") {
		t.Fatal("instructions name build_environment")
	}
}
