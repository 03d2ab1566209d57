package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/periodic"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Session is a stateful session as the engine tracks it. Fields are read
// under Engine.mu; operations on the kernel hold the session's own lock.
type Session struct {
	ID         string
	Backend    string
	Language   string
	Owner      string // the MCP connection that created it
	Created    time.Time
	LastActive time.Time
	State      string // "idle", "busy", "dead"
	LostReason string
	Executions int

	Docs         map[string]string
	Note         string
	DocsUpdated  time.Time
	Variables    []backend.Variable
	VarsUpdated  time.Time
	VarsError    string
	restartNotes []string

	op sync.Mutex
}

// SessionView is what tools and resources show of a session.
type SessionView struct {
	ID                   string             `json:"session_id"`
	Language             string             `json:"language"`
	Backend              string             `json:"backend"`
	State                string             `json:"state"`
	Created              time.Time          `json:"created"`
	LastActivity         time.Time          `json:"last_activity"`
	Executions           int                `json:"executions"`
	LostReason           string             `json:"lost_reason,omitempty"`
	Note                 string             `json:"note,omitempty"`
	Documented           map[string]string  `json:"documented_variables"`
	DocumentationUpdated *time.Time         `json:"documentation_updated,omitempty"`
	Variables            []backend.Variable `json:"variables"`
	IntrospectedAt       *time.Time         `json:"introspected_at,omitempty"`
	IntrospectionError   string             `json:"introspection_error,omitempty"`
	Undocumented         []string           `json:"undocumented,omitempty"`
}

// ErrNoSession is an unknown session id (or one of another connection).
var ErrNoSession = errors.New("no such session")

func (s *Session) view() SessionView {
	v := SessionView{ID: s.ID, Language: s.Language, Backend: s.Backend, State: s.State, Created: s.Created, LastActivity: s.LastActive,
		Executions: s.Executions, LostReason: s.LostReason, Note: s.Note, Documented: map[string]string{}, Variables: s.Variables, IntrospectionError: s.VarsError}
	for k, d := range s.Docs {
		v.Documented[k] = d
	}
	if !s.DocsUpdated.IsZero() {
		t := s.DocsUpdated
		v.DocumentationUpdated = &t
	}
	if !s.VarsUpdated.IsZero() {
		t := s.VarsUpdated
		v.IntrospectedAt = &t
	}
	if v.Variables == nil {
		v.Variables = []backend.Variable{}
	}
	for _, x := range s.Variables {
		if _, ok := s.Docs[x.Name]; !ok {
			v.Undocumented = append(v.Undocumented, x.Name)
		}
	}
	return v
}

