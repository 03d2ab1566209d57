// Package mcpserver is the MCP face of MCP-Forge: typed tools and resources
// over the modelcontextprotocol/go-sdk. It talks to the engine, never to the
// runtime.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/version"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// EnvironmentURI is the resource describing images, limits and plugins.
const EnvironmentURI = "mcp://forge/environment/info"

const instructions = `MCP-Forge runs Python and R in sandboxed Podman containers: no network,
read-only filesystem except /tmp and the working directory, resource limits
and a timeout. Use execute_python or execute_r with code; the value of the last
expression is returned as "result". Pass a session_id to keep state across
calls (one kernel per session); document_state attaches notes to a session's
variables, readable at mcp://forge/sessions/{id}/state. Image files (png, jpeg,
svg) written to the working directory, open matplotlib figures and R plots
come back as images. Read ` + EnvironmentURI + ` for the images, limits,
backends and sessions.`

// Server holds the MCP server and what its handlers need.
type Server struct {
	mcp *mcp.Server
	eng *engine.Engine
	cfg config.Config

	conns sync.Map // *mcp.ServerSession → connection id
	next  atomic.Int64
}

// New builds the MCP server with every tool and resource.
func New(eng *engine.Engine, cfg config.Config) *Server {
	s := &Server{eng: eng, cfg: cfg}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "mcp-forge", Title: "MCP-Forge", Version: version.Version},
		&mcp.ServerOptions{Instructions: instructions})
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:         "execute_python",
		Title:        "Run Python in a sandbox",
		OutputSchema: outputSchema(),
		Description:  "Run Python 3.11 code in a fresh sandboxed container (numpy, pandas, matplotlib available; no network). All statements run; the value of a final expression is returned as result. stdout and stderr are returned separately. Errors report the line of your code.",
	}, s.executePython)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:         "execute_r",
		Title:        "Run R in a sandbox",
		OutputSchema: outputSchema(),
		Description: "Run R 4.2 code in a fresh sandboxed container (jsonlite available; no network), or in a stateful R session with session_id. " +
			"Top-level expressions run like Rscript; the value of the last one is returned as result (text, and JSON for simple vectors and lists). " +
			"Errors report the R message and the line. Plots come back as PNG images.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ExecuteInput) (*mcp.CallToolResult, ExecuteOutput, error) {
		return s.execute(ctx, req, "r", in)
	})
	s.addLanguageTools()
	s.addSessionTools()
	s.mcp.AddResource(&mcp.Resource{
		URI: EnvironmentURI, Name: "environment", Title: "Sandbox environment",
		Description: "Images, resource limits and loaded plugins with their versions", MIMEType: "application/json",
	}, s.environment)
	return s
}

// MCP is the underlying go-sdk server (for transports).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves on the transport until the client disconnects or ctx ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error { return s.mcp.Run(ctx, t) }

// outputSchema is the inferred schema of ExecuteOutput with "result" as an
// empty (any-value) object schema: inference renders `any` as the boolean
// schema true, which some clients (the TypeScript SDK) reject.
func outputSchema() *jsonschema.Schema {
	sch, err := jsonschema.For[ExecuteOutput](nil)
	if err != nil {
		panic(err)
	}
	sch.Properties["result"] = &jsonschema.Schema{Description: "the value of the final expression: JSON when it has a JSON form, otherwise its text representation"}
	return sch
}

// ExecuteInput is execute_python's input.
type ExecuteInput struct {
	Code        string            `json:"code" jsonschema:"source to run. The value of the last expression is returned as result."`
	MCPTools    []string          `json:"mcp_tools,omitempty" jsonschema:"names of configured MCP servers whose tools the code may call (needs the mcpbridge plugin)"`
	SessionID   string            `json:"session_id,omitempty" jsonschema:"run in this stateful session (kept across calls; needs a stateful backend such as jupyter)"`
	Backend     string            `json:"backend,omitempty" jsonschema:"backend plugin to use; default: execution.default_backend"`
	Timeout     int               `json:"timeout,omitempty" jsonschema:"wall-clock limit in seconds; default execution.default_timeout, at most execution.max_timeout"`
	CustomImage string            `json:"custom_image,omitempty" jsonschema:"run in this image instead of the default (must match images.allowed, e.g. mcp-forge/custom:NAME)"`
	Environment map[string]string `json:"environment,omitempty" jsonschema:"environment variables for the code"`
}

// ErrorInfo is a failure of the user's code.
type ErrorInfo struct {
	Type      string   `json:"type"`
	Message   string   `json:"message"`
	Line      int      `json:"line,omitempty"`
	Column    int      `json:"column,omitempty"`
	Traceback []string `json:"traceback,omitempty"`
}

