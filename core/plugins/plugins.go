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
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
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
		if e.Path == "" {
			// Only configuration (or a pin) for a plugin of the directory.
			e.Path = plugin.BinaryPrefix + name
		}
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

// Identity is who a plugin is: what it reports about itself once launched,
// where its binary is, and how its checksum compared with the pin.
type Identity struct {
	Name       string
	Type       plugin.Type
	Version    string
	APIVersion int // negotiated
	Path       string
	Checksum   string // "verified", "not pinned (sha256 …)", "MISMATCH", "unreadable"
}

// Status is what `plugins list` and the environment resource show.
type Status struct {
	Identity
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

	// TypeSettings, if set, adds configuration for a plugin by its type
	// once that is known (the bridge's servers go to the bridge plugin
	// only), under [plugins.NAME.config].
	TypeSettings func(name string, typ plugin.Type) map[string]any

	// WorkDir, if set, is the directory each plugin process starts in,
	// created (mode 0700) before it starts: a builder's work directory,
	// which plugin API v2 names in no message. Unset: the core's own
	// directory. Set it before the first plugin starts.
	WorkDir func(name string) string
	// V1Builder is what builders of API v1 are told in the request fields
	// that v2 dropped (their work directory is WorkDir's).
	V1Builder pluginhost.V1BuilderPaths

	// OnCrash is called (once per crash) with the name of a plugin that died
	// mid-call, so that its containers and sessions can be cleaned up.
	OnCrash func(name string)

	// MaxMessage is the gRPC message limit of plugin connections, both
	// sides (plugin.MessageLimit of the execution limits); 0: the SDK's
	// default. Set it before the first plugin starts.
	MaxMessage int

	// Reattach names plugins running in debug mode (plugin.DebugFlag,
	// FORGE_REATTACH_PLUGINS): the manager connects to them where they
	// listen instead of starting their binaries. Set it before the first
	// plugin starts.
	Reattach map[string]plugin.Reattach

	mu      sync.Mutex // guards the maps and statuses; never held while a plugin starts
	entries map[string]Entry
	running map[string]*running
	status  map[string]*Status
	starts  map[string]*sync.Mutex // one start at a time per plugin
}

type running struct {
	client  *pluginhost.Client
	typ     plugin.Type
	b       backend.Backend // a backend's, supervised; nil for other types
	exited  <-chan struct{} // closed when the process ends
	unwatch func()
}

