// Package mcpserver is the MCP face of MCP-Forge: typed tools and resources
// over the modelcontextprotocol/go-sdk. It talks to the engine through the
// interfaces it defines (deps.go), never to the runtime, and knows no
// language: every execute_<language> tool comes from what the loaded
// backends report.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/answer"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/environments"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/route"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/core/version"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// EnvironmentURI is the resource describing images, limits and plugins.
const EnvironmentURI = "mcp://forge/environment/info"

// Server holds the MCP server and what its handlers need.
type Server struct {
	mcp       *mcp.Server
	exec      Executor
	sessions  Sessions
	files     Files
	ckpts     Checkpoints
	notebooks Notebooks
	jobs      Jobs
	inv       Inventory
	cfg       config.Config

	conns sync.Map // *mcp.ServerSession → connection id
	next  atomic.Int64

	// Custom environments (environments.go): the service, or why there is none.
	envs       *environments.Service
	envsReason string
	identified bool // SetIdentity was called: callers are tenants

	// The approval questions asked and not yet answered (approvals.go).
	questions questions

	noSubscriptions string // why resources/subscribe is refused (jobs.go); "": allowed
}

// New builds the MCP server: an execute_<language> tool for every language
// the engine offers, the session tools and the resources. log hears of
// answers that had to be cut to server.max_message.
func New(eng Engine, cfg config.Config, log hclog.Logger) *Server {
	s := &Server{exec: eng, sessions: eng, files: eng, ckpts: eng, notebooks: eng, jobs: eng, inv: eng, cfg: cfg}
	langs := eng.Languages()
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "mcp-forge", Title: "MCP-Forge", Version: version.Version},
		&mcp.ServerOptions{Instructions: instructions(langs, cfg),
			SubscribeHandler:   s.subscribe, // jobs.go
			UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil }})
	s.mcp.AddReceivingMiddleware(checkURIs, s.auditRejectedArguments)
	// Added last, so outermost: it measures the answer every other
	// middleware returns.
	guard := answer.Guard{Limit: int(cfg.Server.MaxMessage), Log: log}
	s.mcp.AddReceivingMiddleware(guard.Receiving)
	s.mcp.AddSendingMiddleware(guard.Sending)
	in, out := s.executeInputSchema(), schemaFor[ExecuteOutput]()
	for _, l := range langs {
		addTool(s.mcp, &mcp.Tool{
			Name:         "execute_" + l.ID,
			Title:        "Run " + l.Name + " in a sandbox",
			Description:  describe(l, cfg),
			InputSchema:  in,
			OutputSchema: out,
		}, func(ctx context.Context, req *mcp.CallToolRequest, in ExecuteInput) (*mcp.CallToolResult, ExecuteOutput, error) {
			return s.execute(ctx, req, l.ID, in)
		})
	}
	s.addSessionTools()
	s.addFileTools()     // files.go
	s.addNotebookTools() // notebook.go
	s.addJobTools()      // jobs.go
	if cfg.EnvironmentBuilder.Enabled {
		s.envsReason = "the environment service was not set up"
		s.addEnvironmentTools() // environments.go
	}
	s.mcp.AddResource(&mcp.Resource{
		URI: EnvironmentURI, Name: "environment", Title: "Sandbox environment",
		Description: "Languages and their backends, images, resource limits, loaded plugins with their versions, and this connection's sessions", MIMEType: "application/json",
	}, s.environment)
	s.mcp.AddResource(&mcp.Resource{
		URI: ToolsURI, Name: "tools-available", Title: "MCP tools callable from sandbox code",
		Description: "The MCP servers configured under mcp_tools, their tools with input and output schemas, and the policy of each tool (allow, deny, approve); grant them to a run with mcp_tools", MIMEType: "application/json",
	}, s.toolsAvailable)
	return s
}

// ToolsURI is the resource listing the tools sandbox code may be granted.
const ToolsURI = "mcp://forge/tools/available"

// approver asks the client of ss to approve a tool call, for the tool
// bridge's "approve" policy.
func approver(ss *mcp.ServerSession) toolbridge.Approver {
	if ss == nil {
		return nil
	}
	return func(ctx context.Context, message string) (bool, bool, error) { return Confirm(ctx, ss, message) }
}

