package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
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

// serves reports whether capabilities c serve language in mode m.
func serves(c backend.Capabilities, language string, m Mode) bool {
	return slices.Contains(c.Languages, language) && c.Stateful == (m == ModeSession)
}

// table is the operator's choice of backend per language for mode m.
func (e *Engine) table(m Mode) (path string, choice map[string]string) {
	if m == ModeSession {
		return "sessions.default_backend", e.cfg.Sessions.DefaultBackend
	}
	return "execution.default_backend", e.cfg.Execution.DefaultBackend
}

// declares reports whether the operator declared that plugin serves language
// ([plugins.NAME] languages).
func (e *Engine) declares(plugin, language string) bool {
	return slices.Contains(e.cfg.Plugins[plugin].Languages, language)
}

// mayServe reports whether a plugin that is not loaded would serve language
// in mode m: by the capabilities of an earlier load, else by what the
// operator declared (mode unknown: either).
func (e *Engine) mayServe(st plugins.Status, language string, m Mode) bool {
	if len(st.Capabilities.Languages) > 0 {
		return serves(st.Capabilities, language, m)
	}
	return e.declares(st.Name, language)
}

// route picks the backend for language in mode m: the configured one, else
// the only loaded one that serves it. A plugin that is known or declared to
// serve the language but is not loaded (refused for its checksum, failed to
// start) is never replaced by another: the request is refused with its
// reason. Errors are *RequestError.
func (e *Engine) route(sts []plugins.Status, language string, m Mode) (string, error) {
	path, choice := e.table(m)
	if name, ok := choice[language]; ok {
		st, found := status(sts, name)
		switch {
		case !found:
			return "", refusal(RuleBackendUnavailable, "%s.%s names the backend %q, which is not installed (plugins: %s)", path, language, name, names(sts))
		case st.Error != "":
			return "", refusal(RuleBackendUnavailable, "the %s backend, configured for %s %s (%s.%s), is unavailable: %s", name, e.LanguageName(language), m, path, language, st.Error)
		}
		return name, nil
	}
	var loaded, down []string
	for _, st := range sts {
		switch {
		case st.Error == "" && serves(st.Capabilities, language, m):
			loaded = append(loaded, st.Name)
		case st.Error != "" && e.mayServe(st, language, m):
			down = append(down, st.Name+" ("+st.Error+")")
		}
	}
	switch {
	case len(down) > 0:
		return "", refusal(RuleBackendUnavailable, "%s %s are unavailable: the backend for them is not loaded: %s. Another backend does not take its place silently: fix it (`mcp-forge plugins`), or choose a backend with %s.%s",
			e.LanguageName(language), m, strings.Join(down, "; "), path, language)
	case len(loaded) == 1:
		return loaded[0], nil
	case len(loaded) > 1:
		return "", refusal(RuleBackendAmbiguous, "backends %s all serve %s %s; choose one in the configuration, e.g. [%s] %s = %q",
			strings.Join(loaded, ", "), e.LanguageName(language), m, path, language, loaded[0])
	}
	return "", e.noBackend(sts, language, m)
}

// noBackend explains why nothing serves language in mode m, and what would.
func (e *Engine) noBackend(sts []plugins.Status, language string, m Mode) error {
	lang := e.LanguageName(language)
	var other []string // loaded backends of the language in the other mode
	for _, st := range sts {
		if st.Error == "" && slices.Contains(st.Capabilities.Languages, language) {
			other = append(other, st.Name)
		}
	}
	if m == ModeSession {
		msg := fmt.Sprintf("session_id needs a backend that keeps %s sessions, and none is loaded; omit session_id to run statelessly", lang)
		if len(other) == 0 {
			msg = fmt.Sprintf("no loaded backend runs %s (loaded plugins: %s); run `mcp-forge doctor`", lang, names(sts))
		}
		return refusal(RuleNoBackend, "%s", msg)
	}
	if len(other) > 0 {
		return refusal(RuleNoBackend, "no loaded backend runs %s without a session; pass a session_id (served by %s), or set execution.default_backend.%s to one of them to run each call in a throw-away session",
			lang, strings.Join(other, ", "), language)
	}
	return refusal(RuleNoBackend, "no loaded backend runs %s (loaded plugins: %s); run `mcp-forge doctor`", lang, names(sts))
}

// pick chooses the backend for a request: the one it names, else the route.
func (e *Engine) pick(req Request) (string, error) {
	sts := e.plugins.Statuses()
	m := ModeStateless
	if req.SessionID != "" {
		m = ModeSession
	}
	if req.Backend == "" {
		return e.route(sts, req.Language, m)
	}
	st, ok := status(sts, req.Backend)
	switch {
	case !ok:
		return "", refusal(RuleBackendUnknown, "unknown backend %q; installed backends: %s", req.Backend, names(sts))
	case st.Error != "":
		return "", refusal(RuleBackendUnavailable, "backend %q is unavailable: %s", req.Backend, st.Error)
	case !slices.Contains(st.Capabilities.Languages, req.Language):
		return "", refusal(RuleBackendLanguage, "backend %q does not run %s (it runs %s)", req.Backend, e.LanguageName(req.Language), strings.Join(st.Capabilities.Languages, ", "))
	case m == ModeSession && !st.Capabilities.Stateful:
		alt, _ := e.route(sts, req.Language, ModeSession)
		hint := ""
		if alt != "" {
			hint = " such as " + alt
		}
		return "", refusal(RuleBackendStateless, "backend %q is stateless: it cannot keep session %q; omit session_id, or use a stateful backend%s", req.Backend, req.SessionID, hint)
	}
	return req.Backend, nil
}

