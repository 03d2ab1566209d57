// Package engine executes requests through backend plugins: it validates a
// request, has it routed (core/route), checks that the requested features
// are served, applies limits, runs it statelessly or in a session (the
// registry is core/session, checkpoints core/checkpoint), moves files in
// and out of sessions, and audits every request and every refusal. It
// names no plugin and no language.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/engine/cancelled"
	"github.com/mcp-forge/mcp-forge/core/engine/grants"
	"github.com/mcp-forge/mcp-forge/core/engine/limits"
	"github.com/mcp-forge/mcp-forge/core/engine/network"
	"github.com/mcp-forge/mcp-forge/core/engine/sandboxes"
	"github.com/mcp-forge/mcp-forge/core/hostroots"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/route"
	"github.com/mcp-forge/mcp-forge/core/sandboxgrant"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/telemetry"
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
	InputFiles  []InputFile // stateless runs only (core/engine/files)
	Network     []string    // hosts a stateless run asks to reach (core/engine/network)
	Credentials []string    // credentials the proxy adds for it (with their hosts)
	HostRoots   []string    // host roots mounted read-only (core/engine/sandboxes)
	Client      string      // the MCP connection that asked
	// Approve asks this request's MCP client to approve a tool call
	// (elicitation); nil: no client can be asked.
	Approve toolbridge.Approver
	// Background: the run is a job (StartJob), whose timeout may be up to
	// execution.max_background_timeout.
	Background bool
	Job        string // the job's id, set by StartJob (audited with the run)
}

// InputFile is a file a stateless run finds, read-only, in its working
// directory: uploaded in the same call (Content) or copied from one of the
// caller's sessions (FromSession, never another client's).
type InputFile struct {
	Path        string // where the run finds it, relative to its working directory
	Content     string // the file, as text or base64 (Encoding)
	Encoding    string // "text" (default) or "base64"
	FromSession string // copy it from this session of the caller ...
	SourcePath  string // ... at this path of its working directory (default: Path)
	// URL is fetched by the core through the egress proxy, as a grant of
	// its host under the network policy (core/engine/files: fetch).
	URL string
}

// OutputFile is a file a session run wrote to its output directory (files.OutputDir).
type OutputFile struct {
	Path     string // relative to the working directory: output/result.csv
	Size     int64
	MIMEType string
	Data     []byte // the content when it is small enough to inline; nil: a link
}

// Result is a backend's result and the backend that produced it.
type Result struct {
	backend.ExecuteResult
	Backend string
	Files   []OutputFile // what a session run wrote to its output directory
	// Isolation is the kernel the code talked to (runtime.Isolations).
	Isolation string
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
	limits  limits.Limits

	// Isolation, when set, is what sandboxes run under (the configured
	// isolation, or container where gVisor is waived and missing): every
	// result says it.
	Isolation func() string

	// ImagePresent, when set, reports whether an image is on this machine:
	// a custom_image that is allowed but absent is refused with what to do
	// (rule image-missing) before a backend is asked.
	ImagePresent func(ctx context.Context, ref string) (bool, error)

	// SessionQuota, when set, bounds each client's live sessions (a tenant's
	// max_sessions); acquire asks it before it admits a new session.
	SessionQuota SessionQuota

	// RunGone, when set, is closed once no container of a run is left (the
	// sandbox manager's RunGone). A stateless run's slots, the server's and
	// its tenant's, are held until then: its answer may come back while its
	// container still runs (code that answered early, a child it forked),
	// and the slots bound sandboxes, not calls.
	RunGone func(runID string) <-chan struct{}

	router   *route.Router
	sessions *session.Registry
	slots    chan struct{}   // execution.max_concurrent_runs
	notices  []func() string // notices.go: added to every result

	tools    *toolbridge.Service  // nil: no bridge (toolsWhy says why)
	network  *network.Grants      // nil: no network grants
	sandbox  *sandboxes.Sandboxes // what sandboxes get beyond the defaults
	toolsWhy string

	cancelled cancelled.Runs

	// The parts built on the engine, as its own paths need them (parts.go).
	files    Files
	ckpts    Checkpoints
	replicas Replicas
	jobs     Jobs
}

