// Package session is the registry of stateful sessions: who owns which
// session, its state, the internal id it has below the engine, what its
// client documented of it, and which sessions have been idle too long (the
// reaper's candidates). It keeps no kernel: starting, running and closing
// kernels is the engine's (through the backend plugins); the registry
// holds what the engine knows of each session, under one lock.
package session

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/sandboxgrant"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
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
	StateGone     = "gone"
)

// Rules a session request can break. Each refusal is audited with its rule.
const (
	RuleSessionID       = "session-id"
	RuleSessionNotFound = "session-not-found"
	RuleSessionLanguage = "session-language"
	RuleSessionsMax     = "sessions-max"
	RuleVariableName    = "variable-name"
	RuleStateDocsSize   = "state-docs-size"
)

// Bounds of what document_state keeps per session: notes live in the
// server's memory and are sent back with every state read, so a client
// cannot grow them without limit.
const (
	MaxDocBytes      = 4 << 10  // one variable's description
	MaxNoteBytes     = 16 << 10 // the session note
	MaxDocsVariables = 500      // documented variables
)

// ErrNoSession is an unknown session id (or one of another connection).
var ErrNoSession = errors.New("no such session")

// Session is a stateful session as the engine tracks it. The exported
// fields above Start are read and written under the registry's lock
// (Registry.Update, Registry.View); Start, Grant and Pending belong to
// whoever holds the session's operation lock (Lock), which every
// operation on its kernel holds.
type Session struct {
	ID         string // the id its client chose; unique only per client
	Internal   string // InternalID(Owner, ID): the id below the engine (plugins, workspace, containers, audit)
	Backend    string
	Language   string
	Client     string // the MCP connection that created it
	Created    time.Time
	LastActive time.Time
	State      string
	LostReason string
	Executions int
	// Job is the background job that holds the session ("": none): a
	// call in the session is refused until it ends.
	Job string
	// Container is the session kernel's container once the session is
	// recorded in the runtime for another core to take over ("": it is
	// not); written under the operation lock too.
	Container string
	// Sandbox is the kernel's container, and Resume what its plugin needs
	// to reach that kernel again (backend.SessionInfo): a snapshot of the
	// sandbox is restored with them (written under the operation lock).
	Sandbox string
	Resume  []byte
	// SuspendRefused is LastActive when a suspend was last refused or
	// failed: not tried again until the session is used.
	SuspendRefused time.Time

	Docs        map[string]string
	Note        string
	DocsUpdated time.Time
	Variables   []backend.Variable
	VarsUpdated time.Time
	VarsError   string
	History     History // history.go: the executed cells, bounded

	Start backend.OpenSessionRequest // how it was opened; a dead kernel is restarted the same way
	Grant *toolbridge.Grant          // the session's tool grant (mounted from the start), or nil
	// Network is the session's network channel (mounted from the start),
	// or nil.
	Network *egress.Channel
	// SandboxGrant is what the session's container was given beyond the
	// defaults on its first call (host roots, its tenant's isolation), or
	// nil.
	SandboxGrant *sandboxgrant.Grant
	// Pending: the client has a checkpoint of this session (a server
	// restart, the idle reaper), restored when its first kernel starts.
	Pending bool

	op sync.Mutex
	// outputs is the output directory as the last execute left it (under
	// op), good while writes is still outputsAt: the core's own writes
	// into the workspace (an upload, a restore) count in writes. The next
	// execute compares with it instead of listing the directory first, a
	// round trip through the API server on Kubernetes.
	outputs   map[string]workspace.Stamp
	outputsAt uint64
	writes    atomic.Uint64
}

// Wrote records a write of the core's into the session's workspace: the
// next execute lists its output directory afresh.
func (s *Session) Wrote() { s.writes.Add(1) }

// Writes is the count of Wrote calls, read before a listing whose result
// goes to SetOutputs.
func (s *Session) Writes() uint64 { return s.writes.Load() }

// Outputs is the output directory as the last execute left it, if nothing
// the core wrote since may have changed it (caller holds the lock).
func (s *Session) Outputs() (map[string]workspace.Stamp, bool) {
	return s.outputs, s.outputs != nil && s.outputsAt == s.writes.Load()
}

// SetOutputs keeps an execute's listing of the output directory, taken
// when Writes was at (caller holds the lock).
func (s *Session) SetOutputs(m map[string]workspace.Stamp, at uint64) {
	s.outputs, s.outputsAt = m, at
}

