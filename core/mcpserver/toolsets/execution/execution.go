// Package execution is the execute_<language> toolset: one tool for every
// language the loaded backends offer, described from what they report, and
// the result of a run as every tool that returns one gives it (jobs too).
package execution

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/jobs"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/environments"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/files"
	"github.com/mcp-forge/mcp-forge/core/route"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// Executor runs the execute_<language> tools and says what they offer.
type Executor interface {
	Execute(ctx context.Context, req engine.Request, emit func(backend.StreamEvent)) (engine.Result, error)
	Languages() []route.Language
	LanguageName(language string) string
}

// Starter starts a run as a background job (background: true).
type Starter interface {
	StartJob(ctx context.Context, req engine.Request) (jobs.Record, error)
}

// Deps is what the execute tools need of the core.
type Deps struct {
	Exec   Executor
	Jobs   Starter
	Builds *environments.Builds // the custom environments custom_image names
}

type tools struct {
	Deps
	env toolsets.Env
}

// Toolset is an execute_<language> tool for every language d.Exec offers.
func Toolset(env toolsets.Env, d Deps) toolsets.Toolset {
	ts := toolsets.Toolset{Name: "execution"}
	in := InputSchema(env.Cfg)
	for _, l := range d.Exec.Languages() {
		ts.Tools = append(ts.Tools, Execute(env, d, l, in))
	}
	return ts
}

// Execute is the tool that runs code of language l; in is its input
// schema (InputSchema, shared by every language).
func Execute(env toolsets.Env, d Deps, l route.Language, in *jsonschema.Schema) toolsets.Tool {
	t := tools{Deps: d, env: env}
	return toolsets.New(&mcp.Tool{
		Name:        "execute_" + l.ID,
		Title:       "Run " + l.Name + " in a sandbox",
		Meta:        toolsets.ViewMeta(),
		Description: describe(l, env.Cfg),
		InputSchema: in,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in Input) (*mcp.CallToolResult, Output, error) {
		return t.execute(ctx, req, l.ID, in)
	})
}

// Network says what the sandbox may reach.
func Network(cfg config.Config) string {
	if cfg.Security.AllowNetwork {
		return "network access as the operator allowed"
	}
	return "no network"
}

