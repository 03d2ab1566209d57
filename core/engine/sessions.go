package engine

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/periodic"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
)

// Session states. A session is "starting" until its kernel is up, "busy"
// while a call runs in it, "idle" between calls and "dead" once its kernel
// is gone (the next call or restart_session starts a new one). A destroyed
// session is "gone": out of the table, kept only by calls that held it.
const (
	StateStarting = "starting"
	StateIdle     = "idle"
	StateBusy     = "busy"
	StateDead     = "dead"
	stateGone     = "gone"
)

// Session is a stateful session as the engine tracks it. Fields are read
// under Engine.mu; operations on the kernel hold the session's own lock.
type Session struct {
	ID         string // the id its owner chose; unique only per owner
	Internal   string // internalID(Owner, ID): the id below the engine (plugins, workspace, containers, audit)
	Backend    string
	Language   string
	Owner      string // the MCP connection that created it
	Created    time.Time
	LastActive time.Time
	State      string
	LostReason string
	Executions int

	Docs        map[string]string
	Note        string
	DocsUpdated time.Time
	Variables   []backend.Variable
	VarsUpdated time.Time
	VarsError   string

	start backend.OpenSessionRequest // how it was opened; a dead kernel is restarted the same way
	op    sync.Mutex
	grant *toolbridge.Grant // the session's tool grant (mounted from the start), or nil
	// pending: the owner has a checkpoint of this session (a server restart,
	// the idle reaper), restored when its first kernel starts. Under op.
	pending bool
}

// SessionView is what tools and resources show of a session. Only the id is
// always present: the rest is omitted when empty, so that an error result
// (which knows only the id) has the same shape.
type SessionView struct {
	ID                   string             `json:"session_id" jsonschema:"the session id"`
	Language             string             `json:"language,omitempty" jsonschema:"the language the session runs"`
	Backend              string             `json:"backend,omitempty" jsonschema:"the backend plugin that keeps the session"`
	State                string             `json:"state,omitempty" jsonschema:"starting, idle, busy or dead (a dead session is restarted by the next call)"`
	Created              time.Time          `json:"created,omitzero"`
	LastActivity         time.Time          `json:"last_activity,omitzero"`
	Executions           int                `json:"executions,omitempty"`
	LostReason           string             `json:"lost_reason,omitempty" jsonschema:"why the kernel died, for a dead session"`
	Note                 string             `json:"note,omitempty"`
	Documented           map[string]string  `json:"documented_variables,omitempty" jsonschema:"variable name → its documentation"`
	DocumentationUpdated time.Time          `json:"documentation_updated,omitzero"`
	Variables            []backend.Variable `json:"variables,omitempty" jsonschema:"the session's variables at the last introspection"`
	IntrospectedAt       time.Time          `json:"introspected_at,omitzero"`
	IntrospectionError   string             `json:"introspection_error,omitempty"`
	Undocumented         []string           `json:"undocumented,omitempty" jsonschema:"variables without documentation"`
}

// ErrNoSession is an unknown session id (or one of another connection).
var ErrNoSession = errors.New("no such session")

// sessionKey is how the engine finds a session: ids are chosen by their
// owners, so two owners (tenants over HTTP, connections over stdio) may
// both call theirs "main".
type sessionKey struct{ owner, id string }

// internalIDHash is how many hex digits of the owner hash an internal id
// carries: 64 bits, so that collisions among one server's sessions are
// beyond reach.
const internalIDHash = 16

// internalID names a session below the engine: plugins, the host services,
// its workspace directory, its container's label and the audit log all see
// this id, never the bare user id, so sessions of two owners with the same
// id never share a kernel, a directory or an audit trail. It keeps a
// readable prefix of the user id for operators and stays within
// workspace.SessionIDPattern (48 characters: kernel socket paths must fit
// the 107-byte unix limit): at most 31 characters of the id, '-', and 16
// hex digits of a hash of (owner, id). It is stable across restarts.
func internalID(owner, id string) string {
	h := sha256.Sum256([]byte(owner + "\x00" + id))
	prefix := id
	if max := 47 - internalIDHash; len(prefix) > max {
		prefix = prefix[:max]
	}
	return prefix + "-" + hex.EncodeToString(h[:])[:internalIDHash]
}