// Lock takes the session's operation lock: one operation on its kernel
// at a time.
func (s *Session) Lock() { s.op.Lock() }

// Unlock releases the operation lock.
func (s *Session) Unlock() { s.op.Unlock() }

// TryLock takes the operation lock if it is free.
func (s *Session) TryLock() bool { return s.op.TryLock() }

// View is what tools and resources show of a session (the MCP layer gives
// it its JSON shape). Only the id is always set.
type View struct {
	ID                   string
	Language             string
	Backend              string
	State                string
	Created              time.Time
	LastActivity         time.Time
	Executions           int
	Job                  string
	LostReason           string
	Note                 string
	Documented           map[string]string
	DocumentationUpdated time.Time
	Variables            []backend.Variable
	IntrospectedAt       time.Time
	IntrospectionError   string
	Undocumented         []string
}

// internalIDHash is how many hex digits of the client hash an internal id
// carries: 64 bits, so that collisions among one server's sessions are
// beyond reach.
const internalIDHash = 16

// InternalID names a session below the engine: plugins, the host services,
// its workspace directory, its container's label and the audit log all see
// this id, never the bare user id, so sessions of two clients with the same
// id never share a kernel, a directory or an audit trail. It keeps a
// readable prefix of the user id for operators and is at most 48
// characters whatever the id's length (workspace.DirName then keeps it as
// its directory's name): at most 31 characters of the id, '-', and 16 hex
// digits of a hash of (client, id). It is stable across restarts.
func InternalID(client, id string) string {
	h := sha256.Sum256([]byte(client + "\x00" + id))
	prefix := id
	if max := 47 - internalIDHash; len(prefix) > max {
		prefix = prefix[:max]
	}
	return prefix + "-" + hex.EncodeToString(h[:])[:internalIDHash]
}

// CheckID refuses a session id its client cannot have chosen (rule
// session-id): it becomes a path component below the engine.
func CheckID(id string) error {
	if workspace.CheckSessionID(id) != nil {
		return refusal.New(RuleSessionID, "session_id %s is invalid: use 1-%d letters, digits, '-' or '_', starting with a letter or digit", refusal.Quoted(id), workspace.MaxSessionID)
	}
	return nil
}

// NotFound is the refusal of an id client has no session of.
func NotFound(id string) error {
	return &refusal.Error{Rule: RuleSessionNotFound, Err: ErrNoSession,
		Msg: fmt.Sprintf("%v %q for this connection (sessions are created by an execute_<language> call with a session_id; list_sessions shows yours)", ErrNoSession, id)}
}

func (s *Session) view() View {
	v := View{ID: s.ID, Language: s.Language, Backend: s.Backend, State: s.State, Created: s.Created, LastActivity: s.LastActive,
		Executions: s.Executions, Job: s.Job, LostReason: s.LostReason, Note: s.Note, DocumentationUpdated: s.DocsUpdated,
		Variables: s.Variables, IntrospectedAt: s.VarsUpdated, IntrospectionError: s.VarsError}
	if len(s.Docs) > 0 {
		v.Documented = maps.Clone(s.Docs)
	}
	for _, x := range s.Variables {
		if _, ok := s.Docs[x.Name]; !ok {
			v.Undocumented = append(v.Undocumented, x.Name)
		}
	}
	return v
}

// key is how the registry finds a session: ids are chosen by their
// clients, so two clients (tenants over HTTP, connections over stdio) may
// both call theirs "main".
type key struct{ client, id string }

// Registry is the table of sessions, keyed by client and id.
type Registry struct {
	mu       sync.Mutex
	sessions map[key]*Session
	starts   map[string]*Starts // warm and cold kernel starts per backend
	changed  func()             // OnChange's
}

// OnChange calls f (which must not block) whenever a session is added or
// dropped: what a tenant holds of its session quota changed.
func (r *Registry) OnChange(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changed = f
}

func (r *Registry) change() {
	if r.changed != nil {
		r.changed()
	}
}

// PerClient is how many sessions each client has in the table.
func (r *Registry) PerClient() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k := range r.sessions {
		out[k.client]++
	}
	return out
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{sessions: map[key]*Session{}, starts: map[string]*Starts{}}
}

// Get returns client's session id, or nil. Another client's session with
// the same id is not seen at all.
func (r *Registry) Get(client, id string) *Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[key{client, id}]
}

// Live reports whether client has a session id in the table.
func (r *Registry) Live(client, id string) bool { return r.Get(client, id) != nil }

