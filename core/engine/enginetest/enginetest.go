// Package enginetest has in-memory stand-ins for the plugin side of the
// engine, for unit tests of the engine and the MCP layer: a plugin manager
// (engine.Plugins) and a scriptable backend with sessions. The real plugins
// and Podman are exercised by the end-to-end tests.
package enginetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Plugins is an in-memory plugin manager.
type Plugins struct {
	mu       sync.Mutex
	statuses map[string]plugins.Status
	backends map[string]backend.Backend
}

// NewPlugins returns an empty manager.
func NewPlugins() *Plugins {
	return &Plugins{statuses: map[string]plugins.Status{}, backends: map[string]backend.Backend{}}
}

// Add loads a backend under name.
func (p *Plugins) Add(name string, b *Backend) *Plugins {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.statuses[name] = plugins.Status{Identity: plugins.Identity{Name: name, Type: "backend", Version: "1.0.0", APIVersion: 1, Checksum: "verified"}, Capabilities: b.Caps}
	p.backends[name] = b
	return p
}

// Refuse records a plugin that could not be loaded, with why. caps are
// those of an earlier load, if any (zero for a plugin never loaded).
func (p *Plugins) Refuse(name, why string, caps backend.Capabilities) *Plugins {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.statuses[name] = plugins.Status{Identity: plugins.Identity{Name: name, Checksum: "MISMATCH"}, Error: why, Capabilities: caps}
	delete(p.backends, name)
	return p
}

// Statuses implements engine.Plugins.
func (p *Plugins) Statuses() []plugins.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]plugins.Status, 0, len(p.statuses))
	for _, s := range p.statuses {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Backend implements engine.Plugins.
func (p *Plugins) Backend(_ context.Context, name string) (backend.Backend, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.statuses[name]; ok && st.Error != "" {
		return nil, fmt.Errorf("plugin %s: %s", name, st.Error)
	}
	b, ok := p.backends[name]
	if !ok {
		return nil, fmt.Errorf("no plugin named %q", name)
	}
	return b, nil
}

// Backend is a scriptable backend. Stateless calls and session calls both
// go to Run (nil: succeed with the code as stdout); a session backend also
// records what was opened, restarted and closed.
type Backend struct {
	Caps backend.Capabilities
	Run  func(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error)
	// OpenErr, when set, fails OpenSession.
	OpenErr error
	// OnInterrupt and OnClose, when set, see Interrupt and CloseSession
	// (a Run that blocks can wait for them).
	OnInterrupt, OnClose func(id string)
	// Warm, when set, names the pool workspace OpenSession reports for a
	// new session (as a backend that hands over a pre-started kernel).
	Warm func() string
	// Resumable: OpenSession reports a container and a resume state, and
	// resumes (Resume set) without starting anything; ResumeErr fails a
	// resume.
	Resumable bool
	ResumeErr error

	mu     sync.Mutex
	open   map[string]backend.OpenSessionRequest
	Events []string // "open s1", "restart s1", "close s1", "exec s1", "exec"
}

// Stateless returns a stateless backend for language.
func Stateless(language string) *Backend {
	return &Backend{Caps: backend.Capabilities{Languages: []string{language}, LanguageName: title(language), Image: "mcp-forge/custom:" + language}}
}

// Stateful returns a session backend for language.
func Stateful(language string) *Backend {
	b := Stateless(language)
	b.Caps.Stateful, b.Caps.Interrupt = true, true
	return b
}

func title(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

func (b *Backend) event(format string, args ...any) {
	b.mu.Lock()
	b.Events = append(b.Events, fmt.Sprintf(format, args...))
	b.mu.Unlock()
}

// Log returns the events so far.
func (b *Backend) Log() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.Events...)
}

// Opened returns how a session was opened.
func (b *Backend) Opened(id string) (backend.OpenSessionRequest, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.open[id]
	return r, ok
}

func (b *Backend) run(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	if b.Run != nil {
		return b.Run(ctx, req, emit)
	}
	return backend.ExecuteResult{Success: true, Stdout: req.Code, StdoutBytes: int64(len(req.Code))}, nil
}

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities(context.Context) (backend.Capabilities, error) { return b.Caps, nil }

// Execute implements backend.Backend.
func (b *Backend) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	b.event("exec")
	return b.run(ctx, req, nil)
}

