package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Confirm asks the user of an MCP session to approve something, by form
// elicitation with no fields (accept or decline). supported is false when
// the client did not declare form elicitation: the caller then refuses with
// a message saying so, rather than proceeding unasked.
func Confirm(ctx context.Context, ss *mcp.ServerSession, message string) (approved, supported bool, err error) {
	if ss == nil {
		return false, false, nil
	}
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil ||
		(p.Capabilities.Elicitation.Form == nil && p.Capabilities.Elicitation.URL != nil) {
		return false, false, nil
	}
	res, err := ss.Elicit(ctx, &mcp.ElicitParams{Mode: "form", Message: message,
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}}})
	if err != nil {
		return false, true, err
	}
	return res.Action == "accept", true, nil
}