func (s *Session) view() SessionView {
	v := SessionView{ID: s.ID, Language: s.Language, Backend: s.Backend, State: s.State, Created: s.Created, LastActivity: s.LastActive,
		Executions: s.Executions, LostReason: s.LostReason, Note: s.Note, DocumentationUpdated: s.DocsUpdated,
		Variables: s.Variables, IntrospectedAt: s.VarsUpdated, IntrospectionError: s.VarsError}
	if len(s.Docs) > 0 {
		v.Documented = make(map[string]string, len(s.Docs))
		for k, d := range s.Docs {
			v.Documented[k] = d
		}
	}
	for _, x := range s.Variables {
		if _, ok := s.Docs[x.Name]; !ok {
			v.Undocumented = append(v.Undocumented, x.Name)
		}
	}
	return v
}

// lookup returns client's session id. Sessions are namespaced by owner:
// another owner's session with the same id is not seen at all, so the
// answer (and the audit rule, session-not-found) is that of an id nobody
// has opened.
func (e *Engine) lookup(client, id, tool string) (*Session, error) {
	if workspace.CheckSessionID(id) != nil {
		return nil, e.refuse(client, id, tool, refusal(RuleSessionID, "session_id %s is invalid: use 1-48 letters, digits, '-' or '_', starting with a letter or digit", quoted(id)), nil)
	}
	e.mu.Lock()
	s := e.sessions[sessionKey{client, id}]
	e.mu.Unlock()
	if s == nil {
		return nil, e.refuse(client, id, tool, &RequestError{Rule: RuleSessionNotFound, Err: ErrNoSession,
			Msg: fmt.Sprintf("%v %q for this connection (sessions are created by an execute_<language> call with a session_id; list_sessions shows yours)", ErrNoSession, id)}, nil)
	}
	return s, nil
}

func (e *Engine) sessionBackend(ctx context.Context, name string) (backend.SessionBackend, error) {
	b, err := e.plugins.Backend(ctx, name)
	if err != nil {
		return nil, err
	}
	sb, ok := b.(backend.SessionBackend)
	if !ok {
		return nil, fmt.Errorf("backend %s has no sessions", name)
	}
	return sb, nil
}

