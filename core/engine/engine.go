// Package engine routes execution requests to backend plugins: it picks the
// backend for a language, checks that the requested features are served,
// applies limits and audits every request.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
	Client      string // the MCP connection that asked
}

// RequestError is a bad request: the caller can fix it. The MCP layer shows
// it as a tool error.
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return e.Msg }

func badRequest(format string, args ...any) error {
	return &RequestError{Msg: fmt.Sprintf(format, args...)}
}

// Engine executes requests through plugins.
type Engine struct {
	cfg     config.Config
	pol     *policy.Policy
	plugins *plugins.Manager
	rec     audit.Recorder
	log     hclog.Logger

	mu       sync.Mutex
	sessions map[string]*Session
	slots    chan struct{} // execution.max_concurrent_runs
	ws       *workspace.Manager
	notices  []func() string // notices.go: added to every result
}

// New returns an engine.
func New(cfg config.Config, pol *policy.Policy, pm *plugins.Manager, ws *workspace.Manager, rec audit.Recorder, log hclog.Logger) *Engine {
	return &Engine{cfg: cfg, pol: pol, plugins: pm, ws: ws, rec: rec, log: log, sessions: map[string]*Session{},
		slots: make(chan struct{}, cfg.Execution.MaxConcurrentRuns)}
}

// Plugins is the plugin manager (for resources and diagnostics).
func (e *Engine) Plugins() *plugins.Manager { return e.plugins }

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// capable reports the loaded backends that serve language (and sessions if
// stateful).
func (e *Engine) capable(language string, stateful bool) []string {
	var out []string
	for _, s := range e.plugins.Statuses() {
		if s.Error == "" && slices.Contains(s.Capabilities.Languages, language) && (!stateful || s.Capabilities.Stateful) {
			out = append(out, s.Name)
		}
	}
	return out
}

func (e *Engine) pick(req Request) (string, error) {
	if req.Backend != "" {
		for _, s := range e.plugins.Statuses() {
			if s.Name != req.Backend {
				continue
			}
			if s.Type != "" && !slices.Contains(s.Capabilities.Languages, req.Language) {
				return "", badRequest("backend %q does not run %s (it runs %v)", req.Backend, req.Language, s.Capabilities.Languages)
			}
			if req.SessionID != "" && s.Type != "" && !s.Capabilities.Stateful {
				return "", badRequest("backend %q is stateless: it cannot keep session %q; omit session_id or use a stateful backend%s", req.Backend, req.SessionID, suggest(e.capable(req.Language, true)))
			}
			return req.Backend, nil
		}
		return "", badRequest("unknown backend %q; loaded backends: %s", req.Backend, strings.Join(e.plugins.Names(), ", "))
	}
	if req.SessionID != "" {
		c := e.capable(req.Language, true)
		if len(c) == 0 {
			return "", badRequest("session_id needs a stateful %s backend (jupyter), and none is loaded; omit session_id to run statelessly", req.Language)
		}
		return c[0], nil
	}
	def := e.cfg.Execution.DefaultBackend
	if req.Language != "python" {
		def = req.Language
	}
	if slices.Contains(e.capable(req.Language, false), def) {
		return def, nil
	}
	if c := e.capable(req.Language, false); len(c) > 0 {
		return c[0], nil
	}
	return "", badRequest("no loaded backend runs %s (loaded plugins: %s); run `mcp-forge doctor`", req.Language, strings.Join(e.plugins.Names(), ", "))
}

func suggest(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return " (" + strings.Join(names, ", ") + ")"
}

