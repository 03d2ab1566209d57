package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/engine"
)

// Session resource templates.
const (
	StateTemplate     = "mcp://forge/sessions/{id}/state"
	VariablesTemplate = "mcp://forge/sessions/{id}/variables"
)

// SessionInput names a session.
type SessionInput struct {
	SessionID string `json:"session_id" jsonschema:"the session id given to execute_python"`
}

// DocumentInput is document_state's input.
type DocumentInput struct {
	SessionID string            `json:"session_id" jsonschema:"the session to document"`
	Variables map[string]string `json:"variables,omitempty" jsonschema:"variable name → what it holds and why; an empty description removes one"`
	Note      *string           `json:"note,omitempty" jsonschema:"a free-form note about the session as a whole (replaces the previous note)"`
	Clear     bool              `json:"clear,omitempty" jsonschema:"forget all earlier documentation first"`
}

// SessionsOutput lists sessions.
type SessionsOutput struct {
	Sessions []engine.SessionView `json:"sessions"`
}

// DestroyOutput confirms a destroy.
type DestroyOutput struct {
	SessionID string `json:"session_id"`
	Destroyed bool   `json:"destroyed"`
}

func toolError(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
}

func viewText(v engine.SessionView) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func (s *Server) addSessionTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "document_state",
		Title: "Document a session's variables",
		Description: "Attach descriptions to a session's variables and a note about the session, then refresh its introspection " +
			"(type, size, shape, preview of every variable). Read the result later at " + StateTemplate + ".",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in DocumentInput) (*mcp.CallToolResult, engine.SessionView, error) {
		v, err := s.eng.DocumentState(ctx, s.conn(req.Session), in.SessionID, in.Variables, in.Note, in.Clear)
		if err != nil {
			return toolError(err), engine.SessionView{}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("Documented session %s (%d variables, %d documented).\n%s", v.ID, len(v.Variables), len(v.Documented), viewText(v))}}}, v, nil
	})
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name: "restart_session", Title: "Restart a session",
		Description: "Clear a session's namespace (all variables and imports), keeping its container; a dead session gets a new kernel.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, engine.SessionView, error) {
		v, err := s.eng.RestartSession(ctx, s.conn(req.Session), in.SessionID)
		if err != nil {
			return toolError(err), engine.SessionView{}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Session " + v.ID + " restarted: its namespace is empty."}}}, v, nil
	})
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name: "destroy_session", Title: "Destroy a session",
		Description: "Stop a session's kernel and remove its container and files.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, DestroyOutput, error) {
		if err := s.eng.DestroySession(ctx, s.conn(req.Session), in.SessionID); err != nil {
			return toolError(err), DestroyOutput{SessionID: in.SessionID}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Session " + in.SessionID + " destroyed."}}}, DestroyOutput{SessionID: in.SessionID, Destroyed: true}, nil
	})
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name: "list_sessions", Title: "List sessions",
		Description: "The stateful sessions of this connection with their language, state and last activity.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, SessionsOutput, error) {
		list := s.eng.Sessions(s.conn(req.Session), false)
		if list == nil {
			list = []engine.SessionView{}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d session(s).\n", len(list))
		for _, v := range list {
			fmt.Fprintf(&b, "- %s: %s, %s, %d executions, last activity %s\n", v.ID, v.Language, v.State, v.Executions, v.LastActivity.Format("15:04:05"))
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, SessionsOutput{Sessions: list}, nil
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
		v, err := s.eng.View(ctx, s.conn(req.Session), id, variables)
		if errors.Is(err, engine.ErrNoSession) {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		if err != nil {
			return nil, err
		}
		var body any = v
		if variables {
			body = map[string]any{"session_id": v.ID, "variables": v.Variables, "introspected_at": v.IntrospectedAt, "introspection_error": v.IntrospectionError}
		}
		data, err := json.MarshalIndent(body, "", "  ")
		if err != nil {
			return nil, err
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(data)}}}, nil
	}
}
