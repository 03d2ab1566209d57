package sessions

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
)

// CheckpointOutput describes a checkpoint, or gives the error.
type CheckpointOutput struct {
	CheckpointInfo
	Notice string              `json:"notice,omitempty" jsonschema:"what was restored (restore_session)"`
	Error  *toolsets.ErrorInfo `json:"error,omitempty"`
}

// Checkpoint is checkpoint_session.
func Checkpoint(env toolsets.Env, c Checkpoints) toolsets.Tool {
	return toolsets.New(&mcp.Tool{
		Name: "checkpoint_session", Title: "Checkpoint a session",
		Description: "Save a session to the server's state directory, replacing its previous checkpoint. Under gVisor (security.isolation = \"gvisor\") it is a snapshot " +
			"of the whole sandbox (kind snapshot): memory, imports, open files and their offsets, sockets, generators, the execution count, and the working directory. " +
			"Otherwise (kind variables, not_whole says why) its variables (Python with dill, R with save) and working directory; variables that cannot be saved " +
			"(open files, connections, some native objects) are listed in skipped with the reason. " +
			"restore_session brings the checkpoint back in a new kernel. The checkpoint survives a server restart (list_sessions lists it; the first execute with the session_id restores it), " +
			"counts against the session quota, expires after sessions.checkpoint_ttl and is removed with destroy_session. " +
			"On error the result has session_id and error {type, message}.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, CheckpointOutput, error) {
		info, err := c.CheckpointSession(ctx, env.Conn(req.Session), in.SessionID)
		if err != nil {
			res, e := toolsets.Failure(err)
			return res, CheckpointOutput{CheckpointInfo: CheckpointInfo{SessionID: in.SessionID}, Error: e}, nil
		}
		var b strings.Builder
		if info.Kind == checkpoint.KindSnapshot {
			fmt.Fprintf(&b, "Checkpointed session %s as a snapshot of its whole sandbox (memory, imports, open files, sockets): %d bytes.", info.SessionID, info.Bytes)
		} else {
			fmt.Fprintf(&b, "Checkpointed session %s: %d variable(s) saved (%s), %d bytes.", info.SessionID, len(info.Saved), strings.Join(info.Saved, ", "), info.Bytes)
			if info.NotWhole != "" {
				fmt.Fprintf(&b, " Not a snapshot of the whole sandbox: %s.", info.NotWhole)
			}
			LeftOut(&b, "Not saved:", info.Skipped, info.FilesLeft)
		}
		return toolcall.Text(b.String()), CheckpointOutput{CheckpointInfo: InfoOf(info)}, nil
	})
}

// Restore is restore_session.
func Restore(env toolsets.Env, c Checkpoints) toolsets.Tool {
	return toolsets.New(&mcp.Tool{
		Name: "restore_session", Title: "Restore a session from its checkpoint", Meta: toolsets.ViewMeta(),
		Description: "Bring back a session's checkpoint: its current kernel (if any) is replaced. A snapshot comes back whole, in a new sandbox, exactly as it was saved. " +
			"Otherwise the saved files are written back to its working directory and the saved variables loaded in a new kernel; imports come back with the variables " +
			"that need them, re-run other imports. " +
			"On error the result has session_id and error {type, message}.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, CheckpointOutput, error) {
		info, _, err := c.RestoreSession(ctx, env.Conn(req.Session), in.SessionID)
		if err != nil {
			res, e := toolsets.Failure(err)
			return res, CheckpointOutput{CheckpointInfo: CheckpointInfo{SessionID: in.SessionID}, Error: e}, nil
		}
		notice := checkpoint.RestoreNotice(info)
		return toolcall.Text(notice), CheckpointOutput{CheckpointInfo: InfoOf(info), Notice: notice}, nil
	})
}

// LeftOut lists what a checkpoint or fork did not carry: variables with
// the reason, then files.
func LeftOut(b *strings.Builder, title string, skipped map[string]string, files []string) {
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