// lookup returns the session if it exists and belongs to client.
func (e *Engine) lookup(client, id string) (*Session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.sessions[id]
	if s == nil || s.Owner != client {
		return nil, fmt.Errorf("%w %q for this connection (sessions are created by execute_python with a session_id)", ErrNoSession, id)
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

// acquire finds or creates the session for an execute, reserving a slot.
func (e *Engine) acquire(req Request, backendName string) (*Session, bool, error) {
	if workspace.CheckSessionID(req.SessionID) != nil {
		return nil, false, badRequest("session_id %q is invalid: use 1-48 letters, digits, '-' or '_', starting with a letter or digit", req.SessionID)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.sessions[req.SessionID]; s != nil {
		if s.Owner != req.Client {
			return nil, false, badRequest("session_id %q is in use by another MCP connection; choose another id", req.SessionID)
		}
		if s.Language != req.Language {
			return nil, false, badRequest("session %q is %s session: run %s code in it with execute_%s, or use another session_id for %s code", req.SessionID, article(LanguageName(s.Language)), LanguageName(s.Language), s.Language, LanguageName(req.Language))
		}
		return s, false, nil
	}
	if n := len(e.sessions); n >= e.cfg.Sessions.MaxConcurrent {
		return nil, false, badRequest("cannot start session %q: %d sessions are open, the limit (sessions.max_concurrent = %d); destroy one with destroy_session, or wait for idle sessions to be removed after sessions.idle_timeout (%d s)",
			req.SessionID, n, e.cfg.Sessions.MaxConcurrent, e.cfg.Sessions.IdleTimeout)
	}
	now := time.Now()
	s := &Session{ID: req.SessionID, Backend: backendName, Language: req.Language, Owner: req.Client, Created: now, LastActive: now, State: "starting", Docs: map[string]string{}}
	e.sessions[req.SessionID] = s
	return s, true, nil
}

func (e *Engine) drop(id string) {
	e.mu.Lock()
	delete(e.sessions, id)
	e.mu.Unlock()
}

func (e *Engine) open(ctx context.Context, s *Session, req Request) error {
	sb, err := e.sessionBackend(ctx, s.Backend)
	if err != nil {
		return err
	}
	start := time.Now()
	_, err = sb.OpenSession(ctx, backend.OpenSessionRequest{SessionID: s.ID, Image: req.CustomImage, Env: req.Environment})
	e.rec.Record(audit.Entry{Event: audit.SessionCreate, SessionID: s.ID, UserID: s.Owner, Success: err == nil, Error: audit.ErrText(err),
		Details: map[string]any{"backend": s.Backend, "language": s.Language, "image": req.CustomImage, "start_ms": time.Since(start).Milliseconds()}})
	return err
}

// executeSession runs a request in its session, creating the session on
// first use and restarting a dead one with a notice that state was lost.
func (e *Engine) executeSession(ctx context.Context, req Request, name string, breq backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	s, created, err := e.acquire(req, name)
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	s.op.Lock()
	defer s.op.Unlock()
	var notices []string
	if created {
		if err := e.open(ctx, s, req); err != nil {
			e.drop(s.ID)
			e.removeWorkspace(s.ID)
			return backend.ExecuteResult{}, err
		}
	} else if e.stateOf(s) == "dead" {
		reason := s.LostReason
		sb, err := e.sessionBackend(ctx, s.Backend)
		if err == nil {
			_ = sb.CloseSession(ctx, s.ID)
		}
		if err := e.open(ctx, s, req); err != nil {
			return backend.ExecuteResult{}, fmt.Errorf("session %q could not be restarted after its kernel died: %w", s.ID, err)
		}
		notices = append(notices, fmt.Sprintf("session %q was restarted before this run: %s. Variables and imports from before are gone.", s.ID, reason))
	} else if len(req.Environment) > 0 {
		notices = append(notices, "environment applies when a session starts; it was ignored for this existing session")
	}
	e.setState(s, "busy")
	sb, err := e.sessionBackend(ctx, s.Backend)
	if err != nil {
		e.setState(s, "dead")
		return backend.ExecuteResult{}, err
	}
	res, err := sb.ExecuteInSession(ctx, breq, emit)
	e.mu.Lock()
	s.LastActive = time.Now()
	s.Executions++
	switch {
	case err != nil:
		var ce *plugins.CrashError
		if errors.As(err, &ce) {
			s.State, s.LostReason = "dead", "the "+ce.Plugin+" plugin crashed"
		} else {
			s.State = "idle"
		}
	case res.SessionDead:
		s.State = "dead"
		if res.Error != nil {
			s.LostReason = res.Error.Message
		}
	default:
		s.State = "idle"
	}
	e.mu.Unlock()
	res.Notices = append(notices, res.Notices...)
	return res, err
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
	if e.stateOf(s) == "dead" {
		return
	}
	sb, err := e.sessionBackend(ctx, s.Backend)
	var vars []backend.Variable
	if err == nil {
		vars, err = sb.Inspect(ctx, s.ID)
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
	s, err := e.lookup(client, id)
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
	s, err := e.lookup(client, id)
	if err != nil {
		return SessionView{}, err
	}
	for name := range vars {
		if name == "" || len(name) > 200 {
			return SessionView{}, badRequest("variable name %q: must be 1-200 characters", name)
		}
	}
	s.op.Lock()
	defer s.op.Unlock()
	e.mu.Lock()
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

// RestartSession clears a session's namespace, keeping its container.
func (e *Engine) RestartSession(ctx context.Context, client, id string) (SessionView, error) {
	s, err := e.lookup(client, id)
	if err != nil {
		return SessionView{}, err
	}
	s.op.Lock()
	defer s.op.Unlock()
	sb, err := e.sessionBackend(ctx, s.Backend)
	if err != nil {
		return SessionView{}, err
	}
	if e.stateOf(s) == "dead" {
		_ = sb.CloseSession(ctx, s.ID)
		err = e.open(ctx, s, Request{})
	} else {
		err = sb.RestartSession(ctx, s.ID)
	}
	if err != nil {
		return SessionView{}, fmt.Errorf("restart session %q: %w", id, err)
	}
	e.mu.Lock()
	s.State, s.LastActive, s.Variables, s.VarsUpdated = "idle", time.Now(), nil, time.Time{}
	e.mu.Unlock()
	e.rec.Record(audit.Entry{Event: "session.restart", SessionID: id, UserID: client, Success: true})
	e.mu.Lock()
	defer e.mu.Unlock()
	return s.view(), nil
}

// DestroySession removes a session's container and directory.
func (e *Engine) DestroySession(ctx context.Context, client, id string) error {
	s, err := e.lookup(client, id)
	if err != nil {
		return err
	}
	return e.destroy(ctx, s, "destroyed by the client")
}

func (e *Engine) destroy(ctx context.Context, s *Session, why string) error {
	s.op.Lock()
	defer s.op.Unlock()
	sb, err := e.sessionBackend(ctx, s.Backend)
	if err == nil {
		err = sb.CloseSession(ctx, s.ID)
	}
	e.drop(s.ID)
	e.removeWorkspace(s.ID)
	e.rec.Record(audit.Entry{Event: audit.SessionDestroy, SessionID: s.ID, UserID: s.Owner, Success: err == nil, Error: audit.ErrText(err),
		Details: map[string]any{"reason": why, "executions": s.Executions}})
	return err
}

func (e *Engine) removeWorkspace(id string) {
	if err := e.ws.RemoveSession(id); err != nil {
		e.log.Warn("could not remove a session's files", "session", id, "error", err)
	}
}

// Sessions lists the sessions of one connection ("" lists all, for the server).
func (e *Engine) Sessions(client string, all bool) []SessionView {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []SessionView
	for _, s := range e.sessions {
		if all || s.Owner == client {
			v := s.view()
			v.Variables = nil
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// ReapIdle destroys sessions idle longer than sessions.idle_timeout.
func (e *Engine) ReapIdle(ctx context.Context) int {
	limit := time.Duration(e.cfg.Sessions.IdleTimeout) * time.Second
	e.mu.Lock()
	var idle []*Session
	for _, s := range e.sessions {
		if s.State != "busy" && s.State != "starting" && time.Since(s.LastActive) > limit {
			idle = append(idle, s)
		}
	}
	e.mu.Unlock()
	for _, s := range idle {
		e.log.Info("removing idle session", "session", s.ID, "idle", time.Since(s.LastActive).Round(time.Second))
		_ = e.destroy(ctx, s, fmt.Sprintf("idle for more than sessions.idle_timeout (%d s)", e.cfg.Sessions.IdleTimeout))
	}
	return len(idle)
}

// Reaper runs ReapIdle every sessions.cleanup_interval until ctx ends.
func (e *Engine) Reaper(ctx context.Context) {
	periodic.Every(ctx, time.Duration(e.cfg.Sessions.CleanupInterval)*time.Second, func(ctx context.Context) bool {
		e.ReapIdle(ctx)
		return true
	})
}

// MarkBackendDead marks every session of a crashed plugin dead.
func (e *Engine) MarkBackendDead(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.sessions {
		if s.Backend == name {
			s.State, s.LostReason = "dead", "the "+name+" plugin crashed"
		}
	}
}

// CloseAll destroys every session (server shutdown).
func (e *Engine) CloseAll(ctx context.Context) {
	e.mu.Lock()
	all := make([]*Session, 0, len(e.sessions))
	for _, s := range e.sessions {
		all = append(all, s)
	}
	e.mu.Unlock()
	for _, s := range all {
		_ = e.destroy(ctx, s, "server shutdown")
	}
}

// LanguageName is how a language is written in messages.
func LanguageName(lang string) string {
	switch lang {
	case "python":
		return "Python"
	case "r":
		return "R"
	}
	return lang
}

func article(name string) string {
	if strings.ContainsRune("AEIOUR", rune(name[0])) {
		return "an " + name
	}
	return "a " + name
}
