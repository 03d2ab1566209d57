// Package engine routes execution requests to backend plugins: it picks the
// backend for a language by capability and configuration, checks that the
// requested features are served, applies limits, keeps sessions and audits
// every request and every refusal. It names no plugin and no language.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Request is one execute call as the MCP layer received it.
type Request struct {
	Language    string
	Code        string
	SessionID   string
	Backend     string
	Timeout     int // seconds; 0: default
	CustomImage string
	Environment map[string]string
	MCPTools    []string
	InputFiles  []InputFile // stateless runs only (inputs.go)
	Client      string      // the MCP connection that asked
	// Approve asks this request's MCP client to approve a tool call
	// (elicitation); nil: no client can be asked.
	Approve toolbridge.Approver
}

// Result is a backend's result and the backend that produced it.
type Result struct {
	backend.ExecuteResult
	Backend string
	Files   []OutputFile // what a session run wrote to its output directory (files.go)
}

// Plugins is what the engine needs of the plugin manager: what each plugin
// is and reports, and a running backend by name (*plugins.Manager).
type Plugins interface {
	Statuses() []plugins.Status
	Backend(ctx context.Context, name string) (backend.Backend, error)
}

// Engine executes requests through plugins.
type Engine struct {
	cfg     config.Config
	pol     *policy.Policy
	plugins Plugins
	rec     audit.Recorder
	log     hclog.Logger
	ws      *workspace.Manager
	limits  limits

	// ImagePresent, when set, reports whether an image is on this machine:
	// a custom_image that is allowed but absent is refused with what to do
	// (rule image-missing) before a backend is asked.
	ImagePresent func(ctx context.Context, ref string) (bool, error)

	// SessionQuota, when set, bounds each owner's live sessions (a tenant's
	// max_sessions); acquire asks it before it admits a new session.
	SessionQuota SessionQuota

	// RunGone, when set, is closed once no container of a run is left (the
	// sandbox manager's RunGone). A stateless run's slots, the server's and
	// its tenant's, are held until then: its answer may come back while its
	// container still runs (code that answered early, a child it forked),
	// and the slots bound sandboxes, not calls.
	RunGone func(runID string) <-chan struct{}

	mu       sync.Mutex
	sessions map[sessionKey]*Session
	slots    chan struct{}             // execution.max_concurrent_runs
	notices  []func() string           // notices.go: added to every result
	starts   map[string]*SessionStarts // sessions.go: warm and cold kernel starts per backend
	store    ckptStore                 // checkpoint.go: room reserved in the checkpoint store

	tools    *toolbridge.Service // nil: no bridge (toolsWhy says why)
	toolsWhy string
}

// SessionQuota is an owner's limit on live sessions (tenant.SessionQuota).
type SessionQuota interface {
	// CheckSessions refuses a new session of owner, who has live ones
	// (called under the engine's lock: it must not block).
	CheckSessions(owner string, live []string) error
	// Refused records a refusal of CheckSessions before the answer goes
	// back (outside the lock).
	Refused(ctx context.Context, owner, tool, sessionID string, err error)
}

// Tools is the tool bridge, or nil and why there is none.
func (e *Engine) Tools() (*toolbridge.Service, string) { return e.tools, e.toolsWhy }

// SetTools lets runs call MCP tools through s (a bridge plugin), or with s
// nil records why they cannot, for refusals of mcp_tools.
func (e *Engine) SetTools(s *toolbridge.Service, why string) {
	e.tools, e.toolsWhy = s, why
}

// limits are the configured sizes, parsed once.
type limits struct {
	code, output, image, envValue, envTotal int64
	ckptStore                               int64 // sessions.checkpoint_store_quota
}

// New returns an engine after checking the routing configuration against
// the loaded plugins (see check): an error there is a configuration the
// server must not start with.
func New(cfg config.Config, pol *policy.Policy, pm Plugins, ws *workspace.Manager, rec audit.Recorder, log hclog.Logger) (*Engine, error) {
	e := &Engine{cfg: cfg, pol: pol, plugins: pm, ws: ws, rec: rec, log: log, sessions: map[sessionKey]*Session{},
		slots: make(chan struct{}, cfg.Execution.MaxConcurrentRuns),
		limits: limits{code: int64(cfg.Execution.MaxCodeSize), output: int64(cfg.Execution.MaxOutput), image: int64(cfg.Execution.MaxImageSize),
			envValue: int64(cfg.Execution.MaxEnvValue), envTotal: int64(cfg.Execution.MaxEnvTotal),
			ckptStore: int64(cfg.Sessions.CheckpointStoreQuota)}}
	if err := e.check(pm.Statuses()); err != nil {
		return nil, err
	}
	return e, nil
}