// describe writes an execute tool's description from what its backends
// report, so that it holds for the images in use.
func describe(l route.Language, cfg config.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s code in a sandboxed container (%s; memory, CPU and a %d s default time limit).", l.Name, Network(cfg), cfg.Execution.DefaultTimeout)
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

// Input is the input of every execute_<language> tool.
type Input struct {
	Code        string            `json:"code" jsonschema:"source to run. The value of the last expression is returned as result."`
	SessionID   string            `json:"session_id,omitempty"`
	Backend     string            `json:"backend,omitempty"`
	Timeout     int               `json:"timeout,omitempty"`
	CustomImage string            `json:"custom_image,omitempty"`
	Environment map[string]string `json:"environment,omitempty"`
	MCPTools    []string          `json:"mcp_tools,omitempty" jsonschema:"MCP tools the code may call: a configured server (every tool its policy allows) or server.tool; see mcp://forge/tools/available (needs a bridge plugin)"`
	InputFiles  []InputFileInput  `json:"input_files,omitempty"`
	Network     []string          `json:"network,omitempty"`
	Credentials []string          `json:"credentials,omitempty"`
	HostRoots   []string          `json:"host_roots,omitempty"`
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
	URL         string `json:"url,omitempty" jsonschema:"or an https:// URL the server fetches for the run (its host must be one the network policy lets you reach, as in network), its bytes not passing through this conversation"`
}

// InputSchema is Input's schema with the limits of cfg in its
// descriptions.
func InputSchema(cfg config.Config) *jsonschema.Schema {
	sch := toolsets.Schema[Input]()
	e := cfg.Execution
	desc := map[string]string{
		"session_id": fmt.Sprintf("run in this stateful session, created on first use and kept across calls (removed after %d s idle); "+
			"1-%d letters, digits, '-' or '_'. Omit for a fresh container per call.", cfg.Sessions.IdleTimeout, workspace.MaxSessionID),
		"backend":      "the backend plugin to use (see " + toolsets.EnvironmentURI + "); default: the configured or only backend for the language and mode",
		"timeout":      fmt.Sprintf("wall-clock limit in seconds; default %d, at most %d", e.DefaultTimeout, e.MaxTimeout),
		"custom_image": fmt.Sprintf("run in this image instead of the backend's (it must match one of %s)", strings.Join(cfg.Images.Allowed, ", ")),
		"input_files": fmt.Sprintf("stateless runs only (without session_id): files placed read-only in the run's working directory, each uploaded in this call "+
			"(path, content, encoding), copied from a session of yours (path, from_session, source_path) or fetched by the server (path, url); each at most %s (volumes.max_file_size), "+
			"at most %d files", cfg.Volumes.MaxFileSize, 100),
		"background": fmt.Sprintf("run as a background job and answer at once with its job_id: for work longer than a client waits. "+
			"Follow it with wait_job, list_jobs or %s, stop it with cancel_job; its timeout defaults to %d s, at most %d s (execution.max_background_timeout). "+
			"A job in a session holds the session until it ends (other calls in it are refused)", toolsets.JobTemplate, cfg.Jobs.DefaultTimeout, e.MaxBackgroundTimeout),
		"network":     networkDescription(cfg.Network),
		"credentials": credentialsDescription(cfg),
		"host_roots":  hostRootsDescription(cfg.Volumes.HostRoots),
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

// credentialsDescription names the credentials a run may ask for, with
// their hosts, never a value.
func credentialsDescription(cfg config.Config) string {
	var list []string
	for _, name := range slices.Sorted(maps.Keys(cfg.Network.Credentials)) {
		list = append(list, name+" ("+strings.Join(cfg.Network.Credentials[name].Hosts, ", ")+")")
	}
	tenants := false
	for _, t := range cfg.Tenants {
		tenants = tenants || len(t.Credentials) > 0
	}
	return "credentials the egress proxy adds to the code's HTTPS requests to their hosts (which are granted with them, like network): the code never sees a value, " +
		"only a placeholder in FORGE_CREDENTIAL_<NAME> (send it where the API expects its key, e.g. Authorization: Bearer $FORGE_CREDENTIAL_GITHUB; the proxy replaces it). " +
		"A session takes them on its first call. Available: " + available(list, "; ", tenants, "", "[network.credentials]")
}

// available says what a description offers: the list, that tenants have
// their own, or that none is configured (in section).
func available(list []string, sep string, tenants bool, yours, section string) string {
	out := "none is configured (" + section + ")"
	if len(list) > 0 {
		out = strings.Join(list, sep)
	}
	if tenants {
		out += " (and a tenant's own" + yours + ")"
	}
	return out
}

// hostRootsDescription names the host roots a run may mount.
func hostRootsDescription(roots map[string]config.HostRoot) string {
	var local []string
	tenants := false
	for _, name := range slices.Sorted(maps.Keys(roots)) {
		if len(roots[name].Tenants) == 0 {
			local = append(local, name)
		} else {
			tenants = true
		}
	}
	return "host roots, the user's directories the operator allows, mounted read-only at /mnt/<name> in the sandbox: the code reads their files where they lie " +
		"(pandas.read_csv(\"/mnt/data/big.csv\")), their bytes never passing through this conversation, and cannot change them; it reads what any user of the machine may read. " +
		"A session takes them on its first call and keeps them. To keep a result, write it in the session and export_file it into a writable root. Available: " +
		available(local, ", ", tenants, ": list_host_files lists yours", "[volumes.host_roots]")
}

// Output is the structured result of every execute_<language> tool.
type Output struct {
	Success       bool                  `json:"success" jsonschema:"the code ran to its end without an error (with background: the job was started)"`
	Stdout        string                `json:"stdout"`
	Stderr        string                `json:"stderr"`
	Result        string                `json:"result,omitempty" jsonschema:"the value of the final expression as JSON text (parse it), present when the value has a JSON form"`
	ResultRepr    string                `json:"result_repr,omitempty" jsonschema:"the value of the final expression as the language prints it"`
	Error         *toolsets.ErrorInfo   `json:"error,omitempty"`
	ExecutionTime float64               `json:"execution_time" jsonschema:"seconds"`
	ExitCode      int                   `json:"exit_code"`
	StdoutBytes   int64                 `json:"stdout_bytes" jsonschema:"bytes written to stdout, including any cut from the returned text"`
	StderrBytes   int64                 `json:"stderr_bytes" jsonschema:"bytes written to stderr, including any cut from the returned text"`
	Truncated     bool                  `json:"truncated" jsonschema:"stdout or stderr was cut"`
	Images        []string              `json:"images,omitempty" jsonschema:"names of the images attached as image content"`
	Notices       []string              `json:"notices,omitempty"`
	Rich          map[string]string     `json:"rich,omitempty" jsonschema:"other output by MIME type, e.g. text/html"`
	Backend       string                `json:"backend,omitempty" jsonschema:"the backend plugin that ran the code"`
	Isolation     string                `json:"isolation,omitempty" jsonschema:"the kernel the code talked to: container (the host's, behind seccomp and namespaces) or gvisor (gVisor's, a second kernel in between)"`
	Files         []files.OutputFileRef `json:"files,omitempty" jsonschema:"files a session run wrote to output/ in its working directory: small ones attached as embedded resources, larger ones as resource links"`
	JobID         string                `json:"job_id,omitempty" jsonschema:"with background: the job started (wait_job, cancel_job, mcp://forge/jobs/{id})"`
	JobState      string                `json:"job_state,omitempty" jsonschema:"with background: the job's state when the call answered"`
	OutputInText  bool                  `json:"output_in_text,omitempty" jsonschema:"stdout and stderr were too large to send twice: they are in the text content only, and stdout and stderr here are empty"`
}

// TwiceLimit is how much output (stdout and stderr together, counted as
// JSON) an answer carries twice, in its text and in its structured
// content; larger output goes once, in the text the agent reads.
const TwiceLimit = 64 << 10

// Once leaves large output to the text content alone: sent twice, 1 MiB of
// output made a message twice its size.
func Once(out *Output) {
	if sanitize.JSONLen(out.Stdout)+sanitize.JSONLen(out.Stderr) > TwiceLimit {
		out.Stdout, out.Stderr, out.OutputInText = "", "", true
	}
}

func (t tools) execute(ctx context.Context, req *mcp.CallToolRequest, language string, in Input) (*mcp.CallToolResult, Output, error) {
	if envs := t.Builds.Service; envs != nil && in.CustomImage != "" {
		// A custom environment runs only for its client.
		if err := envs.CheckUse(ctx, t.env.Client(req.Session), in.CustomImage); err != nil {
			result, info := toolsets.Failure(err)
			return result, Output{Error: info}, nil
		}
	}
	ereq := engine.Request{
		Language: language, Code: in.Code, SessionID: in.SessionID, Backend: in.Backend, Timeout: in.Timeout,
		CustomImage: in.CustomImage, Environment: in.Environment, MCPTools: in.MCPTools, Client: t.env.Conn(req.Session),
		Approve:     approver(req.Session),
		InputFiles:  inputFiles(in.InputFiles),
		Network:     in.Network,
		Credentials: in.Credentials,
		HostRoots:   in.HostRoots,
	}
	if in.Background {
		return t.startJob(ctx, ereq)
	}
	emit, stop := toolsets.Progress(ctx, req, time.Duration(t.env.Cfg.Execution.ProgressInterval)*time.Second)
	res, err := t.Exec.Execute(ctx, ereq, emit)
	stop()
	if err != nil {
		result, info := toolsets.Failure(err)
		return result, Output{Error: info, Backend: res.Backend}, nil
	}
	result, out := Answer(t.Exec.LanguageName(language), t.env.Cfg, res, in.SessionID)
	return result, out, nil
}

// Answer is a finished run's answer as execute_<language> gives it: the
// summary, its images, the files of session sessionID, and the structured
// result. A background job's result is answered so too (wait_job, tasks).
func Answer(languageName string, cfg config.Config, res engine.Result, sessionID string) (*mcp.CallToolResult, Output) {
	out := ToOutput(res)
	result := toolcall.Text(Summary(languageName, cfg, res, out))
	result.IsError = !res.Success
	for _, im := range res.Images {
		result.Content = append(result.Content, &mcp.ImageContent{Data: im.Data, MIMEType: im.MIMEType})
	}
	out.Files = files.Attach(cfg, result, sessionID, res.Files)
	Once(&out)
	return result, out
}

// ToOutput is a run's result as the tools return it.
func ToOutput(r engine.Result) Output {
	out := Output{
		Success: r.Success, Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode,
		ExecutionTime: r.Duration.Seconds(), StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		Notices: r.Notices, Rich: r.Rich, ResultRepr: r.ResultRepr, Backend: r.Backend, Isolation: r.Isolation,
		Truncated: r.StdoutBytes > int64(len(r.Stdout)) || r.StderrBytes > int64(len(r.Stderr)),
	}
	if r.ResultJSON != "" && json.Valid([]byte(r.ResultJSON)) {
		out.Result = r.ResultJSON
	}
	if e := r.Error; e != nil {
		out.Error = &toolsets.ErrorInfo{Type: e.Name, Message: e.Message, Line: e.Line, Column: e.Column, Traceback: e.Traceback}
	}
	for _, im := range r.Images {
		out.Images = append(out.Images, im.Name)
	}
	return out
}

// Summary is the text an agent reads first of a run in language lang.
func Summary(lang string, cfg config.Config, r engine.Result, out Output) string {
	var b strings.Builder
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
			fmt.Fprintf(&b, "[%s cut at %s (execution.max_output, counted as JSON text): the program wrote %d bytes in all, %d are here]\n", name, cfg.Execution.MaxOutput, total, len(text))
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

func inputFiles(in []InputFileInput) []engine.InputFile {
	if len(in) == 0 {
		return nil
	}
	out := make([]engine.InputFile, len(in))
	for i, f := range in {
		out[i] = engine.InputFile{Path: f.Path, Content: f.Content, Encoding: f.Encoding, FromSession: f.FromSession, SourcePath: f.SourcePath, URL: f.URL}
	}
	return out
}

// approver asks the client of ss to approve a tool call, for the tool
// bridge's "approve" policy.
func approver(ss *mcp.ServerSession) toolbridge.Approver {
	if ss == nil {
		return nil
	}
	return func(ctx context.Context, message string) (bool, bool, error) { return Confirm(ctx, ss, message) }
}

// startJob answers execute_<language> with background: true.
func (t tools) startJob(ctx context.Context, ereq engine.Request) (*mcp.CallToolResult, Output, error) {
	r, err := t.Jobs.StartJob(ctx, ereq)
	if err != nil {
		result, info := toolsets.Failure(err)
		return result, Output{Error: info}, nil
	}
	where := "in a fresh container"
	if r.SessionID != "" {
		where = "in session " + r.SessionID + " (other calls in it are refused until the job ends)"
	}
	text := fmt.Sprintf("Started background job %s: %s runs %s, for at most %d s. Follow it with wait_job (job_id %q), list_jobs or the resource %s; stop it with cancel_job.",
		r.ID, t.Exec.LanguageName(r.Language), where, r.TimeoutS, r.ID, toolsets.JobURI(r.ID))
	for _, n := range r.Notices {
		text += "\nnote: " + n
	}
	return toolcall.Text(text), Output{Success: true, JobID: r.ID, JobState: string(r.State), Backend: r.Backend, Notices: r.Notices}, nil
}