func (e *Engine) validate(req Request) error {
	if strings.TrimSpace(req.Code) == "" {
		return badRequest("code is empty: pass the %s source to run in the code argument", req.Language)
	}
	if max, _ := config.ParseSize(e.cfg.Execution.MaxCodeSize); int64(len(req.Code)) > max {
		return badRequest("code is %d bytes, over the %s limit (execution.max_code_size); send less code, or load data from files", len(req.Code), e.cfg.Execution.MaxCodeSize)
	}
	if len(req.MCPTools) > 0 {
		return badRequest("mcp_tools %v: calling MCP tools from the sandbox needs the mcpbridge plugin, which is not loaded", req.MCPTools)
	}
	if req.CustomImage != "" {
		if err := e.pol.CheckImage(req.CustomImage); err != nil {
			return badRequest("custom_image %q is not allowed: it must match images.allowed %v", req.CustomImage, e.pol.Settings().AllowedImages)
		}
	}
	for k := range req.Environment {
		if !envName.MatchString(k) {
			return badRequest("environment variable name %q is invalid: use letters, digits and '_', not starting with a digit", k)
		}
		if strings.HasPrefix(k, "FORGE_") {
			return badRequest("environment variable %q: the FORGE_ prefix is reserved", k)
		}
	}
	if req.Timeout < 0 {
		return badRequest("timeout %d: must be a positive number of seconds", req.Timeout)
	}
	if max := e.cfg.Execution.MaxTimeout; req.Timeout > max {
		return badRequest("timeout %d s exceeds the maximum %d s (execution.max_timeout)", req.Timeout, max)
	}
	return nil
}

// Execute runs a request and returns the backend's result. User-code
// failures are in the result; errors are bad requests (*RequestError) or
// failures of the server, the plugin or the engine.
func (e *Engine) Execute(ctx context.Context, req Request, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	if err := e.validate(req); err != nil {
		return backend.ExecuteResult{}, err
	}
	name, err := e.pick(req)
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	timeout := e.cfg.Execution.DefaultTimeout
	if req.Timeout > 0 {
		timeout = req.Timeout
	}
	runID := newID()
	codeHash := audit.HashCode(req.Code)
	e.rec.Record(audit.Entry{Event: audit.ExecutionRequest, SessionID: req.SessionID, UserID: req.Client, Success: true, Details: map[string]any{
		"run_id": runID, "language": req.Language, "backend": name, "code_sha256": codeHash, "code_bytes": len(req.Code),
		"timeout_s": timeout, "image": req.CustomImage, "env_names": keys(req.Environment),
	}})
	maxOut, _ := config.ParseSize(e.cfg.Execution.MaxOutput)
	maxImg, _ := config.ParseSize(e.cfg.Execution.MaxImageSize)
	breq := backend.ExecuteRequest{
		Code: req.Code, Language: req.Language, Image: req.CustomImage, Timeout: time.Duration(timeout) * time.Second,
		Env: req.Environment, MaxOutputBytes: maxOut, MaxImageBytes: maxImg, SessionID: req.SessionID, RunID: runID,
	}
	// Wait for a slot: a burst of calls must not start unbounded containers.
	select {
	case e.slots <- struct{}{}:
		defer func() { <-e.slots }()
	case <-ctx.Done():
		e.complete(req, runID, name, backend.ExecuteResult{}, ctx.Err())
		return backend.ExecuteResult{}, ctx.Err()
	}
	var res backend.ExecuteResult
	if req.SessionID != "" {
		res, err = e.executeSession(ctx, req, name, breq, emit)
	} else {
		var b backend.Backend
		if b, err = e.plugins.Backend(ctx, name); err == nil {
			res, err = b.Execute(ctx, breq)
		}
	}
	if res.Error != nil && strings.Contains(res.Error.Message+res.Stderr, "No space left on device") {
		res.Notices = append(res.Notices, fmt.Sprintf("the working directory is limited to %s (volumes.session_quota); write less, or to /tmp (limited by security.tmpfs_size)", e.cfg.Volumes.SessionQuota))
	}
	if err == nil {
		res.Notices = append(res.Notices, e.resultNotices()...) // notices.go
	}
	e.complete(req, runID, name, res, err)
	return res, err
}

func (e *Engine) complete(req Request, runID, name string, res backend.ExecuteResult, err error) {
	entry := audit.Entry{Event: audit.ExecutionComplete, SessionID: req.SessionID, UserID: req.Client, Success: err == nil && res.Success,
		Details: map[string]any{"run_id": runID, "backend": name, "duration_ms": res.Duration.Milliseconds(), "exit_code": res.ExitCode}}
	if res.Error != nil {
		entry.Details["error_name"] = res.Error.Name
	}
	if err != nil {
		entry.Severity, entry.Error = audit.Error, err.Error()
		var re *RequestError
		if errors.As(err, &re) {
			entry.Severity = audit.Warning
		}
	}
	e.rec.Record(entry)
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func newID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