// PluginStatuses reports every plugin (for resources and diagnostics).
func (e *Engine) PluginStatuses() []plugins.Status { return e.plugins.Statuses() }

// WarmPool asks a backend that keeps a warm pool for its state now (the
// status holds what it reported at load). Nil if it keeps none or does not
// answer within a second.
func (e *Engine) WarmPool(ctx context.Context, st plugins.Status) *backend.WarmPool {
	if st.Capabilities.WarmPool == nil || st.Error != "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	b, err := e.plugins.Backend(ctx, st.Name)
	if err != nil {
		return nil
	}
	c, err := b.Capabilities(ctx)
	if err != nil {
		return nil
	}
	return c.WarmPool
}

// Rules a request can break. Each refusal is audited with its rule.
const (
	RuleCodeEmpty          = "code-empty"
	RuleCodeSize           = "code-size"
	RuleCodeNUL            = "code-nul"
	RuleTimeout            = "timeout"
	RuleTimeoutMax         = "timeout-max"
	RuleMCPTools           = "mcp-tools-unavailable"
	RuleMCPToolName        = "mcp-tools-name"
	RuleImage              = "image-not-allowed"
	RuleEnvName            = "env-name"
	RuleEnvReserved        = "env-reserved"
	RuleEnvNUL             = "env-nul"
	RuleEnvValueSize       = "env-value-size"
	RuleEnvTotalSize       = "env-total-size"
	RuleBackendUnknown     = "backend-unknown"
	RuleBackendUnavailable = "backend-unavailable"
	RuleBackendAmbiguous   = "backend-ambiguous"
	RuleBackendLanguage    = "backend-language"
	RuleBackendStateless   = "backend-stateless"
	RuleNoBackend          = "no-backend"
	RuleSessionID          = "session-id"
	RuleSessionNotFound    = "session-not-found"
	RuleSessionLanguage    = "session-language"
	RuleSessionsMax        = "sessions-max"
	RuleVariableName       = "variable-name"
	RuleStateDocsSize      = "state-docs-size"
	RuleArguments          = "arguments-invalid"
	RuleImageMissing       = "image-missing"
)

// Bounds of what document_state keeps per session: notes live in the
// server's memory and are sent back with every state read, so a client
// cannot grow them without limit.
const (
	MaxDocBytes      = 4 << 10  // one variable's description
	MaxNoteBytes     = 16 << 10 // the session note
	MaxDocsVariables = 500      // documented variables
)

// MaxImages bounds the images one result carries: each is a content block
// a client renders, and thousands of tiny ones fit under any byte limit.
const MaxImages = 20

// EventRefused is the audit event of a refused request.
const EventRefused = "request.refused"

// RequestError is a refused request: the caller can fix it. The MCP layer
// shows it as a tool error; Rule names the rule for the audit log.
type RequestError struct {
	Rule string
	Msg  string
	Err  error // a sentinel callers test with errors.Is (ErrNoSession), or nil
	// Audit replaces Msg in the audit log when Msg names something that may
	// be a secret (an environment variable's name).
	Audit string
}

func (e *RequestError) Error() string { return e.Msg }

func (e *RequestError) Unwrap() error { return e.Err }

func refusal(rule, format string, args ...any) error {
	return &RequestError{Rule: rule, Msg: fmt.Sprintf(format, args...)}
}

// refuse audits a refusal (a *RequestError) with its rule before the answer
// goes back, and returns err unchanged. Other errors pass through.
// checkPresent refuses an allowed image that is not on this machine, so
// the caller learns what to do instead of a server error from the engine.
func (e *Engine) checkPresent(ctx context.Context, image string) error {
	ok, err := e.ImagePresent(ctx, image)
	if err != nil || ok {
		return nil // the engine may be down: the backend reports that
	}
	return refusal(RuleImageMissing, "custom_image %s is allowed but not present on this machine: build it first (build_environment for mcp-forge/custom:<name>, `make images` for the built-in images), or omit custom_image", quoted(image))
}

// RefuseArguments audits a tool call whose arguments did not match the
// tool's input schema, refused before any handler saw them.
func (e *Engine) RefuseArguments(client, tool, msg string) {
	_ = e.refuse(client, "", tool, refusal(RuleArguments, "%s", msg), nil)
}