// OpenSession implements backend.SessionBackend.
func (b *Backend) OpenSession(_ context.Context, req backend.OpenSessionRequest) (backend.SessionInfo, error) {
	if req.Resume != nil {
		b.event("resume %s %s %s", req.SessionID, req.ResumeContainer, req.Resume)
		if b.ResumeErr != nil {
			return backend.SessionInfo{}, b.ResumeErr
		}
	} else {
		b.event("open %s", req.SessionID)
	}
	if b.OpenErr != nil {
		return backend.SessionInfo{}, b.OpenErr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == nil {
		b.open = map[string]backend.OpenSessionRequest{}
	}
	if _, ok := b.open[req.SessionID]; ok {
		return backend.SessionInfo{}, fmt.Errorf("session %s is already open", req.SessionID)
	}
	b.open[req.SessionID] = req
	info := backend.SessionInfo{SessionID: req.SessionID}
	if b.Resumable {
		info.ContainerID, info.ResumeState = "ctr-"+req.SessionID, []byte("state of "+req.SessionID)
		if req.Resume != nil {
			info.ContainerID, info.Resumed = req.ResumeContainer, true
		}
	}
	if b.Warm != nil && req.WorkspaceID == "" && req.Resume == nil {
		info.WorkspaceID = b.Warm()
	}
	return info, nil
}

func (b *Backend) isOpen(id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.open[id]; !ok {
		return fmt.Errorf("session %s is not open", id)
	}
	return nil
}

// ExecuteInSession implements backend.SessionBackend.
func (b *Backend) ExecuteInSession(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	b.event("exec %s", req.SessionID)
	if err := b.isOpen(req.SessionID); err != nil {
		return backend.ExecuteResult{}, err
	}
	return b.run(ctx, req, emit)
}

// Interrupt implements backend.SessionBackend.
func (b *Backend) Interrupt(_ context.Context, id string) error {
	b.event("interrupt %s", id)
	if b.OnInterrupt != nil {
		b.OnInterrupt(id)
	}
	return nil
}

// Inspect implements backend.SessionBackend: one variable per session.
func (b *Backend) Inspect(_ context.Context, id string) ([]backend.Variable, error) {
	if err := b.isOpen(id); err != nil {
		return nil, err
	}
	return []backend.Variable{{Name: "x", Type: "int", Size: 28, Repr: "1"}}, nil
}

// RestartSession implements backend.SessionBackend.
func (b *Backend) RestartSession(_ context.Context, id string) error {
	b.event("restart %s", id)
	return b.isOpen(id)
}

// CloseSession implements backend.SessionBackend.
func (b *Backend) CloseSession(_ context.Context, id string) error {
	b.event("close %s", id)
	if b.OnClose != nil {
		b.OnClose(id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.open, id)
	return nil
}

// Audit opens a real audit log in a temporary directory and returns it with
// a function that reads back its entries (JSON lines, as an operator would).
func Audit(t testing.TB) (*audit.Logger, func() []audit.Entry) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := audit.Open(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, func() []audit.Entry {
		t.Helper()
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []audit.Entry
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			if line == "" {
				continue
			}
			var e audit.Entry
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("audit line %q: %v", line, err)
			}
			out = append(out, e)
		}
		return out
	}
}

// Gate is a backend run (Backend.Run, with Interrupt its OnInterrupt) that
// writes a line, then waits to be released, interrupted or cancelled: a
// long run a test controls.
type Gate struct {
	Release, Interrupted chan struct{}
	Started              chan struct{} // a value for every run begun
	once                 sync.Once
}

// NewGate returns a closed gate.
func NewGate() *Gate {
	return &Gate{Release: make(chan struct{}), Interrupted: make(chan struct{}), Started: make(chan struct{}, 8)}
}

// Interrupt opens the gate as an interrupt.
func (g *Gate) Interrupt(string) { g.once.Do(func() { close(g.Interrupted) }) }

// Run writes "step 1", then answers once released (success, "42"),
// interrupted (KeyboardInterrupt) or cancelled.
func (g *Gate) Run(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	g.Started <- struct{}{}
	if emit != nil {
		emit(backend.StreamEvent{Name: host.Stdout, Text: "step 1\n"})
	}
	select {
	case <-g.Release:
		return backend.ExecuteResult{Success: true, Stdout: "step 1\nstep 2\n", StdoutBytes: 14, ResultRepr: "42"}, nil
	case <-g.Interrupted:
		return backend.ExecuteResult{Stdout: "step 1\n", Error: &backend.ExecError{Name: "KeyboardInterrupt"}}, nil
	case <-ctx.Done():
		return backend.ExecuteResult{}, ctx.Err()
	}
}