func (s *Server) toolsAvailable(ctx context.Context, _ *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	var v any
	if t, why := s.inv.Tools(); t != nil {
		v = t.Available(ctx)
	} else {
		if why == "" {
			why = "no bridge plugin is loaded"
		}
		v = map[string]any{"servers": []any{}, "tools": []any{}, "unavailable": why}
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: ToolsURI, MIMEType: "application/json", Text: string(data)}}}, nil
}

// MCP is the underlying go-sdk server (for transports).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves on the transport until the client disconnects or ctx ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error { return s.mcp.Run(ctx, t) }

// instructions tell an agent what the server offers, from what is loaded.
func instructions(langs []route.Language, cfg config.Config) string {
	var tools []string
	sessions := false
	for _, l := range langs {
		tools = append(tools, fmt.Sprintf("execute_%s (%s)", l.ID, nameVersion(l)))
		sessions = sessions || l.Session.Backend != ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "MCP-Forge runs code in sandboxed Podman containers: %s, a read-only filesystem except /tmp and the working directory, resource limits and a timeout.\n", network(cfg))
	if len(tools) == 0 {
		b.WriteString("No backend plugin is loaded, so no language can run; the operator should run `mcp-forge doctor`.\n")
	} else {
		fmt.Fprintf(&b, "Tools: %s. Pass code; stdout and stderr come back separately, and the value of the last expression as result (JSON text) and result_repr (its printed form). Images the code produces come back as image content.\n", strings.Join(tools, ", "))
	}
	if sessions {
		fmt.Fprintf(&b, "Pass a session_id to keep state across calls (one kernel per session); document_state attaches notes to a session's variables, readable at %s.\n", StateTemplate)
		b.WriteString(fileInstructions) // files.go
	}
	if len(tools) > 0 {
		b.WriteString("For work longer than a call should wait, pass background: true: the call answers with a job_id at once; wait_job, list_jobs, cancel_job and mcp://forge/jobs/{id} follow it.\n")
	}
	if cfg.EnvironmentBuilder.Enabled && len(tools) > 0 {
		fmt.Fprintf(&b, "build_environment makes an image mcp-forge/custom:<name> with extra packages; pass it as custom_image to run code in it (%s lists yours and the templates).\n", EnvironmentsURI)
	}
	fmt.Fprintf(&b, "Read %s for the backends, images, limits and your sessions.", EnvironmentURI)
	return b.String()
}

func network(cfg config.Config) string {
	if cfg.Security.AllowNetwork {
		return "network access as the operator allowed"
	}
	return "no network"
}

// nameVersion is "Python 3.11.2" when the backend reports a version.
func nameVersion(l route.Language) string {
	for _, o := range []route.Offer{l.Stateless, l.Session} {
		if v := o.Capabilities.LanguageVersion; v != "" {
			return l.Name + " " + v
		}
	}
	return l.Name
}

// describe writes an execute tool's description from what its backends
// report, so that it holds for the images in use.
func describe(l route.Language, cfg config.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s code in a sandboxed container (%s; memory, CPU and a %d s default time limit).", l.Name, network(cfg), cfg.Execution.DefaultTimeout)
	offer := func(label string, o route.Offer) {
		if o.Backend == "" {
			fmt.Fprintf(&b, "\n\n%s: unavailable: %s", label, o.Unavailable)
			return
		}
		c := o.Capabilities
		fmt.Fprintf(&b, "\n\n%s: the %s backend runs %s", label, o.Backend, l.Name)
		if c.LanguageVersion != "" {
			fmt.Fprintf(&b, " %s", c.LanguageVersion)
		}
		if c.Image != "" {
			fmt.Fprintf(&b, " in image %s", c.Image)
		}
		if len(c.Packages) > 0 {
			fmt.Fprintf(&b, " with %s", strings.Join(c.Packages, ", "))
		}
		b.WriteString(".")
		if c.Description != "" {
			b.WriteString(" " + c.Description)
		}
	}
	offer("Without session_id", l.Stateless)
	offer("With session_id (state kept across calls)", l.Session)
	b.WriteString("\n\nStructured result: success, stdout, stderr (each cut where its JSON text reaches execution.max_output; *_bytes give the full size; " +
		"together over 64 KiB they are sent once, in the text content, with output_in_text), " +
		"result (the final expression's value as JSON text, when it has a JSON form), result_repr (its printed form), " +
		"error {type, message, line, traceback}, execution_time (s), exit_code, images, notices, backend.")
	return b.String()
}

