package shim

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// The tools grant token survives the trip to the plugin (the core mounts
// that grant only in a container whose intent carries it).
func TestToolsGrantCrosses(t *testing.T) {
	req := backend.ExecuteRequest{Code: "1", RunID: "r", ToolsGrant: "0123abcd"}
	if got := requestFromPB(requestToPB(req)); got.ToolsGrant != req.ToolsGrant {
		t.Fatalf("ToolsGrant %q after the round trip, want %q", got.ToolsGrant, req.ToolsGrant)
	}
}
