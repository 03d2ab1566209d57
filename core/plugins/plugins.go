// Package plugins finds, verifies, launches and supervises plugin processes.
// A plugin that dies is detected, the call in flight fails with a clear
// error, and the plugin is started again on next use; the core never dies
// with it.
package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
	"github.com/mcp-forge/mcp-forge/sdk/pluginhost"
)

// Entry is a plugin the configuration or the plugin directory names.
type Entry struct {
	Name   string
	Path   string
	SHA256 string         // expected digest; "" means not pinned
	Config map[string]any // [plugins.NAME.config]
}

// Discover lists plugins: every mcp-forge-plugin-* executable in dir, then
// the [plugins.NAME] entries, which override a same-named one from dir.
func Discover(cfg config.Config, dir string) []Entry {
	byName := map[string]Entry{}
	if dir != "" {
		matches, _ := filepath.Glob(filepath.Join(dir, plugin.BinaryPrefix+"*"))
		for _, p := range matches {
			if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
				continue
			}
			name := strings.TrimPrefix(filepath.Base(p), plugin.BinaryPrefix)
			byName[name] = Entry{Name: name, Path: p}
		}
	}
	for name, p := range cfg.Plugins {
		e := Entry{Name: name, Path: p.Path, SHA256: strings.ToLower(p.SHA256), Config: p.Config}
		if !filepath.IsAbs(e.Path) && dir != "" {
			e.Path = filepath.Join(dir, e.Path)
		}
		byName[name] = e
	}
	out := make([]Entry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Checksum returns the sha256 of the file at path.
func Checksum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Verify refuses a binary whose digest is not the pinned one.
func (e Entry) Verify() (status string, err error) {
	sum, err := Checksum(e.Path)
	if err != nil {
		return "unreadable", fmt.Errorf("plugin %s: %w", e.Name, err)
	}
	if e.SHA256 == "" {
		return "not pinned (sha256 " + sum[:12] + "…)", nil
	}
	if sum != e.SHA256 {
		return "MISMATCH", fmt.Errorf("plugin %s: checksum mismatch for %s: plugins.%s.sha256 is %s but the file's sha256 is %s; refusing to load it (rebuild, or update the pinned digest if the change is yours)", e.Name, e.Path, e.Name, e.SHA256, sum)
	}
	return "verified", nil
}

// Status is what `plugins list` and the environment resource show.
type Status struct {
	Name         string
	Type         string
	Version      string
	APIVersion   int
	Path         string
	Checksum     string
	Capabilities backend.Capabilities
	Error        string
	Restarts     int
}

// HostFactory builds the host services bound to one plugin.
type HostFactory func(name string) host.Host

// Manager owns the plugin processes.
type Manager struct {
	log      hclog.Logger
	rec      audit.Recorder
	hostFor  HostFactory
	settings func(name string) map[string]any

	// OnCrash is called (once per crash) with the name of a plugin that died
	// mid-call, so that its containers and sessions can be cleaned up.
	OnCrash func(name string)

	mu      sync.Mutex
	entries map[string]Entry
	running map[string]*running
	status  map[string]*Status
}

type running struct {
	client *pluginhost.Client
	b      backend.Backend
}

// NewManager returns a manager over entries. settings returns core-provided
// configuration for a plugin, under which [plugins.NAME.config] is merged.
func NewManager(entries []Entry, hostFor HostFactory, settings func(string) map[string]any, rec audit.Recorder, log hclog.Logger) *Manager {
	m := &Manager{log: log, rec: rec, hostFor: hostFor, settings: settings,
		entries: map[string]Entry{}, running: map[string]*running{}, status: map[string]*Status{}}
	for _, e := range entries {
		m.entries[e.Name] = e
		m.status[e.Name] = &Status{Name: e.Name, Path: e.Path}
	}
	return m
}

// Names lists known plugins.
func (m *Manager) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.entries))
	for n := range m.entries {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// LoadAll starts every plugin so that their capabilities are known; a
// plugin that fails is reported and skipped.
func (m *Manager) LoadAll(ctx context.Context) []error {
	var errs []error
	for _, n := range m.Names() {
		if _, err := m.Backend(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Backend returns the named backend, starting (or restarting) its process.
func (m *Manager) Backend(ctx context.Context, name string) (backend.Backend, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[name]
	if !ok {
		return nil, fmt.Errorf("no plugin named %q is loaded (loaded: %s)", name, strings.Join(m.namesLocked(), ", "))
	}
	if r := m.running[name]; r != nil {
		if !r.client.Exited() {
			return r.b, nil
		}
		m.log.Warn("plugin exited; restarting", "plugin", name)
		delete(m.running, name)
		m.status[name].Restarts++
	}
	r, err := m.launch(ctx, e)
	st := m.status[name]
	if err != nil {
		st.Error = err.Error()
		m.rec.Record(audit.Entry{Event: audit.PluginLoad, Severity: audit.Error, Details: map[string]any{"plugin": name, "path": e.Path}, Error: err.Error()})
		return nil, err
	}
	st.Error = ""
	m.running[name] = r
	return r.b, nil
}

func (m *Manager) namesLocked() []string {
	out := make([]string, 0, len(m.entries))
	for n := range m.entries {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (m *Manager) launch(ctx context.Context, e Entry) (*running, error) {
	st := m.status[e.Name]
	sum, err := e.Verify()
	st.Checksum = sum
	if err != nil {
		return nil, err
	}
	start := time.Now()
	c, err := pluginhost.Launch(e.Path, m.log.Named(e.Name), pluginhost.Options{SHA256: e.SHA256})
	if err != nil {
		return nil, err
	}
	d, err := c.Describe(ctx)
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("plugin %s: describe: %w", e.Name, err)
	}
	if d.Type != plugin.TypeBackend {
		c.Kill()
		return nil, fmt.Errorf("plugin %s reports type %q; only %q plugins are supported by this core", e.Name, d.Type, plugin.TypeBackend)
	}
	cfg := map[string]any{}
	for k, v := range m.settings(e.Name) {
		cfg[k] = v
	}
	for k, v := range e.Config {
		cfg[k] = v
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("plugin %s: config: %w", e.Name, err)
	}
	if err := c.Configure(ctx, m.hostFor(e.Name), raw); err != nil {
		c.Kill()
		return nil, fmt.Errorf("plugin %s rejected its configuration: %w", e.Name, err)
	}
	caps, err := c.Backend().Capabilities(ctx)
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("plugin %s: capabilities: %w", e.Name, err)
	}
	st.Type, st.Version, st.APIVersion, st.Capabilities = d.Type, d.Version, c.APIVersion(), caps
	m.log.Info("plugin loaded", "plugin", e.Name, "version", d.Version, "api", c.APIVersion(), "checksum", sum, "took", time.Since(start))
	m.rec.Record(audit.Entry{Event: audit.PluginLoad, Success: true, Details: map[string]any{
		"plugin": e.Name, "version": d.Version, "api_version": c.APIVersion(), "path": e.Path, "checksum": sum}})
	return &running{client: c, b: &supervised{name: e.Name, c: c, b: c.Backend(), m: m}}, nil
}

// Statuses reports every plugin.
func (m *Manager) Statuses() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Status, 0, len(m.status))
	for _, n := range m.namesLocked() {
		out = append(out, *m.status[n])
	}
	return out
}

// Pid of a running plugin, for tests that kill it.
func (m *Manager) Pid(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.running[name]; r != nil {
		return r.client.Pid()
	}
	return 0
}

// Close ends every plugin process.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, r := range m.running {
		r.client.Kill()
		delete(m.running, n)
	}
}

