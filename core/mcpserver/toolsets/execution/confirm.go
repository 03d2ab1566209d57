package execution

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Confirm asks the user of an MCP session to approve something, by form
// elicitation with no fields (accept or decline). supported is false when
// the client cannot be asked: it did not declare form elicitation, or it
// speaks protocol 2026-07-28 or later, where a server may not send requests
// while it serves a call (it would have to return input requests, SEP-2322,
// which a sandbox blocked mid-run cannot). The caller then refuses with a
// message saying so, rather than proceeding unasked.
func Confirm(ctx context.Context, ss *mcp.ServerSession, message string) (approved, supported bool, err error) {
	if ss == nil {
		return false, false, nil
	}
	p := ss.InitializeParams()
	if p == nil || p.ProtocolVersion >= noServerRequests || p.Capabilities == nil || p.Capabilities.Elicitation == nil ||
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

// noServerRequests is the first protocol version in which a server cannot
// send elicitation/create while serving a request.
const noServerRequests = "2026-07-28"