func (e *Engine) refuse(client, sessionID, tool string, err error, details map[string]any) error {
	var re *RequestError
	if !errors.As(err, &re) {
		return err
	}
	d := map[string]any{"rule": re.Rule, "tool": tool}
	for k, v := range details {
		d[k] = v
	}
	event, severity := EventRefused, audit.Warning
	if re.Rule == RuleImage {
		// The image allowlist is a container-policy rule: refused here or in
		// the sandbox, it is the same critical violation.
		event, severity = audit.SecurityViolation, audit.Critical
	}
	msg := re.Msg
	if re.Audit != "" {
		msg = re.Audit
	}
	internal := auditID(client, sessionID)
	if internal != "" {
		d["session"] = sessionID
	}
	e.rec.Record(audit.Entry{Event: event, Severity: severity, SessionID: internal, UserID: client, Success: false, Error: msg, Details: d})
	return err
}

// auditID is the audit log's session_id for client's session id: the
// internal id (internalID), which also names the session's workspace and
// container, so that one session's lines are found by one value even when
// two owners use the same id; details.session holds the id the user chose.
// An invalid id (which may be hostile: a path, a megabyte) and no id give "".
func auditID(client, id string) string {
	if id == "" || workspace.CheckSessionID(id) != nil {
		return ""
	}
	return internalID(client, id)
}