// SessionQuota is a client's limit on live sessions (tenant.SessionQuota).
type SessionQuota interface {
	// CheckSessions refuses a new session of client, who has live ones
	// (called under the session registry's lock: it must not block).
	CheckSessions(client string, live []string) error
	// Refused records a refusal of CheckSessions before the answer goes
	// back (outside the lock).
	Refused(ctx context.Context, client, tool, sessionID string, err error)
}

// Tools is the tool bridge, or nil and why there is none.
func (e *Engine) Tools() (*toolbridge.Service, string) { return e.tools, e.toolsWhy }

// SetNetwork lets runs ask for network (Request.Network), granted under p
// through the channels c.
func (e *Engine) SetNetwork(p *egress.Policy, c *egress.Channels) {
	e.network = network.New(p, c, e)
}

// SetSandboxGrants issues runs' sandbox grants in reg, which the plugins'
// hosts resolve, with roots (Request.HostRoots; sandboxes.New).
func (e *Engine) SetSandboxGrants(reg *sandboxgrant.Registry, roots *hostroots.Roots, claimsOnly bool) {
	e.sandbox = sandboxes.New(reg, e.rec, e, sandboxes.TenantIsolation(e.cfg), roots, claimsOnly)
}

// Network grants runs network; nil: it grants none.
func (e *Engine) Network() *network.Grants { return e.network }

// SetTools lets runs call MCP tools through s (a bridge plugin), or with s
// nil records why they cannot, for refusals of mcp_tools.
func (e *Engine) SetTools(s *toolbridge.Service, why string) {
	e.tools, e.toolsWhy = s, why
}

// New returns an engine after checking the routing configuration against
// the loaded plugins (see check): an error there is a configuration the
// server must not start with.
func New(cfg config.Config, pol *policy.Policy, pm Plugins, ws *workspace.Manager, rec audit.Recorder, log hclog.Logger) (*Engine, error) {
	e := &Engine{files: none{}, ckpts: none{}, replicas: none{}, jobs: none{}, cancelled: cancelled.New(rec, log), cfg: cfg, pol: pol, plugins: pm, ws: ws, rec: rec, log: log, router: route.New(cfg), sessions: session.NewRegistry(),
		slots:  make(chan struct{}, cfg.Execution.MaxConcurrentRuns),
		limits: limits.New(cfg)}
	e.sandbox = sandboxes.New(sandboxgrant.New(), rec, e, sandboxes.TenantIsolation(cfg), nil, false) // SetSandboxGrants shares the plugins' hosts' registry
	if err := e.check(pm.Statuses()); err != nil {
		return nil, err
	}
	return e, nil
}

// PluginStatuses reports every plugin (for resources and diagnostics).
func (e *Engine) PluginStatuses() []plugins.Status { return e.plugins.Statuses() }

// EventRefused is the audit event of a refused request.
const EventRefused = "request.refused"

// RequestError is a refused request: the caller can fix it. The MCP layer
// shows it as a tool error; Rule names the rule for the audit log.
type RequestError = refusal.Error

// ErrNoSession is an unknown session id (or one of another connection).
var ErrNoSession = session.ErrNoSession

// checkPresent refuses an allowed image that is not on this machine, so
// the caller learns what to do instead of a server error from the engine.
func (e *Engine) checkPresent(ctx context.Context, image string) error {
	ok, err := e.ImagePresent(ctx, image)
	if err != nil || ok {
		return nil // the engine may be down: the backend reports that
	}
	return refusal.New(RuleImageMissing, "custom_image %s is allowed but not present on this machine: build it first (build_environment for mcp-forge/custom:<name>, `make images` for the built-in images), or omit custom_image", quoted(image))
}

// RefuseArguments audits a tool call whose arguments did not match the
// tool's input schema, refused before any handler saw them.
func (e *Engine) RefuseArguments(client, tool, msg string) {
	_ = e.Refuse(client, "", tool, refusal.New(RuleArguments, "%s", msg), nil)
}

