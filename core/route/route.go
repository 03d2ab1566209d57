// Package route decides which backend serves a language in a mode: the
// operator's choice (execution.default_backend, sessions.default_backend),
// else the only loaded backend that serves it; and what each language is
// offered as. It is pure: it reads the configuration and the backends'
// reports it is given, and does no I/O (no files, no processes, no audit).
// Its refusals are *refusal.Error with a Rule* constant; the engine audits
// them.
package route

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Rules a request's routing can break. Each refusal is audited with its rule.
const (
	RuleBackendUnknown     = "backend-unknown"
	RuleBackendUnavailable = "backend-unavailable"
	RuleBackendAmbiguous   = "backend-ambiguous"
	RuleBackendLanguage    = "backend-language"
	RuleBackendStateless   = "backend-stateless"
	RuleNoBackend          = "no-backend"
)

// Mode is how a request runs: a stateless run serves one call in a fresh
// container; a session keeps state across calls. A backend that reports
// Stateful serves sessions, any other serves stateless runs.
type Mode int

// Modes.
const (
	ModeStateless Mode = iota
	ModeSession
)

func (m Mode) String() string {
	if m == ModeSession {
		return "sessions"
	}
	return "stateless runs"
}

// Backend is what routing knows of one plugin: its name and version, what
// it reported (or reported at an earlier load), and why it is not loaded
// ("" when it is). The engine fills it from the plugin manager's statuses.
type Backend struct {
	Name         string
	Version      string
	Capabilities backend.Capabilities
	Error        string
}

// Language is what the MCP layer offers for one language.
type Language struct {
	ID        string // as in execute_<ID>
	Name      string // how it is written, e.g. "Python"
	Stateless Offer
	Session   Offer
}

// Offer is the backend serving a language in one mode, or why none does.
type Offer struct {
	Backend      string
	Version      string // the plugin's version
	Capabilities backend.Capabilities
	Unavailable  string // why no backend serves this mode; "" when Backend is set
}

// Router routes by a configuration: its default_backend tables and the
// languages declared per plugin ([plugins.NAME] languages).
type Router struct {
	cfg config.Config
}

// New returns the router of cfg.
func New(cfg config.Config) *Router { return &Router{cfg: cfg} }

// serves reports whether capabilities c serve language in mode m.
func serves(c backend.Capabilities, language string, m Mode) bool {
	return slices.Contains(c.Languages, language) && c.Stateful == (m == ModeSession)
}

// table is the operator's choice of backend per language for mode m.
func (r *Router) table(m Mode) (path string, choice map[string]string) {
	if m == ModeSession {
		return "sessions.default_backend", r.cfg.Sessions.DefaultBackend
	}
	return "execution.default_backend", r.cfg.Execution.DefaultBackend
}

// declares reports whether the operator declared that plugin serves language
// ([plugins.NAME] languages).
func (r *Router) declares(plugin, language string) bool {
	return slices.Contains(r.cfg.Plugins[plugin].Languages, language)
}

// mayServe reports whether a plugin that is not loaded would serve language
// in mode m: by the capabilities of an earlier load, else by what the
// operator declared (mode unknown: either).
func (r *Router) mayServe(b Backend, language string, m Mode) bool {
	if len(b.Capabilities.Languages) > 0 {
		return serves(b.Capabilities, language, m)
	}
	return r.declares(b.Name, language)
}

