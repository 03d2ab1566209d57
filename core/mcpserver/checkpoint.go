package mcpserver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/checkpoint"
)

// CheckpointOutput describes a checkpoint, or gives the error.
type CheckpointOutput struct {
	CheckpointInfo
	Notice string     `json:"notice,omitempty" jsonschema:"what was restored (restore_session)"`
	Error  *ErrorInfo `json:"error,omitempty"`
}

func (s *Server) addCheckpointTools() {
	out := schemaFor[CheckpointOutput]()
	addTool(s.mcp, &mcp.Tool{
		Name: "checkpoint_session", Title: "Checkpoint a session",
		Description: "Save a session's variables (Python with dill, R with save) and its working directory to the server's state directory, " +
			"replacing its previous checkpoint. Variables that cannot be saved (open files, connections, some native objects) are listed in skipped with the reason. " +
			"restore_session brings the checkpoint back in a new kernel. The checkpoint survives a server restart (list_sessions lists it; the first execute with the session_id restores it), " +
			"counts against the session quota, expires after sessions.checkpoint_ttl and is removed with destroy_session. " +
			"On error the result has session_id and error {type, message}.",
		InputSchema: schemaFor[SessionInput](), OutputSchema: out,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, CheckpointOutput, error) {
		info, err := s.ckpts.CheckpointSession(ctx, s.conn(req.Session), in.SessionID)
		if err != nil {
			res, e := failure(err)
			return res, CheckpointOutput{CheckpointInfo: CheckpointInfo{SessionID: in.SessionID}, Error: e}, nil
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Checkpointed session %s: %d variable(s) saved (%s), %d bytes.", info.SessionID, len(info.Saved), strings.Join(info.Saved, ", "), info.Bytes)
		leftOut(&b, "Not saved:", info.Skipped, info.FilesLeft)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, CheckpointOutput{CheckpointInfo: CheckpointInfo(info)}, nil
	})
	addTool(s.mcp, &mcp.Tool{
		Name: "restore_session", Title: "Restore a session from its checkpoint",
		Description: "Bring back a session's checkpoint in a new kernel: its current kernel (if any) is replaced, the saved files are written back to its " +
			"working directory and the saved variables loaded. Imports come back with the variables that need them; re-run other imports. " +
			"On error the result has session_id and error {type, message}.",
		InputSchema: schemaFor[SessionInput](), OutputSchema: out,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, CheckpointOutput, error) {
		info, _, err := s.ckpts.RestoreSession(ctx, s.conn(req.Session), in.SessionID)
		if err != nil {
			res, e := failure(err)
			return res, CheckpointOutput{CheckpointInfo: CheckpointInfo{SessionID: in.SessionID}, Error: e}, nil
		}
		notice := checkpoint.RestoreNotice(info)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: notice}}}, CheckpointOutput{CheckpointInfo: CheckpointInfo(info), Notice: notice}, nil
	})
}

// leftOut lists what a checkpoint or fork did not carry: variables with
// the reason, then files.
func leftOut(b *strings.Builder, title string, skipped map[string]string, files []string) {
	if len(skipped) > 0 {
		b.WriteString("\n" + title)
		for _, k := range slices.Sorted(maps.Keys(skipped)) {
			fmt.Fprintf(b, "\n- %s: %s", k, skipped[k])
		}
	}
	if len(files) > 0 {
		fmt.Fprintf(b, "\nFiles left out: %s", strings.Join(files, ", "))
	}
}