// supervised turns a dead plugin's transport error into a clear one.
type supervised struct {
	name string
	c    *pluginhost.Client
	b    backend.Backend
	m    *Manager
}

func (s *supervised) crashed(err error) error {
	if err == nil {
		return nil
	}
	// go-plugin notices the exit asynchronously; give it a moment.
	for i := 0; i < 20 && !s.c.Exited() && pluginhost.IsUnavailable(err); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if s.c.Exited() {
		s.m.rec.Record(audit.Entry{Event: audit.PluginEvent, Severity: audit.Error, Details: map[string]any{"plugin": s.name, "what": "crashed"}, Error: err.Error()})
		if s.m.OnCrash != nil {
			s.m.OnCrash(s.name)
		}
		return &CrashError{Plugin: s.name, Err: err}
	}
	return err
}

// CrashError is a call that failed because its plugin process died.
type CrashError struct {
	Plugin string
	Err    error
}

func (e *CrashError) Error() string {
	return fmt.Sprintf("the %s plugin crashed during the call (%v); it will be restarted on the next call", e.Plugin, e.Err)
}

func (e *CrashError) Unwrap() error { return e.Err }

func (s *supervised) Capabilities(ctx context.Context) (backend.Capabilities, error) {
	c, err := s.b.Capabilities(ctx)
	return c, s.crashed(err)
}