var toolName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}(\.[^\x00-\x1f]{1,128})?$`)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// quoted shows a name the caller sent, cut so that a refusal stays short.
func quoted(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q… (%d bytes)", s[:64], len(s))
	}
	return fmt.Sprintf("%q", s)
}

func (e *Engine) validate(req Request) error {
	if strings.TrimSpace(req.Code) == "" {
		return refusal(RuleCodeEmpty, "code is empty: pass the %s source to run in the code argument", e.LanguageName(req.Language))
	}
	if int64(len(req.Code)) > e.limits.code {
		return refusal(RuleCodeSize, "code is %d bytes, over the %s limit (execution.max_code_size); send less code, or load data from files", len(req.Code), e.cfg.Execution.MaxCodeSize)
	}
	if i := strings.IndexByte(req.Code, 0); i >= 0 {
		// No language takes a NUL in its source; a runner would only crash on it.
		return refusal(RuleCodeNUL, "code holds a NUL byte on line %d; remove it (write binary data with escapes such as \\x00)", strings.Count(req.Code[:i], "\n")+1)
	}
	if req.SessionID != "" && workspace.CheckSessionID(req.SessionID) != nil {
		return refusal(RuleSessionID, "session_id %s is invalid: use 1-48 letters, digits, '-' or '_', starting with a letter or digit", quoted(req.SessionID))
	}
	if req.Timeout < 0 {
		return refusal(RuleTimeout, "timeout %d: must be a positive number of seconds", req.Timeout)
	}
	if max := e.cfg.Execution.MaxTimeout; req.Timeout > max {
		return refusal(RuleTimeoutMax, "timeout %d s exceeds the maximum %d s (execution.max_timeout)", req.Timeout, max)
	}
	for _, n := range req.MCPTools {
		if !toolName.MatchString(n) {
			return refusal(RuleMCPToolName, "mcp_tools %s: name a configured MCP server (\"memory\") or one of its tools (\"memory.read_graph\"); see the resource mcp://forge/tools/available", quoted(n))
		}
	}
	if len(req.MCPTools) > 64 {
		return refusal(RuleMCPToolName, "mcp_tools names %d tools; at most 64 (name a server to grant all its tools)", len(req.MCPTools))
	}
	if len(req.MCPTools) > 0 && e.tools == nil {
		why := e.toolsWhy
		if why == "" {
			why = "none is loaded"
		}
		return refusal(RuleMCPTools, "mcp_tools %v: calling MCP tools from the sandbox needs a bridge plugin, and %s", req.MCPTools, why)
	}
	if req.CustomImage != "" {
		if err := e.pol.CheckImage(req.CustomImage); err != nil {
			detail := err.Error()
			var v *policy.Violation
			if errors.As(err, &v) {
				detail = v.Detail
			}
			return refusal(RuleImage, "custom_image %s is not allowed: %s", quoted(req.CustomImage), detail)
		}
	}
	return e.checkEnv(req.Environment)
}

// checkEnv refuses environment variables a process could not hold or that
// exceed the limits. A refusal names the variable, never its value.
func (e *Engine) checkEnv(env map[string]string) error {
	// The caller is told which variable; the audit log is not (names too
	// may be secrets).
	refusal := func(rule, format string, args ...any) error {
		return &RequestError{Rule: rule, Msg: fmt.Sprintf(format, args...),
			Audit: fmt.Sprintf("environment refused by rule %s (%d variables; names and values are not recorded)", rule, len(env))}
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		switch {
		case !envName.MatchString(k):
			return refusal(RuleEnvName, "environment variable name %s is invalid: use letters, digits and '_', not starting with a digit (at most 128)", quoted(k))
		case strings.HasPrefix(k, "FORGE_"):
			return refusal(RuleEnvReserved, "environment variable %s: the FORGE_ prefix is reserved for MCP-Forge", k)
		case strings.IndexByte(v, 0) >= 0:
			return refusal(RuleEnvNUL, "environment variable %s: its value contains a NUL byte, which no process environment can hold", k)
		case int64(len(v)) > e.limits.envValue:
			return refusal(RuleEnvValueSize, "environment variable %s: its value is %d bytes, over the %s limit (execution.max_env_value); pass large data as a file or in the code", k, len(v), e.cfg.Execution.MaxEnvValue)
		}
		total += len(k) + len(v) + 2 // "=" and the terminating NUL
	}
	if int64(total) > e.limits.envTotal {
		return refusal(RuleEnvTotalSize, "environment: %d variables take %d bytes, over the %s limit (execution.max_env_total)", len(env), total, e.cfg.Execution.MaxEnvTotal)
	}
	return nil
}

// Execute runs a request and returns the backend's result. User-code
// failures are in the result; errors are refusals (*RequestError, audited
// with their rule) or failures of the server, the plugin or the engine.
func (e *Engine) Execute(ctx context.Context, req Request, emit func(backend.StreamEvent)) (Result, error) {
	tool := "execute_" + req.Language
	err := e.validate(req)
	var name string
	if err == nil {
		name, err = e.pick(req)
	}
	var toolIDs []string
	if err == nil && len(req.MCPTools) > 0 {
		toolIDs, err = e.resolveTools(ctx, req, name)
	}
	var s *Session
	var created bool
	if err == nil && req.CustomImage != "" && e.ImagePresent != nil && (req.SessionID == "" || !e.live(req.Client, req.SessionID)) {
		err = e.checkPresent(ctx, req.CustomImage)
	}
	if err == nil && req.SessionID != "" {
		s, created, err = e.acquire(ctx, req, name, tool)
	}
	if err != nil {
		d := map[string]any{"language": req.Language, "backend": req.Backend}
		if req.CustomImage != "" {
			d["image"] = req.CustomImage
		}
		return Result{}, e.refuse(req.Client, req.SessionID, tool, err, d)
	}
	if s != nil {
		name = s.Backend // an existing session keeps its backend
	}
	inputs, err := e.inputFiles(req, name) // audited there
	if err != nil {
		if created {
			e.drop(s)
		}
		return Result{}, err
	}
	timeout := e.cfg.Execution.DefaultTimeout
	if req.Timeout > 0 {
		timeout = req.Timeout
	}
	runID := newID()
	sessionID := "" // what the backend sees: the internal id
	if s != nil {
		sessionID = s.Internal
	}
	details := map[string]any{
		"run_id": runID, "language": req.Language, "backend": name, "code_sha256": audit.HashCode(req.Code), "code_bytes": len(req.Code),
		"timeout_s": timeout, "image": req.CustomImage, "env_names": slices.Sorted(maps.Keys(req.Environment)),
	}
	if s != nil {
		details["session"] = req.SessionID
	}
	if len(inputs) > 0 {
		n := 0
		for _, d := range inputs {
			n += len(d)
		}
		details["input_files"], details["input_bytes"] = len(inputs), n
	}
	e.rec.Record(audit.Entry{Event: audit.ExecutionRequest, SessionID: sessionID, UserID: req.Client, Success: true, Details: details})
	breq := backend.ExecuteRequest{
		Code: req.Code, Language: req.Language, Image: req.CustomImage, Timeout: time.Duration(timeout) * time.Second,
		Env: req.Environment, MaxOutputBytes: e.limits.output, MaxImageBytes: e.limits.image, SessionID: sessionID, RunID: runID,
		InputFiles: inputs,
	}
	// Wait for a slot: a burst of calls must not start unbounded containers.
	select {
	case e.slots <- struct{}{}:
		// The slot, and the tenant's run slot, are given back once the
		// run's containers are gone, which may be after the answer.
		defer e.endRun(runID, tenant.HoldRun(ctx))
	case <-ctx.Done():
		if created {
			e.drop(s)
		}
		e.complete(req, runID, name, backend.ExecuteResult{}, ctx.Err())
		return Result{Backend: name}, ctx.Err()
	}
	var res backend.ExecuteResult
	var files []OutputFile
	if s != nil {
		res, files, err = e.executeSession(ctx, s, created, breq, toolRun{ids: toolIDs, client: req.Client, approve: req.Approve}, emit)
	} else if len(toolIDs) > 0 {
		var g *toolbridge.Grant
		g, err = e.tools.Issue(ctx, toolbridge.IssueRequest{Owner: name, Client: req.Client, RunID: runID, Language: req.Language, Tools: toolIDs, Approve: req.Approve})
		if err == nil {
			defer g.Close() // the grant ends with the run: socket closed, directory removed
			breq.ToolsGrant = g.Token()
			var b backend.Backend
			if b, err = e.plugins.Backend(ctx, name); err == nil {
				res, err = b.Execute(ctx, breq)
			}
		}
	} else {
		var b backend.Backend
		if b, err = e.plugins.Backend(ctx, name); err == nil {
			res, err = b.Execute(ctx, breq)
		}
	}
	if s != nil {
		e.checkFull(s, tool)
	}
	if res.Error != nil && strings.Contains(res.Error.Message+res.Stderr, "No space left on device") {
		res.Notices = append(res.Notices, fmt.Sprintf("a filesystem of the sandbox is full: the working directory holds at most %s (volumes.session_quota) and /tmp at most %s (security.tmpfs_size); write less", e.cfg.Volumes.SessionQuota, e.cfg.Security.TmpfsSize))
	}
	if n := len(res.Images); n > MaxImages {
		res.Images = res.Images[:MaxImages]
		res.Notices = append(res.Notices, fmt.Sprintf("the code produced %d images; the first %d are returned: save the others as files or combine them", n, MaxImages))
	}
	if err == nil {
		res.Notices = append(res.Notices, e.resultNotices()...) // notices.go
	}
	e.complete(req, runID, name, res, err)
	return Result{ExecuteResult: res, Backend: name, Files: files}, err
}

// endRun gives a run's slot back, and ends hold (the tenant's run slot),
// once no container of the run is left: at once when there is none (a
// session run, a cold run that removed its container), else in the
// background when the last is removed.
func (e *Engine) endRun(runID string, hold func()) {
	release := func() {
		<-e.slots
		hold()
	}
	if e.RunGone == nil {
		release()
		return
	}
	gone := e.RunGone(runID)
	select {
	case <-gone:
		release()
	default:
		go func() {
			<-gone
			release()
		}()
	}
}

func (e *Engine) complete(req Request, runID, name string, res backend.ExecuteResult, err error) {
	entry := audit.Entry{Event: audit.ExecutionComplete, SessionID: auditID(req.Client, req.SessionID), UserID: req.Client, Success: err == nil && res.Success,
		Details: map[string]any{"run_id": runID, "backend": name, "duration_ms": res.Duration.Milliseconds(), "exit_code": res.ExitCode}}
	if req.SessionID != "" {
		entry.Details["session"] = req.SessionID
	}
	if res.Error != nil {
		entry.Details["error_name"] = res.Error.Name
	}
	if err != nil {
		entry.Severity, entry.Error = audit.Error, err.Error()
	}
	e.rec.Record(entry)
}

func newID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// toolRun is what a session's execute needs of its tool grant.
type toolRun struct {
	ids     []string
	client  string
	approve toolbridge.Approver
}

// resolveTools checks that backend forwards tool grants and expands
// mcp_tools into tool ids under the policy. Errors are *RequestError.
func (e *Engine) resolveTools(ctx context.Context, req Request, backendName string) ([]string, error) {
	if !e.forwardsGrants(backendName) {
		return nil, refusal(RuleMCPTools, "mcp_tools: the %s backend does not support MCP tools in its sandbox (it does not forward tool grants to its containers); use a backend that does, or omit mcp_tools", backendName)
	}
	ids, err := e.tools.Resolve(ctx, req.MCPTools)
	var te *toolbridge.Error
	if errors.As(err, &te) {
		return nil, &RequestError{Rule: te.Rule, Msg: te.Msg}
	}
	if err != nil {
		return nil, &RequestError{Rule: RuleMCPTools, Msg: fmt.Sprintf("mcp_tools %v: %v", req.MCPTools, err)}
	}
	return ids, nil
}

// forwardsGrants reports whether a backend declares that its containers
// get the tool grant of a request (Capabilities.MCPTools).
func (e *Engine) forwardsGrants(name string) bool {
	st, ok := status(e.plugins.Statuses(), name)
	return ok && st.Capabilities.MCPTools
}