// gone reports whether the plugin process has ended, by go-plugin's account
// or by the exit event (which go-plugin may not have processed yet).
func (r *running) gone() bool {
	if r.client.Exited() {
		return true
	}
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

// NewManager returns a manager over entries. settings returns core-provided
// configuration for a plugin, under which [plugins.NAME.config] is merged.
func NewManager(entries []Entry, hostFor HostFactory, settings func(string) map[string]any, rec audit.Recorder, log hclog.Logger) *Manager {
	m := &Manager{log: log, rec: rec, hostFor: hostFor, settings: settings,
		entries: map[string]Entry{}, running: map[string]*running{}, status: map[string]*Status{}, starts: map[string]*sync.Mutex{}}
	for _, e := range entries {
		m.entries[e.Name] = e
		m.status[e.Name] = &Status{Identity: Identity{Name: e.Name, Path: e.Path}}
		m.starts[e.Name] = &sync.Mutex{}
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
		if _, err := m.start(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Backend returns the named backend, starting (or restarting) its process.
// Only callers of the same plugin wait for its start: routing to other
// plugins and status reads go on meanwhile.
func (m *Manager) Backend(ctx context.Context, name string) (backend.Backend, error) {
	r, err := m.typed(ctx, name, plugin.TypeBackend)
	if err != nil {
		return nil, err
	}
	return r.b, nil
}

// Builder returns the named builder plugin, starting it if needed.
func (m *Manager) Builder(ctx context.Context, name string) (builder.Builder, error) {
	r, err := m.typed(ctx, name, plugin.TypeBuilder)
	if err != nil {
		return nil, err
	}
	return r.client.Builder(), nil
}

// Bridge returns the named bridge plugin, starting it if needed.
func (m *Manager) Bridge(ctx context.Context, name string) (bridge.Bridge, error) {
	r, err := m.typed(ctx, name, plugin.TypeBridge)
	if err != nil {
		return nil, err
	}
	return r.client.Bridge(), nil
}

// Typed lists the plugins of one type (plugin.TypeBuilder, …) among those
// that started.
func (m *Manager) Typed(typ plugin.Type) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, n := range m.namesLocked() {
		if m.status[n].Type == typ {
			out = append(out, n)
		}
	}
	return out
}

func (m *Manager) typed(ctx context.Context, name string, typ plugin.Type) (*running, error) {
	r, err := m.start(ctx, name)
	if err != nil {
		return nil, err
	}
	if r.typ != typ {
		return nil, fmt.Errorf("plugin %s is a %s plugin, not a %s plugin", name, r.typ, typ)
	}
	return r, nil
}

// start returns the named plugin's process, starting (or restarting) it.
func (m *Manager) start(ctx context.Context, name string) (*running, error) {
	m.mu.Lock()
	e, ok := m.entries[name]
	start := m.starts[name]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no plugin named %q is loaded (loaded: %s)", name, strings.Join(m.Names(), ", "))
	}
	start.Lock()
	defer start.Unlock()
	m.mu.Lock()
	if r := m.running[name]; r != nil {
		if !r.gone() {
			m.mu.Unlock()
			return r, nil
		}
		m.log.Warn("plugin exited; restarting", "plugin", name)
		r.unwatch()
		r.client.Kill() // releases go-plugin's side
		delete(m.running, name)
		m.status[name].Restarts++
		// A plugin that died between calls leaves containers too (a warm
		// pool's): clean up as after a crash mid-call, before its successor
		// starts its own.
		if onCrash := m.OnCrash; onCrash != nil {
			m.mu.Unlock()
			onCrash(name)
			m.mu.Lock()
		}
	}
	m.mu.Unlock()

	r, id, caps, err := m.launch(ctx, e)
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.status[name]
	st.Checksum = id.Checksum
	if err != nil {
		st.Error = err.Error()
		m.rec.Record(audit.Entry{Event: audit.PluginLoad, Severity: audit.Error, Details: map[string]any{"plugin": name, "path": e.Path}, Error: err.Error()})
		return nil, err
	}
	st.Identity, st.Capabilities, st.Error = id, caps, ""
	m.running[name] = r
	return r, nil
}

func (m *Manager) namesLocked() []string {
	out := make([]string, 0, len(m.entries))
	for n := range m.entries {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// launch verifies, starts, describes and configures one plugin. It runs
// without the manager's lock.
func (m *Manager) launch(ctx context.Context, e Entry) (*running, Identity, backend.Capabilities, error) {
	var caps backend.Capabilities
	id := Identity{Name: e.Name, Path: e.Path}
	start := time.Now()
	c, err := m.startOrAttach(e, &id)
	if err != nil {
		return nil, id, caps, err
	}
	fail := func(err error) (*running, Identity, backend.Capabilities, error) {
		c.Kill()
		return nil, id, caps, err
	}
	d, err := c.Describe(ctx)
	if err != nil {
		return fail(fmt.Errorf("plugin %s: describe: %w", e.Name, err))
	}
	if err := pluginhost.ExpectType(d, plugin.TypeBackend, plugin.TypeBuilder, plugin.TypeBridge); err != nil {
		return fail(err)
	}
	id.Type, id.Version, id.APIVersion = d.Type, d.Version, c.APIVersion()
	if err := CheckConfig(e, d); err != nil {
		return fail(err)
	}
	core := map[string]any{}
	for k, v := range m.settings(e.Name) {
		core[k] = v
	}
	if m.TypeSettings != nil {
		for k, v := range m.TypeSettings(e.Name, d.Type) {
			core[k] = v
		}
	}
	op := e.Config
	if op == nil {
		op = map[string]any{} // an object, as the plugin's factory expects
	}
	raw, err := json.Marshal(op)
	if err != nil {
		return fail(fmt.Errorf("plugin %s: config: %w", e.Name, err))
	}
	rawCore, err := json.Marshal(core)
	if err != nil {
		return fail(fmt.Errorf("plugin %s: core settings: %w", e.Name, err))
	}
	if err := c.ConfigureWith(ctx, m.hostFor(e.Name), raw, rawCore); err != nil {
		return fail(fmt.Errorf("plugin %s rejected its configuration: %w", e.Name, err))
	}
	if d.Type == plugin.TypeBackend {
		if caps, err = c.Backend().Capabilities(ctx); err != nil {
			return fail(fmt.Errorf("plugin %s: capabilities: %w", e.Name, err))
		}
	}
	m.log.Info("plugin loaded", "plugin", e.Name, "type", d.Type, "version", d.Version, "api", id.APIVersion, "checksum", id.Checksum, "took", time.Since(start))
	m.rec.Record(audit.Entry{Event: audit.PluginLoad, Success: true, Details: map[string]any{
		"plugin": e.Name, "type": d.Type, "version": d.Version, "api_version": id.APIVersion, "path": e.Path, "checksum": id.Checksum}})
	exited, unwatch := exitEvent(c.Pid())
	r := &running{client: c, typ: d.Type, exited: exited, unwatch: unwatch}
	if d.Type == plugin.TypeBackend {
		r.b = &supervised{name: e.Name, c: c, b: c.Backend(), m: m, exited: exited}
	}
	return r, id, caps, nil
}

// startOrAttach verifies and starts e's binary, or connects to the plugin
// in debug mode that Reattach names (no binary to verify: said in its
// checksum status and the log, since a pin does not hold for it).
func (m *Manager) startOrAttach(e Entry, id *Identity) (*pluginhost.Client, error) {
	if r, ok := m.Reattach[e.Name]; ok {
		id.Checksum, id.Path = "reattached (debug mode: not verified)", fmt.Sprintf("%s %s (pid %d)", r.Network, r.Address, r.Pid)
		m.log.Warn("plugin reattached in debug mode: the core did not start it and its binary is not verified", "plugin", e.Name, "address", r.Address, "pid", r.Pid)
		return pluginhost.Reattached(r, m.MaxMessage, m.log.Named(e.Name))
	}
	sum, err := e.Verify()
	id.Checksum = sum
	if err != nil {
		return nil, err
	}
	dir, err := m.workDir(e.Name)
	if err != nil {
		return nil, err
	}
	return pluginhost.Launch(e.Path, m.log.Named(e.Name), pluginhost.Options{SHA256: e.SHA256, MaxMessage: m.MaxMessage, Dir: dir, V1Builder: m.V1Builder})
}

// workDir creates the directory the named plugin starts in, 0700 even if it
// existed with looser modes: it holds what a builder fetched and what
// becomes an image.
func (m *Manager) workDir(name string) (string, error) {
	if m.WorkDir == nil {
		return "", nil
	}
	dir := m.WorkDir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("plugin %s: its work directory: %w", name, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", fmt.Errorf("plugin %s: its work directory: %w", name, err)
	}
	return dir, nil
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

// ShutdownGrace bounds each plugin's Shutdown call when the server stops.
const ShutdownGrace = 2 * time.Second

// Close ends every plugin process: each is first asked to shut down (all at
// once, each within ShutdownGrace), then killed whatever it answered.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	var wg sync.WaitGroup
	for n, r := range m.running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
			defer cancel()
			start := time.Now()
			if err := r.client.Shutdown(ctx, "server stop"); err != nil {
				m.log.Warn("plugin shutdown failed; killing it", "plugin", n, "error", err, "took", time.Since(start))
			}
			r.client.Kill()
			r.unwatch()
		}()
	}
	wg.Wait()
	clear(m.running)
}

// supervised turns a dead plugin's transport error into a clear one.
type supervised struct {
	name   string
	c      *pluginhost.Client
	b      backend.Backend
	m      *Manager
	exited <-chan struct{} // closed when the process ends
}

// crashWait bounds how long a call that lost its transport waits for the
// plugin's exit event before its error is taken as a transport error of a
// live plugin.
const crashWait = 500 * time.Millisecond

func (s *supervised) crashed(err error) error {
	if err == nil {
		return nil
	}
	dead := s.c.Exited()
	if !dead && pluginhost.IsUnavailable(err) {
		// The transport can fail a moment before the process is reaped.
		select {
		case <-s.exited:
			dead = true
		case <-time.After(crashWait):
			dead = s.c.Exited()
		}
	}
	if dead {
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

// Stats implements backend.StatsReporter (the shim's client always does:
// v2's Stats, or a v1 plugin's figures in its capabilities).
func (s *supervised) Stats(ctx context.Context) (backend.Stats, error) {
	sr, ok := s.b.(backend.StatsReporter)
	if !ok {
		return backend.Stats{}, nil
	}
	st, err := sr.Stats(ctx)
	return st, s.crashed(err)
}

func (s *supervised) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	r, err := s.b.Execute(ctx, req)
	return r, s.crashed(err)
}

// ExecuteStream implements backend.StreamingBackend: the caller chose to
// stream (backend.ExecuteStreaming), so this passes the stream on; the
// shim's client always streams (ExecuteStream, or Execute for a plugin
// without it), a backend of a test's may not.
func (s *supervised) ExecuteStream(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	sb, ok := s.b.(backend.StreamingBackend)
	if !ok {
		return s.Execute(ctx, req)
	}
	r, err := sb.ExecuteStream(ctx, req, emit)
	return r, s.crashed(err)
}

// ConfigError is an operator's [plugins.NAME.config] that the plugin's
// declared schema refuses: a configuration error, which stops the server
// (as one of the core's own keys would), not a plugin that failed to load.
type ConfigError struct {
	Plugin string
	Errs   []error // each naming its key's path
}

func (e *ConfigError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("plugin %s refuses its configuration ([plugins.%s.config], keys as the plugin declares them; fix or remove them):\n%s",
		e.Plugin, e.Plugin, strings.Join(msgs, "\n"))
}

// CheckConfig checks e's [plugins.NAME.config] against the schema plugin d
// declared (a *ConfigError); a plugin that declared none (API v1) is not
// checked.
func CheckConfig(e Entry, d pluginhost.Described) error {
	if errs := d.Config.Validate("plugins."+e.Name+".config", e.Config); len(errs) > 0 {
		return &ConfigError{Plugin: e.Name, Errs: errs}
	}
	return nil
}

// Probe verifies a plugin's checksum, starts it only to ask who it is, then
// stops it. Path and Checksum are set even when the error is not nil; so
// is the returned description when the plugin answered.
func Probe(ctx context.Context, e Entry) (Identity, pluginhost.Described, error) {
	id := Identity{Name: e.Name, Path: e.Path}
	sum, err := e.Verify()
	id.Checksum = sum
	if err != nil {
		return id, pluginhost.Described{}, err
	}
	c, err := pluginhost.Launch(e.Path, hclog.NewNullLogger(), pluginhost.Options{SHA256: e.SHA256})
	if err != nil {
		return id, pluginhost.Described{}, err
	}
	defer c.Kill()
	d, err := c.Describe(ctx)
	id.Type, id.Version, id.APIVersion = d.Type, d.Version, c.APIVersion()
	return id, d, err
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