// Refuse audits a refusal (a *RequestError) with its rule before the answer
// goes back, and returns err unchanged. Other errors pass through, and so
// does a tenant's quota (tenant.ErrQuota): it audited its refusal itself,
// as quota.refused.
func (e *Engine) Refuse(client, sessionID, tool string, err error, details map[string]any) error {
	var re *RequestError
	if !errors.As(err, &re) || errors.Is(err, tenant.ErrQuota) {
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
	internal := AuditID(client, sessionID)
	if internal != "" {
		d["session"] = sessionID
	}
	e.rec.Record(audit.Entry{Event: event, Severity: severity, SessionID: internal, UserID: client, Success: false, Error: msg, Details: d})
	return err
}

// AuditID is the audit log's session_id for client's session id: the
// internal id (session.InternalID), which also names the session's workspace and
// container, so that one session's lines are found by one value even when
// two clients use the same id; details.session holds the id the user chose.
// An invalid id (which may be hostile: a path, a megabyte) and no id give "".
func AuditID(client, id string) string {
	if id == "" || workspace.CheckSessionID(id) != nil {
		return ""
	}
	return session.InternalID(client, id)
}

// Execute runs a request and returns the backend's result. User-code
// failures are in the result; errors are refusals (*RequestError, audited
// with their rule) or failures of the server, the plugin or the engine.
func (e *Engine) Execute(ctx context.Context, req Request, emit func(backend.StreamEvent)) (Result, error) {
	p, err := e.Prepare(ctx, req)
	if err != nil {
		return Result{}, err
	}
	return e.Run(ctx, p, emit, nil)
}

// Prepared is a request that passed every check, with what its run needs.
type Prepared struct {
	req     Request
	tool    string
	name    string // the backend
	s       *session.Session
	created bool // s was created by this request: drop it if the run never starts
	toolIDs []string
	need    sandboxes.Need // what a stateless run's or a new session's sandbox gets beyond the defaults
	inputs  map[string][]byte
	timeout int // seconds
}

// Backend, Timeout (seconds) and Tool are the backend that runs p, its
// timeout and the tool that asked for it.
func (p *Prepared) Backend() string { return p.name }
func (p *Prepared) Timeout() int    { return p.timeout }
func (p *Prepared) Tool() string    { return p.tool }

// Session is the session p runs in; nil: a stateless run.
func (p *Prepared) Session() *session.Session { return p.s }

// Drop forgets a session p created, which will not run.
func (e *Engine) Drop(p *Prepared) {
	if p.created {
		e.sessions.Drop(p.s)
	}
}

// Prepare checks a request, routes it and acquires its session: every
// refusal a call can get before its code runs, audited with its rule.
func (e *Engine) Prepare(ctx context.Context, req Request) (_ *Prepared, err error) {
	ctx, span := telemetry.Start(ctx, "engine.prepare", attribute.String("mcp_forge.language", req.Language))
	defer func() { telemetry.End(span, err) }()
	p := &Prepared{req: req, tool: "execute_" + req.Language}
	err = e.validate(req)
	if err == nil {
		p.name, err = e.pick(req)
	}
	if err == nil && len(req.MCPTools) > 0 {
		p.toolIDs, err = e.issuer().ResolveTools(ctx, req.MCPTools, p.name)
	}
	if err == nil && req.CustomImage != "" && e.ImagePresent != nil && (req.SessionID == "" || !e.sessions.Live(req.Client, req.SessionID)) {
		err = e.checkPresent(ctx, req.CustomImage)
	}
	if err == nil && req.SessionID != "" {
		p.s, p.created, err = e.Acquire(ctx, req, p.name, p.tool)
	}
	if err == nil && p.s != nil && !p.created {
		err = e.checkSessionJob(p.s) // sessionjobs.go
	}
	if err == nil && p.s != nil && !p.created {
		err = sandboxes.SessionCheck(p.s.SandboxGrant, req.HostRoots, false, req.SessionID)
	} else if err == nil {
		p.need, err = e.sandbox.Resolve(sandboxes.Ask{Roots: req.HostRoots, Client: req.Client, Backend: p.name, BackendGrants: e.issuer().PassesSandboxGrants(p.name)})
		if err != nil {
			e.Drop(p)
		}
	}
	if err != nil {
		d := map[string]any{"language": req.Language, "backend": req.Backend}
		if req.CustomImage != "" {
			d["image"] = req.CustomImage
		}
		return nil, e.Refuse(req.Client, req.SessionID, p.tool, err, d)
	}
	if p.s != nil {
		p.name = p.s.Backend // an existing session keeps its backend
	}
	if p.inputs, err = e.files.Inputs(ctx, req, p.name); err != nil { // audited there
		e.Drop(p)
		return nil, err
	}
	p.timeout = e.cfg.Execution.DefaultTimeout
	if req.Background {
		p.timeout = e.cfg.Jobs.DefaultTimeout
	}
	if req.Timeout > 0 {
		p.timeout = req.Timeout
	}
	return p, nil
}

// Run runs a prepared request; started, when set, is told the run's id
// once the run has its slot and begins.
func (e *Engine) Run(ctx context.Context, p *Prepared, emit func(backend.StreamEvent), started func(runID string)) (Result, error) {
	req, name, s := p.req, p.name, p.s
	runID := NewID()
	sessionID := "" // what the backend sees: the internal id
	if s != nil {
		sessionID = s.Internal
	}
	details := map[string]any{
		"run_id": runID, "language": req.Language, "backend": name, "code_sha256": audit.HashCode(req.Code), "code_bytes": len(req.Code),
		"timeout_s": p.timeout, "image": req.CustomImage, "env_names": slices.Sorted(maps.Keys(req.Environment)),
	}
	if s != nil {
		details["session"] = req.SessionID
	}
	if req.Job != "" {
		details["job"] = req.Job
	}
	if len(p.inputs) > 0 {
		n := 0
		for _, d := range p.inputs {
			n += len(d)
		}
		details["input_files"], details["input_bytes"] = len(p.inputs), n
	}
	e.rec.Record(audit.Entry{Event: audit.ExecutionRequest, SessionID: sessionID, UserID: req.Client, Success: true, Details: details})
	breq := backend.ExecuteRequest{
		Code: req.Code, Language: req.Language, Image: req.CustomImage, Timeout: time.Duration(p.timeout) * time.Second,
		Env: req.Environment, MaxOutputBytes: e.limits.Output(), MaxImageBytes: e.limits.Image(), SessionID: sessionID, RunID: runID,
		InputFiles: p.inputs,
	}
	// Wait for a slot: a burst of calls must not start unbounded containers.
	_, slotSpan := telemetry.Start(ctx, "engine.run_slot")
	select {
	case e.slots <- struct{}{}:
		slotSpan.End()
		// The slot, and the tenant's run slot, are given back once the
		// run's containers are gone, which may be after the answer.
		defer e.endRun(runID, tenant.HoldRun(ctx))
	case <-ctx.Done():
		telemetry.End(slotSpan, ctx.Err())
		e.Drop(p)
		e.complete(req, runID, name, backend.ExecuteResult{}, ctx.Err())
		return Result{Backend: name}, ctx.Err()
	}
	if started != nil {
		started(runID)
	}
	var res backend.ExecuteResult
	var files []OutputFile
	var err error
	runStart := time.Now()
	var channel *egress.Channel
	emit = network.ScrubbedEmit(emit, func() *egress.Channel {
		if s != nil {
			return s.Network
		}
		return channel
	})
	var sg *sandboxgrant.Grant
	if s == nil && !p.need.Empty() {
		if sg, err = e.sandbox.Grant(sandboxes.Ask{Client: req.Client, Run: runID, Tool: p.tool, Backend: name}, p.need); sg != nil {
			defer e.sandbox.Close(sg) // containers are created with it during the run only
			breq.SandboxGrant, breq.SandboxPoolGrant = sg.Token(), sg.PoolToken()
		}
	}
	if err == nil && s == nil && (len(req.Network) > 0 || len(req.Credentials) > 0) {
		if channel, err = e.network.Open(ctx, network.Ask{Hosts: req.Network, Credentials: req.Credentials, Client: req.Client, Run: runID, Tool: p.tool, Approve: req.Approve}, name); channel != nil {
			defer channel.Close() // the run's end cuts its connections, a background process's too
			breq.NetworkGrant = channel.Token()
		}
	}
	if err != nil {
		// refused or not opened: nothing runs
	} else if s != nil {
		res, files, err = e.executeSession(ctx, s, p.created, breq, grants.Ask{ToolIDs: p.toolIDs, Client: req.Client, Approve: req.Approve, Hosts: req.Network, Credentials: req.Credentials, Need: p.need, Tool: p.tool}, emit)
	} else if len(p.toolIDs) > 0 {
		var g *toolbridge.Grant
		ictx, ispan := telemetry.Start(ctx, "tools.grant")
		g, err = e.tools.Issue(ictx, toolbridge.IssueRequest{Plugin: name, Client: req.Client, RunID: runID, Language: req.Language, Tools: p.toolIDs, Approve: req.Approve})
		telemetry.End(ispan, err)
		if err == nil {
			defer g.Close() // the grant ends with the run: socket closed, directory removed
			breq.ToolsGrant = g.Token()
			var b backend.Backend
			if b, err = e.plugins.Backend(ctx, name); err == nil {
				res, err = backend.ExecuteStreaming(ctx, b, breq, emit)
			}
		}
	} else {
		var b backend.Backend
		if b, err = e.plugins.Backend(ctx, name); err == nil {
			res, err = backend.ExecuteStreaming(ctx, b, breq, emit) // output as progress, if the backend streams
		}
	}
	if herr := e.issuer().RunHonoured(req.Client, name, sg); err == nil && herr != nil {
		res, err = backend.ExecuteResult{}, herr
	}
	if s == nil && err != nil && ctx.Err() != nil {
		// A stateless run keeps nothing: the backend stopped it (its
		// container is removed) when the call's context ended.
		e.cancelled.Audit(req.Client, "", "", runID, name, cancelled.Cause(ctx), "stopped", time.Since(runStart))
	}
	if s != nil {
		e.files.CheckFull(s, p.tool)
	}
	if res.Error != nil && strings.Contains(res.Error.Message+res.Stderr, "No space left on device") {
		res.Notices = append(res.Notices, fmt.Sprintf("a filesystem of the sandbox is full: the working directory holds at most %s (volumes.session_quota) and /tmp at most %s (security.tmpfs_size); write less", e.cfg.Volumes.SessionQuota, e.cfg.Security.TmpfsSize))
	}
	e.limits.Cap(&res) // a session's run was capped before its cell was recorded
	network.Scrub(network.Secrets(channel), &res)
	if channel != nil && err == nil {
		res.Notices = append(res.Notices, network.Notice(channel, name))
	}
	if n := ""; sg != nil && err == nil {
		if n = sandboxes.Notice(sg, name); n != "" {
			res.Notices = append(res.Notices, n)
		}
	}
	if err == nil {
		res.Notices = append(res.Notices, e.resultNotices()...) // notices.go
	}
	e.complete(req, runID, name, res, err)
	out := Result{ExecuteResult: res, Backend: name, Files: files}
	if e.Isolation != nil {
		out.Isolation = e.Isolation()
	}
	if iso := e.sandbox.Required(req.Client); iso != "" {
		out.Isolation = iso // the tenant's, whatever the server's
	}
	return out, err
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
	entry := audit.Entry{Event: audit.ExecutionComplete, SessionID: AuditID(req.Client, req.SessionID), UserID: req.Client, Success: err == nil && res.Success,
		Details: map[string]any{"run_id": runID, "backend": name, "duration_ms": res.Duration.Milliseconds(), "exit_code": res.ExitCode}}
	if req.SessionID != "" {
		entry.Details["session"] = req.SessionID
	}
	if res.Error != nil {
		entry.Details["error_name"] = res.Error.Name
	}
	switch {
	case (res.Error != nil && res.Error.Name == cancelled.ErrorName) || errors.Is(err, context.Canceled):
		// The client ended the call: not a failure of the server.
		entry.Details["reason"] = "cancelled"
		if err != nil {
			entry.Error = err.Error()
		}
	case err != nil:
		entry.Severity, entry.Error = audit.Error, err.Error()
	}
	e.rec.Record(entry)
}

func NewID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// issuer issues a session's grants (core/engine/grants).
func (e *Engine) issuer() *grants.Issuer {
	return &grants.Issuer{Tools: e.tools, Network: e.network, Sandbox: e.sandbox, Refuse: e, Caps: func(name string) (backend.Capabilities, bool) {
		st, ok := status(e.plugins.Statuses(), name)
		return st.Capabilities, ok
	}, Rec: e.rec}
}