// Route picks the backend for language in mode m: the configured one, else
// the only loaded one that serves it. A plugin that is known or declared to
// serve the language but is not loaded (refused for its checksum, failed to
// start) is never replaced by another: the request is refused with its
// reason. Errors are *refusal.Error.
func (r *Router) Route(bs []Backend, language string, m Mode) (string, error) {
	path, choice := r.table(m)
	if name, ok := choice[language]; ok {
		b, found := Find(bs, name)
		switch {
		case !found:
			return "", refusal.New(RuleBackendUnavailable, "%s.%s names the backend %q, which is not installed (plugins: %s)", path, language, name, names(bs))
		case b.Error != "":
			return "", refusal.New(RuleBackendUnavailable, "the %s backend, configured for %s %s (%s.%s), is unavailable: %s", name, LanguageName(bs, language), m, path, language, b.Error)
		}
		return name, nil
	}
	var loaded, down []string
	for _, b := range bs {
		switch {
		case b.Error == "" && serves(b.Capabilities, language, m):
			loaded = append(loaded, b.Name)
		case b.Error != "" && r.mayServe(b, language, m):
			down = append(down, b.Name+" ("+b.Error+")")
		}
	}
	switch {
	case len(down) > 0:
		return "", refusal.New(RuleBackendUnavailable, "%s %s are unavailable: the backend for them is not loaded: %s. Another backend does not take its place silently: fix it (`mcp-forge plugins`), or choose a backend with %s.%s",
			LanguageName(bs, language), m, strings.Join(down, "; "), path, language)
	case len(loaded) == 1:
		return loaded[0], nil
	case len(loaded) > 1:
		return "", refusal.New(RuleBackendAmbiguous, "backends %s all serve %s %s; choose one in the configuration, e.g. [%s] %s = %q",
			strings.Join(loaded, ", "), LanguageName(bs, language), m, path, language, loaded[0])
	}
	return "", noBackend(bs, language, m)
}

// noBackend explains why nothing serves language in mode m, and what would.
func noBackend(bs []Backend, language string, m Mode) error {
	lang := LanguageName(bs, language)
	var other []string // loaded backends of the language in the other mode
	for _, b := range bs {
		if b.Error == "" && slices.Contains(b.Capabilities.Languages, language) {
			other = append(other, b.Name)
		}
	}
	if m == ModeSession {
		msg := fmt.Sprintf("session_id needs a backend that keeps %s sessions, and none is loaded; omit session_id to run statelessly", lang)
		if len(other) == 0 {
			msg = fmt.Sprintf("no loaded backend runs %s (loaded plugins: %s); run `mcp-forge doctor`", lang, names(bs))
		}
		return refusal.New(RuleNoBackend, "%s", msg)
	}
	if len(other) > 0 {
		return refusal.New(RuleNoBackend, "no loaded backend runs %s without a session; pass a session_id (served by %s), or set execution.default_backend.%s to one of them to run each call in a throw-away session",
			lang, strings.Join(other, ", "), language)
	}
	return refusal.New(RuleNoBackend, "no loaded backend runs %s (loaded plugins: %s); run `mcp-forge doctor`", lang, names(bs))
}

// Pick chooses the backend for a request of language: the one it names
// (named, "" for none), else the route. sessionID is the request's session
// ("": a stateless run), named in refusals.
func (r *Router) Pick(bs []Backend, language, named, sessionID string) (string, error) {
	m := ModeStateless
	if sessionID != "" {
		m = ModeSession
	}
	if named == "" {
		return r.Route(bs, language, m)
	}
	b, ok := Find(bs, named)
	switch {
	case !ok:
		return "", refusal.New(RuleBackendUnknown, "unknown backend %q; installed backends: %s", named, names(bs))
	case b.Error != "":
		return "", refusal.New(RuleBackendUnavailable, "backend %q is unavailable: %s", named, b.Error)
	case !slices.Contains(b.Capabilities.Languages, language):
		return "", refusal.New(RuleBackendLanguage, "backend %q does not run %s (it runs %s)", named, LanguageName(bs, language), strings.Join(b.Capabilities.Languages, ", "))
	case m == ModeSession && !b.Capabilities.Stateful:
		alt, _ := r.Route(bs, language, ModeSession)
		hint := ""
		if alt != "" {
			hint = " such as " + alt
		}
		return "", refusal.New(RuleBackendStateless, "backend %q is stateless: it cannot keep session %q; omit session_id, or use a stateful backend%s", named, sessionID, hint)
	}
	return named, nil
}

