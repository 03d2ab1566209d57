package route

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

func loaded(name string, stateful bool, langs ...string) Backend {
	return Backend{Name: name, Version: "1.0.0", Capabilities: backend.Capabilities{Languages: langs, Stateful: stateful, LanguageName: strings.ToUpper(langs[0])}}
}

func down(name, why string, langs ...string) Backend {
	b := Backend{Name: name, Error: why}
	b.Capabilities.Languages = langs
	return b
}

// rule is the refusal's rule, "" for no error; a non-refusal fails.
func rule(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var re *refusal.Error
	if !errors.As(err, &re) {
		t.Fatalf("not a refusal: %v", err)
	}
	return re.Rule
}

func TestRoute(t *testing.T) {
	t.Parallel()
	py, pyk := loaded("py", false, "python"), loaded("pyk", true, "python")
	for _, c := range []struct {
		name    string
		cfg     func(*config.Config)
		bs      []Backend
		lang    string
		mode    Mode
		want    string // the backend, or "" when refused
		rule    string
		message string // part of the refusal
	}{
		{"the only stateless one", nil, []Backend{py, pyk}, "python", ModeStateless, "py", "", ""},
		{"the only stateful one", nil, []Backend{py, pyk}, "python", ModeSession, "pyk", "", ""},
		{"two serve it", nil, []Backend{py, loaded("py2", false, "python")}, "python", ModeStateless, "", RuleBackendAmbiguous, "choose one in the configuration"},
		{"the configured one of two", func(c *config.Config) { c.Execution.DefaultBackend = map[string]string{"python": "py2"} },
			[]Backend{py, loaded("py2", false, "python")}, "python", ModeStateless, "py2", "", ""},
		{"configured but not installed", func(c *config.Config) { c.Sessions.DefaultBackend = map[string]string{"python": "gone"} },
			[]Backend{pyk}, "python", ModeSession, "", RuleBackendUnavailable, "which is not installed"},
		{"configured but down", func(c *config.Config) { c.Execution.DefaultBackend = map[string]string{"python": "py"} },
			[]Backend{down("py", "checksum mismatch"), loaded("py2", false, "python")}, "python", ModeStateless, "", RuleBackendUnavailable, "checksum mismatch"},
		{"a down one is not replaced", nil, []Backend{down("py", "crashed", "python"), loaded("py2", false, "python")}, "python", ModeStateless, "", RuleBackendUnavailable, "py (crashed)"},
		{"a declared one is not replaced", func(c *config.Config) {
			c.Plugins = map[string]config.PluginSpec{"py": {Languages: []string{"python"}}}
		},
			[]Backend{down("py", "crashed"), loaded("py2", false, "python")}, "python", ModeStateless, "", RuleBackendUnavailable, "not loaded"},
		{"sessions only", nil, []Backend{pyk}, "python", ModeStateless, "", RuleNoBackend, "pass a session_id (served by pyk)"},
		{"stateless only", nil, []Backend{py}, "python", ModeSession, "", RuleNoBackend, "omit session_id to run statelessly"},
		{"nothing", nil, []Backend{py}, "r", ModeSession, "", RuleNoBackend, "no loaded backend runs r (loaded plugins: py)"},
		{"no plugins", nil, nil, "r", ModeStateless, "", RuleNoBackend, "(loaded plugins: none)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			got, err := New(cfg).Route(c.bs, c.lang, c.mode)
			if got != c.want || rule(t, err) != c.rule || (c.message != "" && !strings.Contains(err.Error(), c.message)) {
				t.Fatalf("Route = %q, %v; want %q, rule %q with %q", got, err, c.want, c.rule, c.message)
			}
		})
	}
}