// ExecuteInput is the input of every execute_<language> tool.
type ExecuteInput struct {
	Code        string            `json:"code" jsonschema:"source to run. The value of the last expression is returned as result."`
	SessionID   string            `json:"session_id,omitempty"`
	Backend     string            `json:"backend,omitempty"`
	Timeout     int               `json:"timeout,omitempty"`
	CustomImage string            `json:"custom_image,omitempty"`
	Environment map[string]string `json:"environment,omitempty"`
	MCPTools    []string          `json:"mcp_tools,omitempty" jsonschema:"MCP tools the code may call: a configured server (every tool its policy allows) or server.tool; see mcp://forge/tools/available (needs a bridge plugin)"`
	InputFiles  []InputFileInput  `json:"input_files,omitempty"`
	Network     []string          `json:"network,omitempty"`
	Background  bool              `json:"background,omitempty"`
}

// InputFileInput is one input file of a stateless run: uploaded (content)
// or copied from one of the caller's sessions (from_session).
type InputFileInput struct {
	Path        string `json:"path" jsonschema:"where the code finds the file, relative to its working directory (no '..', not absolute)"`
	Content     string `json:"content,omitempty" jsonschema:"the file's content (an upload), as text or base64 (encoding)"`
	Encoding    string `json:"encoding,omitempty" jsonschema:"text (default) or base64"`
	FromSession string `json:"from_session,omitempty" jsonschema:"copy the file from this session of yours instead (its working directory)"`
	SourcePath  string `json:"source_path,omitempty" jsonschema:"the file's path in from_session's working directory; default: path"`
}

// executeInputSchema is ExecuteInput's schema with the limits of this
// configuration in its descriptions.
func (s *Server) executeInputSchema() *jsonschema.Schema {
	sch := schemaFor[ExecuteInput]()
	e := s.cfg.Execution
	desc := map[string]string{
		"session_id": fmt.Sprintf("run in this stateful session, created on first use and kept across calls (removed after %d s idle); "+
			"1-%d letters, digits, '-' or '_'. Omit for a fresh container per call.", s.cfg.Sessions.IdleTimeout, workspace.MaxSessionID),
		"backend":      "the backend plugin to use (see " + EnvironmentURI + "); default: the configured or only backend for the language and mode",
		"timeout":      fmt.Sprintf("wall-clock limit in seconds; default %d, at most %d", e.DefaultTimeout, e.MaxTimeout),
		"custom_image": fmt.Sprintf("run in this image instead of the backend's (it must match one of %s)", strings.Join(s.cfg.Images.Allowed, ", ")),
		"input_files": fmt.Sprintf("stateless runs only (without session_id): files placed read-only in the run's working directory, each uploaded in this call "+
			"(path, content, encoding) or copied from a session of yours (path, from_session, source_path); each at most %s (volumes.max_file_size), "+
			"at most %d files", s.cfg.Volumes.MaxFileSize, 100),
		"background": fmt.Sprintf("run as a background job and answer at once with its job_id: for work longer than a client waits. "+
			"Follow it with wait_job, list_jobs or %s, stop it with cancel_job; its timeout defaults to %d s, at most %d s (execution.max_background_timeout). "+
			"A job in a session holds the session until it ends (other calls in it are refused)", JobTemplate, s.cfg.Jobs.DefaultTimeout, e.MaxBackgroundTimeout),
		"network": networkDescription(s.cfg.Network),
		"environment": fmt.Sprintf("environment variables for the code: names of letters, digits and '_' (not FORGE_*), values without NUL bytes, "+
			"each at most %s, all together at most %s; a session takes them when it starts", e.MaxEnvValue, e.MaxEnvTotal),
	}
	for k, d := range desc {
		sch.Properties[k].Description = d
	}
	return sch
}

// networkDescription says what a run may ask for under this policy.
func networkDescription(n config.Network) string {
	allowed := "none: the operator allows no host ([network] allowed_hosts)"
	if len(n.AllowedHosts) > 0 {
		allowed = strings.Join(n.AllowedHosts, ", ")
	}
	if len(n.Tenants) > 0 {
		allowed += " (and a tenant's own)"
	}
	return "hosts the code may reach over HTTP and HTTPS (a session takes them on its first call and keeps them), e.g. [\"files.example.org\", \"api.example.org:443\"] " +
		"(no port: every port the policy allows, else 80 and 443). Ordinary code works unchanged (HTTP_PROXY and HTTPS_PROXY are set: urllib, requests, pip, uv, " +
		"R's download.file and curl); nothing else is reachable. Allowed: " + allowed
}