func (s *supervised) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	r, err := s.b.Execute(ctx, req)
	return r, s.crashed(err)
}

// Probed is what Probe learns of a plugin.
type Probed struct {
	pluginhost.Described
	APIVersion int
	Checksum   string
}

// Probe verifies a plugin's checksum, starts it only to ask who it is, then
// stops it. Checksum is set even when the error is not nil.
func Probe(ctx context.Context, e Entry) (Probed, error) {
	sum, err := e.Verify()
	if err != nil {
		return Probed{Checksum: sum}, err
	}
	c, err := pluginhost.Launch(e.Path, hclog.NewNullLogger(), pluginhost.Options{SHA256: e.SHA256})
	if err != nil {
		return Probed{Checksum: sum}, err
	}
	defer c.Kill()
	d, err := c.Describe(ctx)
	return Probed{Described: d, APIVersion: c.APIVersion(), Checksum: sum}, err
}

func (s *supervised) sessions() (backend.SessionBackend, error) {
	sb, ok := s.b.(backend.SessionBackend)
	if !ok {
		return nil, fmt.Errorf("plugin %s has no sessions", s.name)
	}
	return sb, nil
}

// OpenSession implements backend.SessionBackend.
func (s *supervised) OpenSession(ctx context.Context, r backend.OpenSessionRequest) (backend.SessionInfo, error) {
	sb, err := s.sessions()
	if err != nil {
		return backend.SessionInfo{}, err
	}
	info, err := sb.OpenSession(ctx, r)
	return info, s.crashed(err)
}

// ExecuteInSession implements backend.SessionBackend.
func (s *supervised) ExecuteInSession(ctx context.Context, r backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	sb, err := s.sessions()
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	res, err := sb.ExecuteInSession(ctx, r, emit)
	return res, s.crashed(err)
}

// Interrupt implements backend.SessionBackend.
func (s *supervised) Interrupt(ctx context.Context, id string) error {
	sb, err := s.sessions()
	if err != nil {
		return err
	}
	return s.crashed(sb.Interrupt(ctx, id))
}

// Inspect implements backend.SessionBackend.
func (s *supervised) Inspect(ctx context.Context, id string) ([]backend.Variable, error) {
	sb, err := s.sessions()
	if err != nil {
		return nil, err
	}
	v, err := sb.Inspect(ctx, id)
	return v, s.crashed(err)
}

// RestartSession implements backend.SessionBackend.
func (s *supervised) RestartSession(ctx context.Context, id string) error {
	sb, err := s.sessions()
	if err != nil {
		return err
	}
	return s.crashed(sb.RestartSession(ctx, id))
}

// CloseSession implements backend.SessionBackend.
func (s *supervised) CloseSession(ctx context.Context, id string) error {
	sb, err := s.sessions()
	if err != nil {
		return err
	}
	return s.crashed(sb.CloseSession(ctx, id))
}