// Check is the start-up validation of the routing configuration against
// the loaded plugins: every configured choice exists and serves what it is
// chosen for, declared languages are true, no language is ambiguous, and
// every backend's image passes checkImage (the policy's image allowlist).
// All problems are returned together.
func (r *Router) Check(bs []Backend, checkImage func(string) error) error {
	var errs []error
	for _, m := range []Mode{ModeStateless, ModeSession} {
		path, choice := r.table(m)
		for _, language := range slices.Sorted(maps.Keys(choice)) {
			name := choice[language]
			b, ok := Find(bs, name)
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("%s.%s = %q: no such plugin (plugins: %s)", path, language, name, names(bs)))
			case b.Error != "":
				// Its tools stay and answer why; see Route.
			case !slices.Contains(b.Capabilities.Languages, language):
				errs = append(errs, fmt.Errorf("%s.%s = %q: that backend does not run %s (it runs %s)", path, language, name, language, strings.Join(b.Capabilities.Languages, ", ")))
			case m == ModeSession && !b.Capabilities.Stateful:
				errs = append(errs, fmt.Errorf("%s.%s = %q: that backend is stateless and cannot keep sessions", path, language, name))
			}
		}
	}
	for _, b := range bs {
		if b.Error != "" {
			continue
		}
		for _, language := range r.cfg.Plugins[b.Name].Languages {
			if !slices.Contains(b.Capabilities.Languages, language) {
				errs = append(errs, fmt.Errorf("plugins.%s.languages declares %s, but the plugin runs %s", b.Name, language, strings.Join(b.Capabilities.Languages, ", ")))
			}
		}
		if img := b.Capabilities.Image; img != "" {
			if err := checkImage(img); err != nil {
				errs = append(errs, fmt.Errorf("the %s backend runs image %q, which images.allowed %v does not match: add it there, or set plugins.%s.config.image", b.Name, img, r.cfg.Images.Allowed, b.Name))
			}
		}
	}
	for _, language := range r.languages(bs) {
		for _, m := range []Mode{ModeStateless, ModeSession} {
			var re *refusal.Error
			if _, err := r.Route(bs, language, m); errors.As(err, &re) && re.Rule == RuleBackendAmbiguous {
				errs = append(errs, errors.New(re.Msg))
			}
		}
	}
	return errors.Join(errs...)
}

// languages lists every language a backend serves, was declared to serve,
// or is configured for, sorted.
func (r *Router) languages(bs []Backend) []string {
	set := map[string]bool{}
	for _, b := range bs {
		for _, l := range b.Capabilities.Languages {
			set[l] = true
		}
		for _, l := range r.cfg.Plugins[b.Name].Languages {
			set[l] = true
		}
	}
	for _, m := range []Mode{ModeStateless, ModeSession} {
		_, choice := r.table(m)
		for l := range choice {
			set[l] = true
		}
	}
	var out []string
	for l := range set {
		if config.ValidLanguage(l) {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// Languages describes every language the backends serve (or are declared
// or configured to serve), for tool generation.
func (r *Router) Languages(bs []Backend) []Language {
	var out []Language
	for _, id := range r.languages(bs) {
		l := Language{ID: id, Name: LanguageName(bs, id)}
		for _, m := range []Mode{ModeStateless, ModeSession} {
			var o Offer
			if name, err := r.Route(bs, id, m); err != nil {
				o.Unavailable = err.Error()
			} else {
				b, _ := Find(bs, name)
				o = Offer{Backend: name, Version: b.Version, Capabilities: b.Capabilities}
			}
			if m == ModeSession {
				l.Session = o
			} else {
				l.Stateless = o
			}
		}
		out = append(out, l)
	}
	return out
}

// LanguageName is how a language is written in messages: what its backends
// report, else its id.
func LanguageName(bs []Backend, language string) string {
	for _, b := range bs {
		if n := b.Capabilities.LanguageName; n != "" && slices.Contains(b.Capabilities.Languages, language) {
			return n
		}
	}
	return language
}

// Find returns the backend called name.
func Find(bs []Backend, name string) (Backend, bool) {
	for _, b := range bs {
		if b.Name == name {
			return b, true
		}
	}
	return Backend{}, false
}

func names(bs []Backend) string {
	if len(bs) == 0 {
		return "none"
	}
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.Name
	}
	return strings.Join(out, ", ")
}