// Admission is what Acquire's admit sees of the table, under its lock.
type Admission struct {
	Open  int      // sessions open, of every client
	Owned []string // the ids of the client's open sessions
}

// Acquire returns client's session id, or when there is none the session
// admit returns, added to the table (created true). admit runs under the
// registry's lock, so that what it checks (the number of sessions open,
// the client's) still holds when its session is added: it must not block.
// An error from admit is returned as it is.
func (r *Registry) Acquire(client, id string, admit func(Admission) (*Session, error)) (s *Session, created bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := key{client, id}
	if s := r.sessions[k]; s != nil {
		return s, false, nil
	}
	a := Admission{Open: len(r.sessions)}
	for k := range r.sessions {
		if k.client == client {
			a.Owned = append(a.Owned, k.id)
		}
	}
	sort.Strings(a.Owned)
	if s, err = admit(a); err != nil {
		return nil, false, err
	}
	r.sessions[k] = s
	r.change()
	return s, true, nil
}

// Drop takes a session out of the table; it is gone.
func (r *Registry) Drop(s *Session) {
	r.mu.Lock()
	if k := (key{s.Client, s.ID}); r.sessions[k] == s {
		delete(r.sessions, k)
		r.change()
	}
	s.State = StateGone
	r.mu.Unlock()
}

// Update runs f on s under the registry's lock.
func (r *Registry) Update(s *Session, f func(*Session)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(s)
}

// State returns s's state.
func (r *Registry) State(s *Session) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.State
}

// SetState sets s's state.
func (r *Registry) SetState(s *Session, st string) {
	r.Update(s, func(s *Session) { s.State = st })
}

// Touch records activity on s now.
func (r *Registry) Touch(s *Session) {
	r.Update(s, func(s *Session) { s.LastActive = time.Now() })
}

// View returns what tools show of s.
func (r *Registry) View(s *Session) View {
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.view()
}

// List returns the views of client's sessions, or with all every one,
// ordered by id. Variables are left out (the state resource has them).
func (r *Registry) List(client string, all bool) []View {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []View{}
	for _, s := range r.sessions {
		if all || s.Client == client {
			v := s.view()
			v.Variables = nil
			out = append(out, v)
		}
	}
	// With all, two clients' sessions may share an id: Created orders them.
	sort.Slice(out, func(i, j int) bool {
		if out[i].ID != out[j].ID {
			return out[i].ID < out[j].ID
		}
		return out[i].Created.Before(out[j].Created)
	})
	return out
}

// All returns every session in the table.
func (r *Registry) All() []*Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Values(r.sessions))
}

// MarkBackendDead marks every session of a crashed plugin dead.
func (r *Registry) MarkBackendDead(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.sessions {
		if s.Backend == name {
			s.State, s.LostReason = StateDead, "the "+name+" plugin crashed"
		}
	}
}

// Holds reports whether internal is the internal id of a session in the
// table (live or dead), whose workspace must stay.
func (r *Registry) Holds(internal string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.sessions {
		if s.Internal == internal {
			return true
		}
	}
	return false
}

// CheckDocs refuses documentation that document_state would not keep:
// a variable name that is empty or longer than 200 bytes, a description
// over MaxDocBytes, a note over MaxNoteBytes.
func CheckDocs(vars map[string]string, note *string) error {
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		if name == "" || len(name) > 200 {
			return refusal.New(RuleVariableName, "variable name %s: must be 1-200 characters", refusal.Quoted(name))
		}
		if len(vars[name]) > MaxDocBytes {
			return refusal.New(RuleStateDocsSize, "the description of variable %s is %d bytes; at most %d are kept: shorten it", refusal.Quoted(name), len(vars[name]), MaxDocBytes)
		}
	}
	if note != nil && len(*note) > MaxNoteBytes {
		return refusal.New(RuleStateDocsSize, "the note is %d bytes; at most %d are kept: shorten it", len(*note), MaxNoteBytes)
	}
	return nil
}

// Document records descriptions of s's variables (an empty one removes
// it) and, when note is set, its note; clear first forgets what was
// documented. Documentation that would pass MaxDocsVariables is refused
// and nothing changes. vars and note are checked by CheckDocs.
func (r *Registry) Document(s *Session, vars map[string]string, note *string, clear bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
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
		return refusal.New(RuleStateDocsSize, "session %q would have %d documented variables; at most %d are kept: clear or remove some (an empty description removes one)", s.ID, n, MaxDocsVariables)
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
	return nil
}
