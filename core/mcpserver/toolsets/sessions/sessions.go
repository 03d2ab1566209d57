// Package sessions is the sessions toolset: document_state,
// restart_session, destroy_session, list_sessions, checkpoint_session and
// restore_session, and the resources of a session's state and variables.
package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Sessions is what the session tools and resources need.
type Sessions interface {
	View(ctx context.Context, client, id string, refresh bool) (session.View, error)
	DocumentState(ctx context.Context, client, id string, vars map[string]string, note *string, clear bool) (session.View, error)
	RestartSession(ctx context.Context, client, id string) (session.View, error)
	DestroySession(ctx context.Context, client, id string) error
	Sessions(client string, all bool) []session.View
	SessionStartStats() map[string]session.Starts
}

// Checkpoints is what checkpoint_session, restore_session and the
// listings of checkpoints need.
type Checkpoints interface {
	CheckpointSession(ctx context.Context, client, id string) (checkpoint.Meta, error)
	RestoreSession(ctx context.Context, client, id string) (checkpoint.Meta, session.View, error)
	Checkpoints(client string) []checkpoint.Meta
}

type tools struct {
	env toolsets.Env
	s   Sessions
	c   Checkpoints
}

// Toolset is the session tools and resources, checkpoints included.
func Toolset(env toolsets.Env, s Sessions, c Checkpoints) toolsets.Toolset {
	t := tools{env, s, c}
	return toolsets.Toolset{Name: "sessions",
		Tools: []toolsets.Tool{Document(env, s), Restart(env, s), Destroy(env, s), List(env, s, c), Checkpoint(env, c), Restore(env, c)},
		Templates: []toolsets.Template{{Def: &mcp.ResourceTemplate{
			Name: "session-state", Title: "Session state", URITemplate: toolsets.StateTemplate, MIMEType: "application/json",
			Description: "A session's documented variables, note, last update and introspection",
		}, Handler: t.resource(false)}, {Def: &mcp.ResourceTemplate{
			Name: "session-variables", Title: "Session variables", URITemplate: toolsets.VariablesTemplate, MIMEType: "application/json",
			Description: "Fresh introspection of a session's variables: type, size, shape, preview",
		}, Handler: t.resource(true)}}}
}

// View is what tools and resources show of a session. Only the id
// is always present: the rest is omitted when empty, so that an error
// result (which knows only the id) has the same shape.
type View struct {
	ID                   string             `json:"session_id" jsonschema:"the session id"`
	Language             string             `json:"language,omitempty" jsonschema:"the language the session runs"`
	Backend              string             `json:"backend,omitempty" jsonschema:"the backend plugin that keeps the session"`
	State                string             `json:"state,omitempty" jsonschema:"starting, idle, busy, dead (a dead session is restarted by the next call) or suspended (idle, saved whole: the next call resumes it)"`
	Created              time.Time          `json:"created,omitzero"`
	LastActivity         time.Time          `json:"last_activity,omitzero"`
	Executions           int                `json:"executions,omitempty"`
	Job                  string             `json:"job_id,omitempty" jsonschema:"the background job running in the session: other calls in it are refused until it ends"`
	LostReason           string             `json:"lost_reason,omitempty" jsonschema:"why the kernel died, for a dead session"`
	Note                 string             `json:"note,omitempty"`
	Documented           map[string]string  `json:"documented_variables,omitempty" jsonschema:"variable name → its documentation"`
	DocumentationUpdated time.Time          `json:"documentation_updated,omitzero"`
	Variables            []backend.Variable `json:"variables,omitempty" jsonschema:"the session's variables at the last introspection"`
	IntrospectedAt       time.Time          `json:"introspected_at,omitzero"`
	IntrospectionError   string             `json:"introspection_error,omitempty"`
	Undocumented         []string           `json:"undocumented,omitempty" jsonschema:"variables without documentation"`
}

// Views are sessions as the tools show them.
func Views(vs []session.View) []View {
	return toolsets.Each(vs, func(v session.View) View { return View(v) })
}