// acquire finds or creates (as "starting") the session for an execute or a
// restore. It is the one place where a live session is admitted: the
// owner's quota (SessionQuota) and sessions.max_concurrent are checked here,
// under the lock that adds the session, whichever tool asks.
func (e *Engine) acquire(ctx context.Context, req Request, backendName, tool string) (*Session, bool, error) {
	key := sessionKey{req.Client, req.SessionID}
	// A checkpoint matters only to a session that is not in the table, and
	// reading it is file I/O: a live session (every execute but a session's
	// first) skips it. Read outside the lock, so looked up again after.
	var ckpt ckptMeta
	var hasCkpt, read bool
	e.mu.Lock()
	s, n := e.sessions[key], len(e.sessions)
	for s == nil && !read {
		e.mu.Unlock()
		ckpt, hasCkpt = e.readCheckpoint(req.Client, req.SessionID) // checkpoint.go
		read = true
		e.mu.Lock()
		s, n = e.sessions[key], len(e.sessions)
	}
	if s == nil && hasCkpt && ckpt.Language != req.Language {
		e.mu.Unlock()
		have := e.LanguageName(ckpt.Language)
		return nil, false, refusal(RuleSessionLanguage, "session %q has a checkpoint of %s (list_sessions shows it): run %s code in it with execute_%s, use another session_id, or destroy_session it first",
			req.SessionID, have, have, ckpt.Language)
	}
	if s == nil && e.SessionQuota != nil {
		var live []string
		for k := range e.sessions {
			if k.owner == req.Client {
				live = append(live, k.id)
			}
		}
		if err := e.SessionQuota.CheckSessions(req.Client, live); err != nil {
			e.mu.Unlock()
			e.SessionQuota.Refused(ctx, req.Client, tool, req.SessionID, err)
			return nil, false, err
		}
	}
	if s == nil && n < e.cfg.Sessions.MaxConcurrent {
		now := time.Now()
		internal := internalID(req.Client, req.SessionID)
		s = &Session{ID: req.SessionID, Internal: internal, Backend: backendName, Language: req.Language, Owner: req.Client, Created: now, LastActive: now, State: StateStarting,
			Docs: map[string]string{}, start: backend.OpenSessionRequest{SessionID: internal, Image: req.CustomImage, Env: req.Environment}, pending: hasCkpt}
		e.sessions[key] = s
		e.mu.Unlock()
		return s, true, nil
	}
	e.mu.Unlock()
	// Language never changes: no lock needed to read it.
	switch {
	case s == nil:
		return nil, false, refusal(RuleSessionsMax, "cannot start session %q: %d sessions are open, the limit (sessions.max_concurrent = %d); destroy one with destroy_session, or wait for idle sessions to be removed after sessions.idle_timeout (%d s)",
			req.SessionID, n, e.cfg.Sessions.MaxConcurrent, e.cfg.Sessions.IdleTimeout)
	case s.Language != req.Language:
		have := e.LanguageName(s.Language)
		return nil, false, refusal(RuleSessionLanguage, "session %q runs %s: run %s code in it with execute_%s, or use another session_id for %s code",
			req.SessionID, have, have, s.Language, e.LanguageName(req.Language))
	}
	return s, false, nil
}

// drop takes a session out of the table.
func (e *Engine) drop(s *Session) {
	e.mu.Lock()
	if key := (sessionKey{s.Owner, s.ID}); e.sessions[key] == s {
		delete(e.sessions, key)
	}
	s.State = stateGone
	e.mu.Unlock()
}

// open starts the session's kernel (caller holds s.op); restart: the
// session had one, and its workspace stays.
func (e *Engine) open(ctx context.Context, s *Session, restart bool) error {
	sb, err := e.sessionBackend(ctx, s.Backend)
	if err == nil {
		start := time.Now()
		req := s.start
		if restart {
			req.WorkspaceID = cmp.Or(e.ws.Bound(s.Internal), s.Internal)
		}
		var info backend.SessionInfo
		info, err = sb.OpenSession(ctx, req)
		warm := err == nil && info.WorkspaceID != "" && info.WorkspaceID != s.Internal
		if warm {
			// A kernel pre-started under a pool id: its workspace becomes
			// this session's. A binding the workspace manager refuses (not
			// that plugin's, already another session's) fails the start.
			if berr := e.ws.Bind(s.Internal, info.WorkspaceID, s.Backend); berr != nil {
				_ = sb.CloseSession(context.WithoutCancel(ctx), s.Internal)
				err = fmt.Errorf("the %s backend handed over a kernel whose workspace cannot be this session's: %w", s.Backend, berr)
			}
		}
		took := time.Since(start)
		d := map[string]any{"session": s.ID, "backend": s.Backend, "language": s.Language, "image": s.start.Image, "start_ms": took.Milliseconds(), "warm": warm}
		if warm {
			d["workspace"] = info.WorkspaceID
		}
		if info.ContainerID != "" {
			d["container"] = info.ContainerID
		}
		entry := audit.Entry{Event: audit.SessionCreate, SessionID: s.Internal, UserID: s.Owner, Success: err == nil, Error: audit.ErrText(err), Severity: severity(err), Details: d}
		if warm {
			// A warm kernel's container was created and audited before any
			// session asked for it: handing it over creates nothing, so
			// this entry is the one that must be written, or nothing runs.
			if aerr := audit.Must(e.rec, entry); aerr != nil {
				_ = sb.CloseSession(context.WithoutCancel(ctx), s.Internal)
				return fmt.Errorf("execution refused: the audit log cannot be written (%v), and nothing runs unaudited; fix the log's path, permissions or disk space (`mcp-forge doctor` says what is wrong)", aerr)
			}
		} else {
			e.rec.Record(entry)
		}
		if err == nil {
			e.countStart(s.Backend, warm, took)
		}
	}
	return err
}