func TestPick(t *testing.T) {
	t.Parallel()
	bs := []Backend{loaded("py", false, "python"), loaded("pyk", true, "python"), down("rr", "crashed", "r")}
	for _, c := range []struct {
		name, lang, named, session string
		want, rule, message        string
	}{
		{"routed", "python", "", "", "py", "", ""},
		{"routed to a session backend", "python", "", "s", "pyk", "", ""},
		{"named", "python", "pyk", "s", "pyk", "", ""},
		{"unknown", "python", "nope", "", "", RuleBackendUnknown, "installed backends: py, pyk, rr"},
		{"down", "r", "rr", "", "", RuleBackendUnavailable, "crashed"},
		{"another language", "r", "py", "", "", RuleBackendLanguage, "it runs python"},
		{"stateless for a session", "python", "py", "s", "", RuleBackendStateless, "such as pyk"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := New(config.Default()).Pick(bs, c.lang, c.named, c.session)
			if got != c.want || rule(t, err) != c.rule || (c.message != "" && !strings.Contains(err.Error(), c.message)) {
				t.Fatalf("Pick = %q, %v; want %q, rule %q with %q", got, err, c.want, c.rule, c.message)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	allow := func(img string) error {
		if img == "bad" {
			return errors.New("not allowed")
		}
		return nil
	}
	bad := loaded("img", false, "julia")
	bad.Capabilities.Image = "bad"
	for _, c := range []struct {
		name string
		cfg  func(*config.Config)
		bs   []Backend
		want []string // parts of the error, none: no error
	}{
		{"fine", nil, []Backend{loaded("py", false, "python"), loaded("pyk", true, "python")}, nil},
		{"no such plugin", func(c *config.Config) { c.Execution.DefaultBackend = map[string]string{"python": "x"} }, nil, []string{`execution.default_backend.python = "x": no such plugin`}},
		{"wrong language", func(c *config.Config) { c.Execution.DefaultBackend = map[string]string{"r": "py"} }, []Backend{loaded("py", false, "python")}, []string{"does not run r"}},
		{"stateless for sessions", func(c *config.Config) { c.Sessions.DefaultBackend = map[string]string{"python": "py"} }, []Backend{loaded("py", false, "python")}, []string{"cannot keep sessions"}},
		{"a down choice is not an error", func(c *config.Config) { c.Execution.DefaultBackend = map[string]string{"python": "py"} }, []Backend{down("py", "crashed")}, nil},
		{"false declaration", func(c *config.Config) { c.Plugins = map[string]config.PluginSpec{"py": {Languages: []string{"r"}}} }, []Backend{loaded("py", false, "python")}, []string{"plugins.py.languages declares r"}},
		{"image not allowed", nil, []Backend{bad}, []string{`runs image "bad"`}},
		{"ambiguous, with the rest", func(c *config.Config) { c.Execution.DefaultBackend = map[string]string{"r": "x"} },
			[]Backend{loaded("a", false, "python"), loaded("b", false, "python")}, []string{"no such plugin", "backends a, b all serve PYTHON"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			err := New(cfg).Check(c.bs, allow)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Check = %v, want it to say %q", err, w)
				}
			}
		})
	}
}

func TestLanguages(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Plugins = map[string]config.PluginSpec{"jl": {Languages: []string{"julia"}}}
	py, pyk := loaded("py", false, "python"), loaded("pyk", true, "python")
	got := New(cfg).Languages([]Backend{py, pyk, down("jl", "crashed")})
	want := []Language{
		{ID: "julia", Name: "julia",
			Stateless: Offer{Unavailable: "julia stateless runs are unavailable: the backend for them is not loaded: jl (crashed). Another backend does not take its place silently: fix it (`mcp-forge plugins`), or choose a backend with execution.default_backend.julia"},
			Session:   Offer{Unavailable: "julia sessions are unavailable: the backend for them is not loaded: jl (crashed). Another backend does not take its place silently: fix it (`mcp-forge plugins`), or choose a backend with sessions.default_backend.julia"}},
		{ID: "python", Name: "PYTHON",
			Stateless: Offer{Backend: "py", Version: "1.0.0", Capabilities: py.Capabilities},
			Session:   Offer{Backend: "pyk", Version: "1.0.0", Capabilities: pyk.Capabilities}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("Languages (-want +got):\n%s", d)
	}
}