// ErrorInfo is a failure: of the user's code (type is the language's error
// name), or of the request (RequestError: fix the call) or of MCP-Forge
// itself (ServerError).
type ErrorInfo struct {
	Type      string   `json:"type"`
	Message   string   `json:"message"`
	Line      int      `json:"line,omitempty" jsonschema:"1-based line in your code"`
	Column    int      `json:"column,omitempty"`
	Traceback []string `json:"traceback,omitempty"`
}

// ExecuteOutput is the structured result of every execute_<language> tool.
type ExecuteOutput struct {
	Success       bool              `json:"success" jsonschema:"the code ran to its end without an error (with background: the job was started)"`
	Stdout        string            `json:"stdout"`
	Stderr        string            `json:"stderr"`
	Result        string            `json:"result,omitempty" jsonschema:"the value of the final expression as JSON text (parse it), present when the value has a JSON form"`
	ResultRepr    string            `json:"result_repr,omitempty" jsonschema:"the value of the final expression as the language prints it"`
	Error         *ErrorInfo        `json:"error,omitempty"`
	ExecutionTime float64           `json:"execution_time" jsonschema:"seconds"`
	ExitCode      int               `json:"exit_code"`
	StdoutBytes   int64             `json:"stdout_bytes" jsonschema:"bytes written to stdout, including any cut from the returned text"`
	StderrBytes   int64             `json:"stderr_bytes" jsonschema:"bytes written to stderr, including any cut from the returned text"`
	Truncated     bool              `json:"truncated" jsonschema:"stdout or stderr was cut"`
	Images        []string          `json:"images,omitempty" jsonschema:"names of the images attached as image content"`
	Notices       []string          `json:"notices,omitempty"`
	Rich          map[string]string `json:"rich,omitempty" jsonschema:"other output by MIME type, e.g. text/html"`
	Backend       string            `json:"backend,omitempty" jsonschema:"the backend plugin that ran the code"`
	Files         []OutputFileRef   `json:"files,omitempty" jsonschema:"files a session run wrote to output/ in its working directory: small ones attached as embedded resources, larger ones as resource links"`
	JobID         string            `json:"job_id,omitempty" jsonschema:"with background: the job started (wait_job, cancel_job, mcp://forge/jobs/{id})"`
	JobState      string            `json:"job_state,omitempty" jsonschema:"with background: the job's state when the call answered"`
	OutputInText  bool              `json:"output_in_text,omitempty" jsonschema:"stdout and stderr were too large to send twice: they are in the text content only, and stdout and stderr here are empty"`
}

// TwiceLimit is how much output (stdout and stderr together, counted as
// JSON) an answer carries twice, in its text and in its structured
// content; larger output goes once, in the text the agent reads.
const TwiceLimit = 64 << 10

// once leaves large output to the text content alone: sent twice, 1 MiB of
// output made a message twice its size.
func once(out *ExecuteOutput) {
	if sanitize.JSONLen(out.Stdout)+sanitize.JSONLen(out.Stderr) > TwiceLimit {
		out.Stdout, out.Stderr, out.OutputInText = "", "", true
	}
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

// failure is a tool result for an error the engine returned: a refusal the
// caller can fix, or a failure of the server.
func failure(err error) (*mcp.CallToolResult, *ErrorInfo) {
	var re *refusal.Error
	var qe *tenant.QuotaError
	info := &ErrorInfo{Type: "RequestError", Message: err.Error()}
	switch {
	case errors.As(err, &qe): // a tenant's quota, asked by the engine (max_sessions)
		info.Type = "QuotaExceeded"
	case !errors.As(err, &re):
		info.Type, info.Message = "ServerError", "MCP-Forge could not do it: "+err.Error()
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: info.Message}}}, info
}