// SessionStarts counts how one backend's kernels were started: taken warm
// from its pool or started cold, and how long the last of each took.
type SessionStarts struct {
	Warm       int     `json:"warm_starts"`
	Cold       int     `json:"cold_starts"`
	LastWarmMS float64 `json:"last_warm_start_ms,omitempty"`
	LastColdMS float64 `json:"last_cold_start_ms,omitempty"`
}

func (e *Engine) countStart(name string, warm bool, took time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.starts == nil {
		e.starts = map[string]*SessionStarts{}
	}
	st := e.starts[name]
	if st == nil {
		st = &SessionStarts{}
		e.starts[name] = st
	}
	ms := float64(took.Microseconds()) / 1000
	if warm {
		st.Warm, st.LastWarmMS = st.Warm+1, ms
	} else {
		st.Cold, st.LastColdMS = st.Cold+1, ms
	}
}

// SessionStartStats reports SessionStarts per backend (environment/info).
func (e *Engine) SessionStartStats() map[string]SessionStarts {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]SessionStarts, len(e.starts))
	for k, v := range e.starts {
		out[k] = *v
	}
	return out
}

func severity(err error) string {
	if err != nil {
		return audit.Error
	}
	return audit.Info
}

// executeSession runs a request in its session, starting the kernel on
// first use and restarting a dead one with a notice that state was lost.
func (e *Engine) executeSession(ctx context.Context, s *Session, created bool, breq backend.ExecuteRequest, tools toolRun, emit func(backend.StreamEvent)) (backend.ExecuteResult, []OutputFile, error) {
	s.op.Lock()
	defer s.op.Unlock()
	before := e.outputSnapshot(s.Internal) // under s.op: only this run's files come back
	var notices []string
	switch state := e.stateOf(s); {
	case state == stateGone:
		return backend.ExecuteResult{}, nil, fmt.Errorf("session %q was destroyed while this call waited for it", s.ID)
	case created:
		if err := e.grantSession(ctx, s, tools); err != nil {
			e.drop(s)
			e.removeWorkspace(s.Internal)
			return backend.ExecuteResult{}, nil, err
		}
		if err := e.open(ctx, s, false); err != nil {
			e.closeGrant(s)
			e.drop(s)
			e.removeWorkspace(s.Internal)
			return backend.ExecuteResult{}, nil, err
		}
		if s.pending {
			notices = append(notices, e.restorePending(ctx, s))
			before = e.outputSnapshot(s.Internal) // restored files are not this run's output
		}
	case state == StateDead:
		reason := s.LostReason
		if err := e.reopen(ctx, s); err != nil {
			return backend.ExecuteResult{}, nil, fmt.Errorf("session %q could not be restarted after its kernel died: %w", s.ID, err)
		}
		notices = append(notices, fmt.Sprintf("session %q was restarted before this run: %s. Variables and imports from before are gone.", s.ID, reason))
	default:
		if len(breq.Env) > 0 {
			notices = append(notices, "environment applies when a session starts; it was ignored for this existing session")
		}
		if breq.Image != "" && breq.Image != s.start.Image {
			notices = append(notices, "custom_image applies when a session starts; this session keeps its image")
		}
	}
	breq.Image, breq.Env = s.start.Image, s.start.Env
	if len(tools.ids) > 0 && !created {
		if s.grant == nil {
			return backend.ExecuteResult{}, nil, refusal(RuleMCPTools, "session %q was started without mcp_tools: a session's tools directory is mounted when its kernel starts, so pass mcp_tools on a session's first call (destroy_session, then call again with mcp_tools); tools can be added on later calls of such a session", s.ID)
		}
		// The container mounted the grant at its start: the new tools
		// appear in the same directory.
		if err := s.grant.Extend(ctx, tools.ids); err != nil {
			return backend.ExecuteResult{}, nil, err
		}
		if hint := bridge.LateToolsHint(s.Language); hint != "" {
			notices = append(notices, hint)
		}
	}
	if s.grant != nil {
		s.grant.BeginRun(breq.RunID, tools.client, tools.approve) // a fresh call budget per execute
		breq.ToolsGrant = s.grant.Token()
	}
	e.setState(s, StateBusy)
	sb, err := e.sessionBackend(ctx, s.Backend)
	var res backend.ExecuteResult
	if err == nil {
		res, err = sb.ExecuteInSession(ctx, breq, emit)
	}
	e.mu.Lock()
	s.LastActive = time.Now()
	s.Executions++
	var ce *plugins.CrashError
	switch {
	case errors.As(err, &ce):
		s.State, s.LostReason = StateDead, "the "+ce.Plugin+" plugin crashed"
	case err != nil && s.State == StateBusy:
		s.State = StateIdle
	case res.SessionDead:
		s.State, s.LostReason = StateDead, "the kernel died"
		if res.Error != nil {
			s.LostReason = res.Error.Message
		}
	case s.State == StateBusy: // a crash elsewhere may have marked it dead meanwhile
		s.State = StateIdle
	}
	e.mu.Unlock()
	res.Notices = append(notices, res.Notices...)
	files, more := e.outputFiles(s.Internal, before)
	res.Notices = append(res.Notices, more...)
	return res, files, err
}

