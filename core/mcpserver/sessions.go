package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Session resource templates.
const (
	StateTemplate     = "mcp://forge/sessions/{id}/state"
	VariablesTemplate = "mcp://forge/sessions/{id}/variables"
)

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
	SessionView
	Error *ErrorInfo `json:"error,omitempty"`
}

// SessionsOutput lists sessions.
type SessionsOutput struct {
	Sessions    []SessionView    `json:"sessions"`
	Checkpoints []CheckpointInfo `json:"checkpoints,omitempty" jsonschema:"restorable checkpoints, also of sessions that are gone (a server restart, the idle reaper): restore_session, or the first execute with the session_id, brings one back"`
}

// DestroyOutput confirms a destroy, or gives the error.
type DestroyOutput struct {
	SessionID string     `json:"session_id"`
	Destroyed bool       `json:"destroyed"`
	Error     *ErrorInfo `json:"error,omitempty"`
}

func viewText(v SessionView) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// sessionResult turns an engine answer about a session into a tool result:
// on error the structured content is the id and the error, so that it
// still matches the output schema.
func sessionResult(id string, sv session.View, err error, text func(SessionView) string) (*mcp.CallToolResult, SessionOutput, error) {
	if err != nil {
		res, info := failure(err)
		return res, SessionOutput{SessionView: SessionView{ID: id}, Error: info}, nil
	}
	v := SessionView(sv)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text(v)}}}, SessionOutput{SessionView: v}, nil
}

func (s *Server) addSessionTools() {
	sessionOut, destroyOut, listOut := schemaFor[SessionOutput](), schemaFor[DestroyOutput](), schemaFor[SessionsOutput]()
	addTool(s.mcp, &mcp.Tool{
		Name:  "document_state",
		Title: "Document a session's variables",
		Description: "Attach descriptions to a session's variables and a note about the session, then refresh its introspection " +
			"(type, size, shape, preview of every variable). Read the result later at " + StateTemplate + ". " +
			"On error the result has session_id and error {type, message}.",
		InputSchema: schemaFor[DocumentInput](), OutputSchema: sessionOut,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in DocumentInput) (*mcp.CallToolResult, SessionOutput, error) {
		v, err := s.sessions.DocumentState(ctx, s.conn(req.Session), in.SessionID, in.Variables, in.Note, in.Clear)
		return sessionResult(in.SessionID, v, err, func(v SessionView) string {
			return fmt.Sprintf("Documented session %s (%d variables, %d documented).\n%s", v.ID, len(v.Variables), len(v.Documented), viewText(v))
		})
	})
	addTool(s.mcp, &mcp.Tool{
		Name: "restart_session", Title: "Restart a session",
		Description: "Clear a session's namespace (all variables and imports), keeping its container; a dead session gets a new kernel. " +
			"On error the result has session_id and error {type, message}.",
		InputSchema: schemaFor[SessionInput](), OutputSchema: sessionOut,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, SessionOutput, error) {
		v, err := s.sessions.RestartSession(ctx, s.conn(req.Session), in.SessionID)
		return sessionResult(in.SessionID, v, err, func(v SessionView) string {
			return "Session " + v.ID + " restarted: its namespace is empty."
		})
	})
	addTool(s.mcp, &mcp.Tool{
		Name: "destroy_session", Title: "Destroy a session",
		Description: "Stop a session's kernel and remove its container and files.",
		InputSchema: schemaFor[SessionInput](), OutputSchema: destroyOut,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, DestroyOutput, error) {
		if err := s.sessions.DestroySession(ctx, s.conn(req.Session), in.SessionID); err != nil {
			res, info := failure(err)
			return res, DestroyOutput{SessionID: in.SessionID, Error: info}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Session " + in.SessionID + " destroyed."}}}, DestroyOutput{SessionID: in.SessionID, Destroyed: true}, nil
	})
	addTool(s.mcp, &mcp.Tool{
		Name: "list_sessions", Title: "List sessions",
		Description: "The stateful sessions of this connection with their language, backend, state and last activity, and its restorable checkpoints " +
			"(made by checkpoint_session or at a server shutdown): the first execute with such a session_id restores it, with a notice.",
		InputSchema: schemaFor[struct{}](), OutputSchema: listOut,
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, SessionsOutput, error) {
		list := sessionViews(s.sessions.Sessions(s.conn(req.Session), false))
		var b strings.Builder
		fmt.Fprintf(&b, "%d session(s).\n", len(list))
		for _, v := range list {
			fmt.Fprintf(&b, "- %s: %s, %s, %d executions, last activity %s\n", v.ID, v.Language, v.State, v.Executions, v.LastActivity.Format("15:04:05"))
		}
		ckpts := checkpointInfos(s.ckpts.Checkpoints(s.conn(req.Session)))
		if len(ckpts) > 0 {
			fmt.Fprintf(&b, "%d restorable checkpoint(s):\n", len(ckpts))
			for _, c := range ckpts {
				fmt.Fprintf(&b, "- %s: %s, %d variable(s), %d bytes, made %s\n", c.SessionID, c.Language, len(c.Saved), c.Bytes, c.Created.Format(time.RFC3339))
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, SessionsOutput{Sessions: list, Checkpoints: ckpts}, nil
	})
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "session-state", Title: "Session state", URITemplate: StateTemplate, MIMEType: "application/json",
		Description: "A session's documented variables, note, last update and introspection",
	}, s.sessionResource(false))
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "session-variables", Title: "Session variables", URITemplate: VariablesTemplate, MIMEType: "application/json",
		Description: "Fresh introspection of a session's variables: type, size, shape, preview",
	}, s.sessionResource(true))
}

// sessionID extracts {id} from mcp://forge/sessions/{id}/<leaf>.
func sessionID(uri, leaf string) (string, bool) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "mcp" || u.Host != "forge" {
		return "", false
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) != 3 || parts[0] != "sessions" || parts[2] != leaf || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

func (s *Server) sessionResource(variables bool) mcp.ResourceHandler {
	leaf := "state"
	if variables {
		leaf = "variables"
	}
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		uri := req.Params.URI
		id, ok := sessionID(uri, leaf)
		if !ok {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		sv, err := s.sessions.View(ctx, s.conn(req.Session), id, variables)
		v := SessionView(sv)
		var re *refusal.Error
		if errors.As(err, &re) { // unknown, another connection's, or an invalid id
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
		data, err := json.MarshalIndent(body, "", "  ")
		if err != nil {
			return nil, err
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(data)}}}, nil
	}
}