// ExecuteOutput is execute_python's structured result.
type ExecuteOutput struct {
	Success       bool              `json:"success"`
	Stdout        string            `json:"stdout"`
	Stderr        string            `json:"stderr"`
	Result        any               `json:"result"`
	ResultRepr    string            `json:"result_repr,omitempty"`
	Error         *ErrorInfo        `json:"error"`
	ExecutionTime float64           `json:"execution_time"`
	ExitCode      int               `json:"exit_code"`
	StdoutBytes   int64             `json:"stdout_bytes"`
	StderrBytes   int64             `json:"stderr_bytes"`
	Truncated     bool              `json:"truncated"`
	Images        []string          `json:"images,omitempty"`
	Notices       []string          `json:"notices,omitempty"`
	Rich          map[string]string `json:"rich,omitempty"`
	Backend       string            `json:"backend,omitempty"`
}

// conn names an MCP connection. Sessions belong to the connection that
// created them; the go-sdk session object is the identity (stdio sessions
// have no id string).
func (s *Server) conn(ss *mcp.ServerSession) string {
	if ss == nil {
		return "local"
	}
	if v, ok := s.conns.Load(ss); ok {
		return v.(string)
	}
	id := fmt.Sprintf("conn-%d", s.next.Add(1))
	if sid := ss.ID(); sid != "" {
		id += "-" + sid
	}
	v, _ := s.conns.LoadOrStore(ss, id)
	return v.(string)
}

func (s *Server) executePython(ctx context.Context, req *mcp.CallToolRequest, in ExecuteInput) (*mcp.CallToolResult, ExecuteOutput, error) {
	return s.execute(ctx, req, "python", in)
}

func (s *Server) execute(ctx context.Context, req *mcp.CallToolRequest, language string, in ExecuteInput) (*mcp.CallToolResult, ExecuteOutput, error) {
	res, err := s.eng.Execute(ctx, engine.Request{
		Language: language, Code: in.Code, SessionID: in.SessionID, Backend: in.Backend, Timeout: in.Timeout,
		CustomImage: in.CustomImage, Environment: in.Environment, MCPTools: in.MCPTools, Client: s.conn(req.Session),
	}, progress(ctx, req))
	if err != nil {
		var re *engine.RequestError
		msg, kind := err.Error(), "RequestError"
		if !errors.As(err, &re) {
			msg, kind = "MCP-Forge could not run the code: "+msg, "ServerError"
		}
		out := ExecuteOutput{Error: &ErrorInfo{Type: kind, Message: msg}}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, out, nil
	}
	out := toOutput(res)
	result := &mcp.CallToolResult{IsError: !res.Success, Content: []mcp.Content{&mcp.TextContent{Text: s.summary(language, res, out)}}}
	for _, im := range res.Images {
		result.Content = append(result.Content, &mcp.ImageContent{Data: im.Data, MIMEType: im.MIMEType})
	}
	return result, out, nil
}

func toOutput(r backend.ExecuteResult) ExecuteOutput {
	out := ExecuteOutput{
		Success: r.Success, Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode,
		ExecutionTime: r.Duration.Seconds(), StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		Notices: r.Notices, Rich: r.Rich, ResultRepr: r.ResultRepr,
		Truncated: r.StdoutBytes > int64(len(r.Stdout)) || r.StderrBytes > int64(len(r.Stderr)),
	}
	switch {
	case r.ResultJSON != "":
		var v any
		if json.Unmarshal([]byte(r.ResultJSON), &v) == nil {
			out.Result = v
		} else {
			out.Result = r.ResultRepr
		}
	case r.ResultRepr != "":
		out.Result = r.ResultRepr
	}
	if e := r.Error; e != nil {
		out.Error = &ErrorInfo{Type: e.Name, Message: e.Message, Line: e.Line, Column: e.Column, Traceback: e.Traceback}
	}
	for _, im := range r.Images {
		out.Images = append(out.Images, im.Name)
	}
	return out
}