// reopen replaces a dead kernel with a new one started like the first
// (caller holds s.op).
func (e *Engine) reopen(ctx context.Context, s *Session) error {
	if sb, err := e.sessionBackend(ctx, s.Backend); err == nil {
		_ = sb.CloseSession(ctx, s.Internal) // what is left of the old one
	}
	if err := e.open(ctx, s, true); err != nil {
		return err
	}
	e.mu.Lock()
	s.State, s.LostReason = StateIdle, ""
	e.mu.Unlock()
	return nil
}

func (e *Engine) stateOf(s *Session) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return s.State
}

func (e *Engine) setState(s *Session, st string) {
	e.mu.Lock()
	s.State = st
	e.mu.Unlock()
}

// introspect refreshes a session's variables (caller holds s.op).
func (e *Engine) introspect(ctx context.Context, s *Session) {
	if e.stateOf(s) == StateDead {
		return
	}
	sb, err := e.sessionBackend(ctx, s.Backend)
	var vars []backend.Variable
	if err == nil {
		vars, err = sb.Inspect(ctx, s.Internal)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		s.VarsError = err.Error()
		return
	}
	s.Variables, s.VarsUpdated, s.VarsError = vars, time.Now(), ""
}

// View returns a session's state, refreshing the variables when asked.
func (e *Engine) View(ctx context.Context, client, id string, refresh bool) (SessionView, error) {
	s, err := e.lookup(client, id, "resources/read")
	if err != nil {
		return SessionView{}, err
	}
	if refresh {
		s.op.Lock()
		e.introspect(ctx, s)
		s.op.Unlock()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return s.view(), nil
}

// DocumentState records descriptions of variables and a note, then
// refreshes the introspection.
func (e *Engine) DocumentState(ctx context.Context, client, id string, vars map[string]string, note *string, clear bool) (SessionView, error) {
	const tool = "document_state"
	s, err := e.lookup(client, id, tool)
	if err != nil {
		return SessionView{}, err
	}
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		if name == "" || len(name) > 200 {
			return SessionView{}, e.refuse(client, id, tool, refusal(RuleVariableName, "variable name %s: must be 1-200 characters", quoted(name)), nil)
		}
		if len(vars[name]) > MaxDocBytes {
			return SessionView{}, e.refuse(client, id, tool, refusal(RuleStateDocsSize, "the description of variable %s is %d bytes; at most %d are kept: shorten it", quoted(name), len(vars[name]), MaxDocBytes), nil)
		}
	}
	if note != nil && len(*note) > MaxNoteBytes {
		return SessionView{}, e.refuse(client, id, tool, refusal(RuleStateDocsSize, "the note is %d bytes; at most %d are kept: shorten it", len(*note), MaxNoteBytes), nil)
	}
	s.op.Lock()
	defer s.op.Unlock()
	e.mu.Lock()
	n := len(s.Docs)
	if clear {
		n = 0
	}
	for k, d := range vars {
		_, had := s.Docs[k]
		switch {
		case d != "" && (!had || clear):
			n++
		case d == "" && had && !clear:
			n--
		}
	}
	if n > MaxDocsVariables {
		e.mu.Unlock()
		return SessionView{}, e.refuse(client, id, tool, refusal(RuleStateDocsSize, "session %q would have %d documented variables; at most %d are kept: clear or remove some (an empty description removes one)", id, n, MaxDocsVariables), nil)
	}
	if clear {
		s.Docs, s.Note = map[string]string{}, ""
	}
	for k, d := range vars {
		if d == "" {
			delete(s.Docs, k)
		} else {
			s.Docs[k] = d
		}
	}
	if note != nil {
		s.Note = *note
	}
	s.DocsUpdated = time.Now()
	s.LastActive = time.Now()
	e.mu.Unlock()
	e.introspect(ctx, s)
	e.mu.Lock()
	defer e.mu.Unlock()
	return s.view(), nil
}