// CheckpointInfo describes a checkpoint.
type CheckpointInfo struct {
	SessionID string            `json:"session_id"`
	Language  string            `json:"language,omitempty"`
	Backend   string            `json:"backend,omitempty"`
	Created   time.Time         `json:"created,omitzero"`
	Saved     []string          `json:"saved,omitempty" jsonschema:"variables saved"`
	Skipped   map[string]string `json:"skipped,omitempty" jsonschema:"variables that could not be saved → why"`
	FilesLeft []string          `json:"files_left_out,omitempty" jsonschema:"entries of the working directory not saved (links, pipes)"`
	Bytes     int64             `json:"bytes,omitempty" jsonschema:"size of the checkpoint (namespace and files)"`
	Kind      string            `json:"kind,omitempty" jsonschema:"snapshot: the whole sandbox (memory, imports, open files, sockets), under gVisor; variables: the variables that could be saved and the files"`
	NotWhole  string            `json:"not_whole,omitempty" jsonschema:"why a gVisor session's checkpoint holds its variables, not the whole sandbox"`
	Suspended bool              `json:"suspended,omitempty" jsonschema:"the session was suspended after sessions.suspend_after without a call: its next call resumes it whole"`
}

// InfoOf is a checkpoint as the tools show it.
func InfoOf(m checkpoint.Meta) CheckpointInfo {
	kind := m.Kind
	if kind == "" {
		kind = "variables"
	}
	return CheckpointInfo{SessionID: m.SessionID, Language: m.Language, Backend: m.Backend, Created: m.Created, Saved: m.Saved, Skipped: m.Skipped,
		FilesLeft: m.FilesLeft, Bytes: m.Bytes, Kind: kind, NotWhole: m.NotWhole, Suspended: m.Suspended}
}

// CheckpointInfos are checkpoints as the tools show them.
func CheckpointInfos(ms []checkpoint.Meta) []CheckpointInfo { return toolsets.Each(ms, InfoOf) }

// SessionInput names a session.
type SessionInput struct {
	SessionID string `json:"session_id" jsonschema:"the session_id given to an execute_<language> tool"`
}

// DocumentInput is document_state's input.
type DocumentInput struct {
	SessionID string            `json:"session_id" jsonschema:"the session to document"`
	Variables map[string]string `json:"variables,omitempty" jsonschema:"variable name → what it holds and why; an empty description removes one"`
	Note      *string           `json:"note,omitempty" jsonschema:"a free-form note about the session as a whole (replaces the previous note; \"\" removes it)"`
	Clear     bool              `json:"clear,omitempty" jsonschema:"forget all earlier documentation first"`
}

// SessionOutput is a session's state, or on error its id and the error.
type SessionOutput struct {
	View
	Error *toolsets.ErrorInfo `json:"error,omitempty"`
}

// SessionsOutput lists sessions.
type SessionsOutput struct {
	Sessions    []View           `json:"sessions"`
	Checkpoints []CheckpointInfo `json:"checkpoints,omitempty" jsonschema:"restorable checkpoints, also of sessions that are gone (a server restart, the idle reaper): restore_session, or the first execute with the session_id, brings one back"`
}

// DestroyOutput confirms a destroy, or gives the error.
type DestroyOutput struct {
	SessionID string              `json:"session_id"`
	Destroyed bool                `json:"destroyed"`
	Error     *toolsets.ErrorInfo `json:"error,omitempty"`
}

func viewText(v View) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// sessionResult turns an engine answer about a session into a tool result:
// on error the structured content is the id and the error, so that it
// still matches the output schema.
func sessionResult(id string, sv session.View, err error, text func(View) string) (*mcp.CallToolResult, SessionOutput, error) {
	if err != nil {
		res, info := toolsets.Failure(err)
		return res, SessionOutput{View: View{ID: id}, Error: info}, nil
	}
	v := View(sv)
	return toolcall.Text(text(v)), SessionOutput{View: v}, nil
}

// Document is document_state.
func Document(env toolsets.Env, s Sessions) toolsets.Tool {
	return toolsets.New(&mcp.Tool{
		Name:  "document_state",
		Title: "Document a session's variables",
		Meta:  toolsets.ViewMeta(),
		Description: "Attach descriptions to a session's variables and a note about the session, then refresh its introspection " +
			"(type, size, shape, preview of every variable). Read the result later at " + toolsets.StateTemplate + ". " +
			"On error the result has session_id and error {type, message}.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in DocumentInput) (*mcp.CallToolResult, SessionOutput, error) {
		v, err := s.DocumentState(ctx, env.Conn(req.Session), in.SessionID, in.Variables, in.Note, in.Clear)
		return sessionResult(in.SessionID, v, err, func(v View) string {
			return fmt.Sprintf("Documented session %s (%d variables, %d documented).\n%s", v.ID, len(v.Variables), len(v.Documented), viewText(v))
		})
	})
}