// check is the start-up validation of the routing configuration against
// the loaded plugins: every configured choice exists and serves what it is
// chosen for, declared languages are true, no language is ambiguous, and
// every backend's image is allowed. All problems are returned together.
func (e *Engine) check(sts []plugins.Status) error {
	var errs []error
	for _, m := range []Mode{ModeStateless, ModeSession} {
		path, choice := e.table(m)
		for _, language := range slices.Sorted(maps.Keys(choice)) {
			name := choice[language]
			st, ok := status(sts, name)
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("%s.%s = %q: no such plugin (plugins: %s)", path, language, name, names(sts)))
			case st.Error != "":
				// Its tools stay and answer why; see route.
			case !slices.Contains(st.Capabilities.Languages, language):
				errs = append(errs, fmt.Errorf("%s.%s = %q: that backend does not run %s (it runs %s)", path, language, name, language, strings.Join(st.Capabilities.Languages, ", ")))
			case m == ModeSession && !st.Capabilities.Stateful:
				errs = append(errs, fmt.Errorf("%s.%s = %q: that backend is stateless and cannot keep sessions", path, language, name))
			}
		}
	}
	for _, st := range sts {
		if st.Error != "" {
			continue
		}
		for _, language := range e.cfg.Plugins[st.Name].Languages {
			if !slices.Contains(st.Capabilities.Languages, language) {
				errs = append(errs, fmt.Errorf("plugins.%s.languages declares %s, but the plugin runs %s", st.Name, language, strings.Join(st.Capabilities.Languages, ", ")))
			}
		}
		if img := st.Capabilities.Image; img != "" {
			if err := e.pol.CheckImage(img); err != nil {
				errs = append(errs, fmt.Errorf("the %s backend runs image %q, which images.allowed %v does not match: add it there, or set plugins.%s.config.image", st.Name, img, e.cfg.Images.Allowed, st.Name))
			}
		}
	}
	for _, language := range e.languages(sts) {
		for _, m := range []Mode{ModeStateless, ModeSession} {
			var re *RequestError
			if _, err := e.route(sts, language, m); errors.As(err, &re) && re.Rule == RuleBackendAmbiguous {
				errs = append(errs, errors.New(re.Msg))
			}
		}
	}
	return errors.Join(errs...)
}

// Check applies the start-up checks of New to plugin statuses (for doctor)
// and returns what each language would be routed to.
func Check(cfg config.Config, pol *policy.Policy, sts []plugins.Status) ([]Language, error) {
	e := &Engine{cfg: cfg, pol: pol, plugins: fixed(sts)}
	if err := e.check(sts); err != nil {
		return nil, err
	}
	return e.Languages(), nil
}

// fixed is a plugin set known only by its statuses.
type fixed []plugins.Status

func (f fixed) Statuses() []plugins.Status { return f }

func (f fixed) Backend(_ context.Context, name string) (backend.Backend, error) {
	return nil, fmt.Errorf("plugin %s is only inspected", name)
}

// languages lists every language a backend serves, was declared to serve,
// or is configured for, sorted.
func (e *Engine) languages(sts []plugins.Status) []string {
	set := map[string]bool{}
	for _, st := range sts {
		for _, l := range st.Capabilities.Languages {
			set[l] = true
		}
		for _, l := range e.cfg.Plugins[st.Name].Languages {
			set[l] = true
		}
	}
	for _, m := range []Mode{ModeStateless, ModeSession} {
		_, choice := e.table(m)
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

// Languages describes every language the loaded (or declared) backends
// serve, for tool generation.
func (e *Engine) Languages() []Language {
	sts := e.plugins.Statuses()
	var out []Language
	for _, id := range e.languages(sts) {
		l := Language{ID: id, Name: e.LanguageName(id)}
		for _, m := range []Mode{ModeStateless, ModeSession} {
			var o Offer
			if name, err := e.route(sts, id, m); err != nil {
				o.Unavailable = err.Error()
			} else {
				st, _ := status(sts, name)
				o = Offer{Backend: name, Version: st.Version, Capabilities: st.Capabilities}
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
func (e *Engine) LanguageName(language string) string {
	for _, st := range e.plugins.Statuses() {
		if n := st.Capabilities.LanguageName; n != "" && slices.Contains(st.Capabilities.Languages, language) {
			return n
		}
	}
	return language
}

func status(sts []plugins.Status, name string) (plugins.Status, bool) {
	for _, st := range sts {
		if st.Name == name {
			return st, true
		}
	}
	return plugins.Status{}, false
}

func names(sts []plugins.Status) string {
	if len(sts) == 0 {
		return "none"
	}
	out := make([]string, len(sts))
	for i, st := range sts {
		out[i] = st.Name
	}
	return strings.Join(out, ", ")
}