// RestartSession clears a session's namespace, keeping its container; a
// dead session gets a new kernel.
func (e *Engine) RestartSession(ctx context.Context, client, id string) (SessionView, error) {
	s, err := e.lookup(client, id, "restart_session")
	if err != nil {
		return SessionView{}, err
	}
	e.claim(ctx, s, false)
	defer s.op.Unlock()
	switch e.stateOf(s) {
	case stateGone:
		return SessionView{}, fmt.Errorf("restart session %q: it was destroyed meanwhile", id)
	case StateDead:
		err = e.reopen(ctx, s)
	default:
		var sb backend.SessionBackend
		if sb, err = e.sessionBackend(ctx, s.Backend); err == nil {
			err = sb.RestartSession(ctx, s.Internal)
		}
	}
	e.rec.Record(audit.Entry{Event: "session.restart", SessionID: s.Internal, UserID: client, Success: err == nil, Error: audit.ErrText(err), Severity: severity(err),
		Details: map[string]any{"session": id}})
	if err != nil {
		return SessionView{}, fmt.Errorf("restart session %q: %w", id, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s.State, s.LastActive, s.Variables, s.VarsUpdated = StateIdle, time.Now(), nil, time.Time{}
	return s.view(), nil
}

// DestroySession removes a session's container and directory.
func (e *Engine) DestroySession(ctx context.Context, client, id string) error {
	if workspace.CheckSessionID(id) == nil && !e.live(client, id) && e.removeCheckpoint(client, id) {
		// Only a checkpoint is left (after a restart or the idle reaper).
		e.rec.Record(audit.Entry{Event: audit.SessionDestroy, SessionID: internalID(client, id), UserID: client, Success: true, Severity: audit.Info,
			Details: map[string]any{"session": id, "reason": "destroyed by the client: its checkpoint removed"}})
		return nil
	}
	s, err := e.lookup(client, id, "destroy_session")
	if err != nil {
		return err
	}
	closed := e.claim(ctx, s, true)
	defer s.op.Unlock()
	defer e.removeCheckpoint(s.Owner, s.ID) // checkpoint.go: a checkpoint goes with its session
	if closed {
		return e.destroyLocked(ctx, s, "destroyed by the client while code ran", true)
	}
	return e.destroyLocked(ctx, s, "destroyed by the client", false)
}

// claimGrace is how long destroy waits for interrupted code to stop before
// it closes the kernel under it.
var claimGrace = 3 * time.Second

// claim takes a session's operation lock for destroy or restart. Code
// running in the session is interrupted first, so the client does not wait
// for code it wants gone; when kill is set and the code still runs after
// claimGrace (a kernel that ignores interrupts, a C loop), the kernel is
// closed under it and claim reports closed.
func (e *Engine) claim(ctx context.Context, s *Session, kill bool) (closed bool) {
	if s.op.TryLock() {
		return false
	}
	sb, err := e.sessionBackend(ctx, s.Backend)
	if err != nil {
		s.op.Lock()
		return false
	}
	if err := sb.Interrupt(ctx, s.Internal); err != nil {
		e.log.Warn("could not interrupt a session's running code", "session", s.Internal, "error", err)
	}
	locked := make(chan struct{})
	go func() { s.op.Lock(); close(locked) }()
	select {
	case <-locked:
		return false
	case <-time.After(claimGrace):
	}
	if !kill {
		<-locked
		return false
	}
	err = sb.CloseSession(ctx, s.Internal)
	<-locked
	return err == nil
}

// live reports whether client has a session id in the table.
func (e *Engine) live(client, id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sessions[sessionKey{client, id}] != nil
}

// destroyLocked closes the kernel (unless claim already did) and removes
// the session (caller holds s.op).
func (e *Engine) destroyLocked(ctx context.Context, s *Session, why string, closed bool) error {
	if e.stateOf(s) == stateGone {
		return nil
	}
	var err error
	if !closed {
		var sb backend.SessionBackend
		if sb, err = e.sessionBackend(ctx, s.Backend); err == nil {
			err = sb.CloseSession(ctx, s.Internal)
		}
	}
	e.drop(s)
	e.closeGrant(s)
	e.removeWorkspace(s.Internal)
	e.rec.Record(audit.Entry{Event: audit.SessionDestroy, SessionID: s.Internal, UserID: s.Owner, Success: err == nil, Error: audit.ErrText(err), Severity: severity(err),
		Details: map[string]any{"session": s.ID, "reason": why, "executions": s.Executions}})
	return err
}

// removeWorkspace removes the workspace named by a session's internal id.
func (e *Engine) removeWorkspace(id string) {
	if err := e.ws.RemoveSession(id); err != nil {
		e.log.Warn("could not remove a session's files", "session", id, "error", err)
	}
}

// Sessions lists the sessions of one connection, or with all every one.
// Variables are left out (the state resource has them).
func (e *Engine) Sessions(client string, all bool) []SessionView {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []SessionView{}
	for _, s := range e.sessions {
		if all || s.Owner == client {
			v := s.view()
			v.Variables = nil
			out = append(out, v)
		}
	}
	// With all, two owners' sessions may share an id: Created orders them.
	sort.Slice(out, func(i, j int) bool {
		if out[i].ID != out[j].ID {
			return out[i].ID < out[j].ID
		}
		return out[i].Created.Before(out[j].Created)
	})
	return out
}

// idle reports whether a session has waited longer than limit for a call.
func idle(s *Session, limit time.Duration) bool {
	return s.State != StateBusy && s.State != StateStarting && s.State != stateGone && time.Since(s.LastActive) > limit
}

// ReapIdle destroys sessions idle longer than sessions.idle_timeout.
func (e *Engine) ReapIdle(ctx context.Context) int {
	limit := time.Duration(e.cfg.Sessions.IdleTimeout) * time.Second
	e.mu.Lock()
	var candidates []*Session
	for _, s := range e.sessions {
		if idle(s, limit) {
			candidates = append(candidates, s)
		}
	}
	e.mu.Unlock()
	n := 0
	for _, s := range candidates {
		s.op.Lock()
		// A call may have used it since the scan.
		e.mu.Lock()
		still := idle(s, limit)
		e.mu.Unlock()
		if still {
			e.log.Info("removing idle session", "session", s.ID, "owner", s.Owner, "internal_id", s.Internal, "idle", time.Since(s.LastActive).Round(time.Second))
			_ = e.destroyLocked(ctx, s, fmt.Sprintf("idle for more than sessions.idle_timeout (%d s)", e.cfg.Sessions.IdleTimeout), false)
			n++
		}
		s.op.Unlock()
	}
	return n
}

// Reaper runs ReapIdle and ExpireCheckpoints every sessions.cleanup_interval until ctx ends.
func (e *Engine) Reaper(ctx context.Context) {
	e.ExpireCheckpoints(time.Now()) // a restart after a long stop finds expired ones
	periodic.Every(ctx, time.Duration(e.cfg.Sessions.CleanupInterval)*time.Second, func(ctx context.Context) bool {
		e.ReapIdle(ctx)
		e.ExpireCheckpoints(time.Now())
		return true
	})
}

// MarkBackendDead marks every session of a crashed plugin dead.
func (e *Engine) MarkBackendDead(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.sessions {
		if s.Backend == name {
			s.State, s.LostReason = StateDead, "the "+name+" plugin crashed"
		}
	}
}

// HoldsSession reports whether internal is the id below the engine of a
// session it keeps (live or dead), whose workspace must stay.
func (e *Engine) HoldsSession(internal string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.sessions {
		if s.Internal == internal {
			return true
		}
	}
	return false
}

// CloseAll destroys every session (server shutdown). With
// sessions.checkpoint_on_shutdown, each live idle session is checkpointed
// first, so its owner finds it again after a restart.
func (e *Engine) CloseAll(ctx context.Context) {
	e.mu.Lock()
	all := make([]*Session, 0, len(e.sessions))
	for _, s := range e.sessions {
		all = append(all, s)
	}
	e.mu.Unlock()
	for _, s := range all {
		s.op.Lock()
		if e.cfg.Sessions.CheckpointOnShutdown && e.checkpointCode(s.Backend) != nil && e.stateOf(s) == StateIdle {
			if info, err := e.checkpointLocked(ctx, s, "server shutdown"); err != nil {
				e.log.Warn("could not checkpoint a session at shutdown", "session", s.ID, "owner", s.Owner, "error", err)
			} else {
				e.log.Info("checkpointed a session at shutdown", "session", s.ID, "owner", s.Owner, "saved", len(info.Saved), "bytes", info.Bytes)
			}
		}
		_ = e.destroyLocked(ctx, s, "server shutdown", false)
		s.op.Unlock()
	}
}

// grantSession gives a new session a tool grant when its first call asks
// for tools, so that its container mounts the tools directory from the
// start and later executes can add tools to it (caller holds s.op). A
// session started without tools gets no grant: its kernel can then come
// from the warm pool, which holds containers without a tools mount.
func (e *Engine) grantSession(ctx context.Context, s *Session, tools toolRun) error {
	if e.tools == nil || len(tools.ids) == 0 || !e.forwardsGrants(s.Backend) {
		return nil
	}
	g, err := e.tools.Issue(ctx, toolbridge.IssueRequest{Owner: s.Backend, Client: s.Owner, Session: s.Internal, Language: s.Language, Tools: tools.ids, Approve: tools.approve})
	if err != nil {
		return err
	}
	s.grant, s.start.ToolsGrant = g, g.Token()
	return nil
}

// closeGrant ends a session's tool grant (caller holds s.op).
func (e *Engine) closeGrant(s *Session) {
	if s.grant != nil {
		s.grant.Close()
		s.grant, s.start.ToolsGrant = nil, ""
	}
}