func (s *Server) execute(ctx context.Context, req *mcp.CallToolRequest, language string, in ExecuteInput) (*mcp.CallToolResult, ExecuteOutput, error) {
	if s.envs != nil && in.CustomImage != "" {
		// A custom environment runs only for its client.
		if err := s.envs.CheckUse(ctx, s.client(req.Session), in.CustomImage); err != nil {
			result, info := envFailure(err)
			return result, ExecuteOutput{Error: info}, nil
		}
	}
	ereq := engine.Request{
		Language: language, Code: in.Code, SessionID: in.SessionID, Backend: in.Backend, Timeout: in.Timeout,
		CustomImage: in.CustomImage, Environment: in.Environment, MCPTools: in.MCPTools, Client: s.conn(req.Session),
		Approve:    approver(req.Session),
		InputFiles: inputFiles(in.InputFiles),
		Network:    in.Network,
	}
	if in.Background {
		return s.startJob(ctx, req, ereq) // jobs.go
	}
	emit, stop := progress(ctx, req, time.Duration(s.cfg.Execution.ProgressInterval)*time.Second)
	res, err := s.exec.Execute(ctx, ereq, emit)
	stop()
	if err != nil {
		result, info := failure(err)
		return result, ExecuteOutput{Error: info, Backend: res.Backend}, nil
	}
	out := toOutput(res)
	result := &mcp.CallToolResult{IsError: !res.Success, Content: []mcp.Content{&mcp.TextContent{Text: s.summary(language, res, out)}}}
	for _, im := range res.Images {
		result.Content = append(result.Content, &mcp.ImageContent{Data: im.Data, MIMEType: im.MIMEType})
	}
	s.addOutputFiles(result, &out, in.SessionID, res.Files) // files.go
	once(&out)
	return result, out, nil
}

func toOutput(r engine.Result) ExecuteOutput {
	out := ExecuteOutput{
		Success: r.Success, Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode,
		ExecutionTime: r.Duration.Seconds(), StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		Notices: r.Notices, Rich: r.Rich, ResultRepr: r.ResultRepr, Backend: r.Backend,
		Truncated: r.StdoutBytes > int64(len(r.Stdout)) || r.StderrBytes > int64(len(r.Stderr)),
	}
	if r.ResultJSON != "" && json.Valid([]byte(r.ResultJSON)) {
		out.Result = r.ResultJSON
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
func (s *Server) summary(language string, r engine.Result, out ExecuteOutput) string {
	var b strings.Builder
	lang := s.exec.LanguageName(language)
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
			fmt.Fprintf(&b, "[%s cut at %s (execution.max_output, counted as JSON text): the program wrote %d bytes in all, %d are here]\n", name, s.cfg.Execution.MaxOutput, total, len(text))
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
		Name            string   `json:"name"`
		Type            string   `json:"type"`
		Version         string   `json:"version"`
		APIVersion      int      `json:"api_version"`
		Languages       []string `json:"languages"`
		Stateful        bool     `json:"stateful"`
		Image           string   `json:"image,omitempty"`
		DefaultImage    string   `json:"default_image,omitempty"`
		LanguageVersion string   `json:"language_version,omitempty"`
		Packages        []string `json:"packages,omitempty"`
		Checksum        string   `json:"checksum"`
		Error           string   `json:"error,omitempty"`
		Restarts        int      `json:"restarts,omitempty"`
		WarmPool        any      `json:"warm_pool,omitempty"`
	}
	plugins := []pluginInfo{}
	images := map[string][]string{} // image → backends that run it
	for _, p := range s.inv.PluginStatuses() {
		c := p.Capabilities
		plugins = append(plugins, pluginInfo{Name: p.Name, Type: string(p.Type), Version: p.Version, APIVersion: p.APIVersion,
			Languages: c.Languages, Stateful: c.Stateful, Image: c.Image, DefaultImage: c.DefaultImage, LanguageVersion: c.LanguageVersion,
			Packages: c.Packages, Checksum: p.Checksum, Error: p.Error, Restarts: p.Restarts})
		if w := s.inv.WarmPool(ctx, p); w != nil {
			plugins[len(plugins)-1].WarmPool = map[string]any{"size": w.Size, "max_size": w.MaxSize, "target": w.Target, "grown": w.Grown, "shrunk": w.Shrunk, "memory_cap": w.MemoryCap, "warm": w.Warm, "starting": w.Starting,
				"in_use": w.InUse, "hits": w.Hits, "misses": w.Misses, "refills": w.Refills, "failures": w.Failures, "retired": w.Retired,
				"last_refill_ms": w.LastRefill.Milliseconds(), "mean_refill_ms": w.MeanRefill.Milliseconds(), "last_failure": w.LastFailure}
		}
		if c.Image != "" {
			images[c.Image] = append(images[c.Image], p.Name)
		}
	}
	type offer struct {
		Backend     string `json:"backend,omitempty"`
		Unavailable string `json:"unavailable,omitempty"`
	}
	languages := map[string]any{}
	for _, l := range s.exec.Languages() {
		languages[l.ID] = map[string]any{"name": l.Name,
			"stateless": offer{l.Stateless.Backend, l.Stateless.Unavailable}, "session": offer{l.Session.Backend, l.Session.Unavailable}}
	}
	e := s.cfg.Execution
	info := map[string]any{
		"server":    map[string]any{"name": "mcp-forge", "version": version.Version},
		"languages": languages,
		"images":    map[string]any{"in_use": images, "allowed": s.cfg.Images.Allowed},
		"limits": map[string]any{
			"default_timeout_s": e.DefaultTimeout, "max_timeout_s": e.MaxTimeout,
			"default_memory": e.DefaultMemory, "max_memory": e.MaxMemory,
			"default_cpu_quota": e.DefaultCPUQuota, "max_cpu_quota": e.MaxCPUQuota,
			"default_pids": e.DefaultPids, "max_output": e.MaxOutput, "max_image_size": e.MaxImageSize,
			"max_code_size": e.MaxCodeSize, "max_env_value": e.MaxEnvValue, "max_env_total": e.MaxEnvTotal,
			"max_sessions": s.cfg.Sessions.MaxConcurrent, "session_idle_timeout_s": s.cfg.Sessions.IdleTimeout,
		},
		"security":    map[string]any{"network": s.cfg.Security.AllowNetwork, "read_only_root": true, "user": s.cfg.Security.SandboxUser, "userns": s.cfg.Security.UserNS},
		"plugins":     plugins,
		"sessions":    sessionViews(s.sessions.Sessions(s.conn(req.Session), false)),
		"checkpoints": checkpointInfos(s.ckpts.Checkpoints(s.conn(req.Session))),
		// Kernels taken warm from a backend's pool or started cold.
		"session_starts": startStats(s.sessions.SessionStartStats()),
	}
	if t, why := s.inv.Tools(); t != nil {
		info["tool_bridge"] = t.Health(ctx)
	} else if len(s.cfg.MCPTools) > 0 || why != "" {
		info["tool_bridge"] = map[string]any{"unavailable": why}
	}
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: EnvironmentURI, MIMEType: "application/json", Text: string(data)}}}, nil
}

