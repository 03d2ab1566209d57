package kernel

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Only a new session with the defaults may take a warm kernel: a warm
// container was created with the configured image, the default limits, no
// environment and no tools directory, and its mounts cannot change.
func TestWarmKernelMatches(t *testing.T) {
	b := &Backend{}
	b.cfg.Image = "mcp-forge/python:3.11"
	cases := []struct {
		name string
		req  backend.OpenSessionRequest
		want bool
	}{
		{"defaults", backend.OpenSessionRequest{SessionID: "s"}, true},
		{"the configured image named", backend.OpenSessionRequest{SessionID: "s", Image: "mcp-forge/python:3.11"}, true},
		{"another image", backend.OpenSessionRequest{SessionID: "s", Image: "mcp-forge/custom:x"}, false},
		{"memory", backend.OpenSessionRequest{SessionID: "s", Memory: "1g"}, false},
		{"environment", backend.OpenSessionRequest{SessionID: "s", Env: map[string]string{"K": "v"}}, false},
		{"a restart on its workspace", backend.OpenSessionRequest{SessionID: "s", WorkspaceID: "s"}, false},
		{"a tools grant", backend.OpenSessionRequest{SessionID: "s", ToolsGrant: "g"}, false},
	}
	for _, tc := range cases {
		if got := b.matches(tc.req); got != tc.want {
			t.Errorf("%s: matches = %v, want %v", tc.name, got, tc.want)
		}
	}
}