// summary is the text an agent reads first.
func (s *Server) summary(language string, r backend.ExecuteResult, out ExecuteOutput) string {
	var b strings.Builder
	lang := engine.LanguageName(language)
	if r.Success {
		fmt.Fprintf(&b, "%s ran successfully in %.2f s.\n", lang, r.Duration.Seconds())
	} else if e := r.Error; e != nil {
		where := ""
		if e.Line > 0 {
			where = fmt.Sprintf(" (line %d)", e.Line)
		}
		fmt.Fprintf(&b, "%s failed%s: %s: %s\n", lang, where, e.Name, e.Message)
	} else {
		fmt.Fprintf(&b, "%s exited with code %d.\n", lang, r.ExitCode)
	}
	section := func(name, text string, total int64) {
		if text == "" {
			return
		}
		fmt.Fprintf(&b, "\n--- %s ---\n%s", name, text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteByte('\n')
		}
		if total > int64(len(text)) {
			fmt.Fprintf(&b, "[%s cut at %s: the program wrote %d bytes in all]\n", name, config.FormatSize(int64(len(text))), total)
		}
	}
	section("stdout", r.Stdout, r.StdoutBytes)
	section("stderr", r.Stderr, r.StderrBytes)
	if r.ResultRepr != "" {
		fmt.Fprintf(&b, "\n--- result ---\n%s\n", r.ResultRepr)
	}
	if e := r.Error; e != nil && len(e.Traceback) > 0 && !strings.Contains(r.Stderr, strings.TrimSpace(e.Traceback[len(e.Traceback)-1])) {
		fmt.Fprintf(&b, "\n--- traceback ---\n%s", strings.Join(e.Traceback, ""))
	}
	for _, n := range r.Notices {
		fmt.Fprintf(&b, "\nnote: %s\n", n)
	}
	if len(r.Images) > 0 {
		fmt.Fprintf(&b, "\n%d image(s) attached: %s\n", len(r.Images), strings.Join(out.Images, ", "))
	}
	return b.String()
}

func (s *Server) environment(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	type pluginInfo struct {
		Name       string   `json:"name"`
		Type       string   `json:"type"`
		Version    string   `json:"version"`
		APIVersion int      `json:"api_version"`
		Languages  []string `json:"languages"`
		Stateful   bool     `json:"stateful"`
		Checksum   string   `json:"checksum"`
		Error      string   `json:"error,omitempty"`
		Restarts   int      `json:"restarts,omitempty"`
	}
	var plugins []pluginInfo
	for _, p := range s.eng.Plugins().Statuses() {
		plugins = append(plugins, pluginInfo{Name: p.Name, Type: p.Type, Version: p.Version, APIVersion: p.APIVersion,
			Languages: p.Capabilities.Languages, Stateful: p.Capabilities.Stateful, Checksum: p.Checksum, Error: p.Error, Restarts: p.Restarts})
	}
	e := s.cfg.Execution
	info := map[string]any{
		"server": map[string]any{"name": "mcp-forge", "version": version.Version},
		"images": map[string]any{"python": s.cfg.Images.Python, "r": s.cfg.Images.R, "allowed": s.cfg.Images.Allowed},
		"limits": map[string]any{
			"default_timeout_s": e.DefaultTimeout, "max_timeout_s": e.MaxTimeout,
			"default_memory": e.DefaultMemory, "max_memory": e.MaxMemory,
			"default_cpu_quota": e.DefaultCPUQuota, "max_cpu_quota": e.MaxCPUQuota,
			"default_pids": e.DefaultPids, "max_output": e.MaxOutput, "max_image_size": e.MaxImageSize,
		},
		"security":        map[string]any{"network": s.cfg.Security.AllowNetwork, "read_only_root": true, "user": s.cfg.Security.SandboxUser, "userns": s.cfg.Security.UserNS},
		"plugins":         plugins,
		"sessions":        s.eng.Sessions(s.conn(req.Session), false),
		"default_backend": e.DefaultBackend,
	}
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: EnvironmentURI, MIMEType: "application/json", Text: string(data)}}}, nil
}

// progress forwards a session's output as MCP progress notifications when
// the client asked for progress.
func progress(ctx context.Context, req *mcp.CallToolRequest) func(backend.StreamEvent) {
	if req == nil || req.Session == nil || req.Params == nil {
		return nil
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil
	}
	n := 0.0
	return func(ev backend.StreamEvent) {
		n++
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: ev.Name + ": " + ev.Text})
	}
}

var toolName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,40}$`)

// addLanguageTools gives every other language a loaded backend runs its own
// execute_<language> tool, so a third-party backend plugin is reachable
// without any change to the core.
func (s *Server) addLanguageTools() {
	seen := map[string]bool{"python": true, "r": true}
	for _, p := range s.eng.Plugins().Statuses() {
		for _, lang := range p.Capabilities.Languages {
			if seen[lang] || !toolName.MatchString(lang) {
				continue
			}
			seen[lang] = true
			mcp.AddTool(s.mcp, &mcp.Tool{
				Name:         "execute_" + lang,
				Title:        "Run " + lang + " in a sandbox",
				OutputSchema: outputSchema(),
				Description:  fmt.Sprintf("Run %s code in a sandboxed container through the %s plugin (%s); session_id keeps state if the backend is stateful.", lang, p.Name, p.Version),
			}, func(ctx context.Context, req *mcp.CallToolRequest, in ExecuteInput) (*mcp.CallToolResult, ExecuteOutput, error) {
				return s.execute(ctx, req, lang, in)
			})
		}
	}
}