// progress forwards a run's output as MCP progress notifications when the
// client asked for progress (a progressToken), and sends a keep-alive
// whenever nothing was sent for interval, so that a client that resets its
// request timeout on progress keeps waiting for a long run, a stateless one
// too (a stateless backend streams its output only if it implements
// backend.StreamingBackend; otherwise it comes with the result alone).
// stop ends the keep-alive; it must be called before the answer goes back,
// so no progress follows it.
func progress(ctx context.Context, req *mcp.CallToolRequest, interval time.Duration) (emit func(backend.StreamEvent), stop func()) {
	if req == nil || req.Session == nil || req.Params == nil {
		return nil, func() {}
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil, func() {}
	}
	if interval <= 0 { // a configuration built without config.Default
		interval = 10 * time.Second
	}
	p := &progressor{ctx: ctx, ss: req.Session, token: token, start: time.Now()}
	p.last = p.start
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.keepAlive(interval, done)
	}()
	return func(ev backend.StreamEvent) { p.send(string(ev.Name) + ": " + ev.Text) },
		func() { close(done); wg.Wait() }
}

// progressor numbers one call's progress notifications (Progress must
// increase) and remembers when the last one went out.
type progressor struct {
	ctx   context.Context
	ss    *mcp.ServerSession
	token any
	start time.Time

	mu   sync.Mutex // held while sending: notifications go out in order
	n    float64
	last time.Time
}

func (p *progressor) send(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.last = time.Now()
	_ = p.ss.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: p.n, Message: msg})
}

// keepAlive sends a notification each time interval passes since the last
// one, until done is closed or the call's context ends.
func (p *progressor) keepAlive(interval time.Duration, done <-chan struct{}) {
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		wait := time.Until(p.last.Add(interval))
		p.mu.Unlock()
		if wait <= 0 {
			p.send(fmt.Sprintf("running: %.0f s", time.Since(p.start).Seconds()))
			wait = interval
		}
		t.Reset(wait)
	}
}

func inputFiles(in []InputFileInput) []engine.InputFile {
	if len(in) == 0 {
		return nil
	}
	out := make([]engine.InputFile, len(in))
	for i, f := range in {
		out[i] = engine.InputFile{Path: f.Path, Content: f.Content, Encoding: f.Encoding, FromSession: f.FromSession, SourcePath: f.SourcePath}
	}
	return out
}