// Restart is restart_session.
func Restart(env toolsets.Env, s Sessions) toolsets.Tool {
	return toolsets.New(&mcp.Tool{
		Name: "restart_session", Title: "Restart a session", Meta: toolsets.ViewMeta(),
		Description: "Clear a session's namespace (all variables and imports), keeping its container; a dead session gets a new kernel. " +
			"On error the result has session_id and error {type, message}.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, SessionOutput, error) {
		v, err := s.RestartSession(ctx, env.Conn(req.Session), in.SessionID)
		return sessionResult(in.SessionID, v, err, func(v View) string {
			return "Session " + v.ID + " restarted: its namespace is empty."
		})
	})
}

// Destroy is destroy_session.
func Destroy(env toolsets.Env, s Sessions) toolsets.Tool {
	return toolsets.New(&mcp.Tool{
		Name: "destroy_session", Title: "Destroy a session",
		Description: "Stop a session's kernel and remove its container and files.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, DestroyOutput, error) {
		if err := s.DestroySession(ctx, env.Conn(req.Session), in.SessionID); err != nil {
			res, info := toolsets.Failure(err)
			return res, DestroyOutput{SessionID: in.SessionID, Error: info}, nil
		}
		return toolcall.Text("Session " + in.SessionID + " destroyed."), DestroyOutput{SessionID: in.SessionID, Destroyed: true}, nil
	})
}

// List is list_sessions.
func List(env toolsets.Env, s Sessions, c Checkpoints) toolsets.Tool {
	return toolsets.New(&mcp.Tool{
		Name: "list_sessions", Title: "List sessions",
		Description: "The stateful sessions of this connection with their language, backend, state and last activity, and its restorable checkpoints " +
			"(made by checkpoint_session or at a server shutdown): the first execute with such a session_id restores it, with a notice.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, SessionsOutput, error) {
		list := Views(s.Sessions(env.Conn(req.Session), false))
		var b strings.Builder
		fmt.Fprintf(&b, "%d session(s).\n", len(list))
		for _, v := range list {
			fmt.Fprintf(&b, "- %s: %s, %s, %d executions, last activity %s\n", v.ID, v.Language, v.State, v.Executions, v.LastActivity.Format("15:04:05"))
		}
		ckpts := CheckpointInfos(c.Checkpoints(env.Conn(req.Session)))
		if len(ckpts) > 0 {
			fmt.Fprintf(&b, "%d restorable checkpoint(s):\n", len(ckpts))
			for _, c := range ckpts {
				fmt.Fprintf(&b, "- %s: %s, %d variable(s), %d bytes, made %s\n", c.SessionID, c.Language, len(c.Saved), c.Bytes, c.Created.Format(time.RFC3339))
			}
		}
		return toolcall.Text(b.String()), SessionsOutput{Sessions: list, Checkpoints: ckpts}, nil
	})
}
func (t tools) resource(variables bool) mcp.ResourceHandler {
	leaf := "state"
	if variables {
		leaf = "variables"
	}
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		uri := req.Params.URI
		id, ok := toolsets.SessionOf(uri, leaf)
		if !ok {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		sv, err := t.s.View(ctx, t.env.Conn(req.Session), id, variables)
		v := View(sv)
		// Unknown, another connection's, or an invalid id; a tenant's
		// quota (refusing to take the session over from a replica that
		// is gone) says what it is.
		var re *refusal.Error
		if errors.As(err, &re) && !errors.Is(err, tenant.ErrQuota) {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		if err != nil {
			return nil, err
		}
		var body any = v
		if variables {
			vars := v.Variables
			if vars == nil {
				vars = []backend.Variable{}
			}
			body = struct {
				ID                 string             `json:"session_id"`
				Variables          []backend.Variable `json:"variables"`
				IntrospectedAt     time.Time          `json:"introspected_at,omitzero"`
				IntrospectionError string             `json:"introspection_error,omitempty"`
			}{v.ID, vars, v.IntrospectedAt, v.IntrospectionError}
		}
		return toolsets.JSON(uri, body)
	}
}
