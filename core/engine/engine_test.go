package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine/enginetest"
	"github.com/mcp-forge/mcp-forge/core/engine/limits"
	"github.com/mcp-forge/mcp-forge/core/jobs"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/route"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// The plugins of these tests are named unlike their languages, so that
// nothing can work by a plugin being named like the language it serves.
type rig struct {
	e      *Engine
	pm     *enginetest.Plugins
	audit  func() []audit.Entry
	snake  *enginetest.Backend // stateless python
	kernel *enginetest.Backend // python sessions
	rs     *enginetest.Backend // stateless r
	ws     *workspace.Manager
}

func newRig(t *testing.T, mutate func(*config.Config), plugins func(r *rig)) *rig {
	t.Helper()
	r, err := tryRig(t, mutate, plugins)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tryRig(t *testing.T, mutate func(*config.Config), plugins func(r *rig)) (*rig, error) {
	t.Helper()
	cfg := config.Default()
	cfg.Volumes.BasePath = t.TempDir()
	if mutate != nil {
		mutate(&cfg)
	}
	r := &rig{pm: enginetest.NewPlugins(), snake: enginetest.Stateless("python"), kernel: enginetest.Stateful("python"), rs: enginetest.Stateless("r")}
	r.pm.Add("snake", r.snake).Add("kernel", r.kernel).Add("rscript", r.rs)
	if plugins != nil {
		plugins(r)
	}
	rec, read := enginetest.Audit(t)
	r.audit = read
	r.ws = workspace.New(cfg.Volumes.BasePath, "t", 0, nil)
	var err error
	r.e, err = New(cfg, policy.New(policy.FromConfig(cfg), nil), r.pm, r.ws, rec, hclog.NewNullLogger())
	return r, err
}

func (r *rig) exec(t *testing.T, req Request) (Result, error) {
	t.Helper()
	if req.Code == "" {
		req.Code = "1"
	}
	if req.Client == "" {
		req.Client = "c1"
	}
	return r.e.Execute(context.Background(), req, nil)
}

// refusedBy returns the rule of a refusal, or fails.
func refusedBy(t *testing.T, err error) string {
	t.Helper()
	var re *RequestError
	if !errors.As(err, &re) {
		t.Fatalf("want a refusal, got %v", err)
	}
	return re.Rule
}

func TestRouting(t *testing.T) {
	cases := []struct {
		name    string
		plugins func(r *rig)
		req     Request
		backend string // want this backend, or
		rule    string // this refusal
		msg     string // in the refusal
	}{
		{"stateless by capability", nil, Request{Language: "python"}, "snake", "", ""},
		{"sessions by capability", nil, Request{Language: "python", SessionID: "s"}, "kernel", "", ""},
		{"another language", nil, Request{Language: "r"}, "rscript", "", ""},
		{"a plugin named like the language is not preferred", func(r *rig) { r.pm.Add("python", enginetest.Stateless("ruby")) },
			Request{Language: "python"}, "snake", "", ""},
		{"named backend", nil, Request{Language: "python", Backend: "kernel"}, "kernel", "", ""},
		{"named stateless backend for a session", nil, Request{Language: "python", Backend: "snake", SessionID: "s"}, "", route.RuleBackendStateless, `such as kernel`},
		{"unknown backend", nil, Request{Language: "python", Backend: "nope"}, "", route.RuleBackendUnknown, "kernel, rscript, snake"},
		{"backend of another language", nil, Request{Language: "python", Backend: "rscript"}, "", route.RuleBackendLanguage, "it runs r"},
		{"no session backend", nil, Request{Language: "r", SessionID: "s"}, "", route.RuleNoBackend, "needs a backend that keeps R sessions"},
		{"no backend at all", nil, Request{Language: "cobol"}, "", route.RuleNoBackend, "no loaded backend runs cobol"},
		{"only sessions", func(r *rig) { r.pm.Add("jl", enginetest.Stateful("julia")) }, Request{Language: "julia"}, "", route.RuleNoBackend, "pass a session_id (served by jl)"},
		{"refused named backend", func(r *rig) { r.pm.Refuse("bad", "checksum mismatch", backend.Capabilities{}) },
			Request{Language: "python", Backend: "bad"}, "", route.RuleBackendUnavailable, "checksum mismatch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil, tc.plugins)
			res, err := r.exec(t, tc.req)
			if tc.rule == "" {
				if err != nil || res.Backend != tc.backend || !res.Success {
					t.Fatalf("got %q %v, want %s", res.Backend, err, tc.backend)
				}
				return
			}
			if rule := refusedBy(t, err); rule != tc.rule || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %s: %v; want %s containing %q", rule, err, tc.rule, tc.msg)
			}
		})
	}
}

func TestConfiguredDefaultBackend(t *testing.T) {
	r := newRig(t, func(c *config.Config) { c.Execution.DefaultBackend["python"] = "kernel" }, nil)
	if res, err := r.exec(t, Request{Language: "python"}); err != nil || res.Backend != "kernel" {
		t.Fatalf("%q %v", res.Backend, err)
	}
	// Its throw-away run goes through Execute, not a session.
	if log := r.kernel.Log(); len(log) != 1 || log[0] != "exec" {
		t.Fatalf("%v", log)
	}
}

func TestStartupChecks(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(*config.Config)
		plugins func(r *rig)
		want    []string // all in the error; none: no error
	}{
		{"two stateless backends for a language", nil, func(r *rig) { r.pm.Add("snake2", enginetest.Stateless("python")) },
			[]string{"snake, snake2", "Python stateless runs", `[execution.default_backend] python = "snake"`}},
		{"two session backends", nil, func(r *rig) { r.pm.Add("kernel2", enginetest.Stateful("python")) },
			[]string{"kernel, kernel2", "[sessions.default_backend] python ="}},
		{"a configured choice resolves it", func(c *config.Config) { c.Execution.DefaultBackend["python"] = "snake2" },
			func(r *rig) { r.pm.Add("snake2", enginetest.Stateless("python")) }, nil},
		{"configured plugin missing", func(c *config.Config) { c.Execution.DefaultBackend["python"] = "pyton" }, nil,
			[]string{`execution.default_backend.python = "pyton": no such plugin (plugins: kernel, rscript, snake)`}},
		{"configured plugin of another language", func(c *config.Config) { c.Execution.DefaultBackend["python"] = "rscript" }, nil,
			[]string{`execution.default_backend.python = "rscript": that backend does not run python (it runs r)`}},
		{"stateless plugin for sessions", func(c *config.Config) { c.Sessions.DefaultBackend["python"] = "snake" }, nil,
			[]string{`sessions.default_backend.python = "snake": that backend is stateless`}},
		{"declared languages that are not true", func(c *config.Config) { c.Plugins["snake"] = config.PluginSpec{Languages: []string{"ruby"}} }, nil,
			[]string{"plugins.snake.languages declares ruby, but the plugin runs python"}},
		{"image not allowed", nil, func(r *rig) { r.snake.Caps.Image = "docker.io/python:3"; r.pm.Add("snake", r.snake) },
			[]string{`the snake backend runs image "docker.io/python:3", which images.allowed`, "plugins.snake.config.image"}},
		{"every problem at once", func(c *config.Config) { c.Execution.DefaultBackend["r"] = "x" },
			func(r *rig) { r.pm.Add("snake2", enginetest.Stateless("python")) }, []string{"execution.default_backend.r", "snake, snake2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tryRig(t, tc.mutate, tc.plugins)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("the engine started")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
}

// A plugin refused at load (its checksum) is never replaced by another
// backend for its language: its language stays offered, and calls say why.
func TestRefusedPluginIsNotReplaced(t *testing.T) {
	const why = "checksum mismatch for /opt/x: refusing to load it"
	t.Run("declared languages", func(t *testing.T) {
		r := newRig(t, func(c *config.Config) {
			c.Plugins["pinned"] = config.PluginSpec{Path: "/opt/x", Languages: []string{"python", "shout"}}
		},
			func(r *rig) { r.pm.Refuse("pinned", why, backend.Capabilities{}) })
		for _, req := range []Request{{Language: "python"}, {Language: "python", SessionID: "s"}, {Language: "shout"}} {
			_, err := r.exec(t, req)
			if refusedBy(t, err) != route.RuleBackendUnavailable || !strings.Contains(err.Error(), "pinned ("+why+")") {
				t.Fatalf("%+v: %v", req, err)
			}
		}
		if log := r.snake.Log(); len(log) != 0 {
			t.Fatalf("another backend ran the code: %v", log)
		}
		var shout *route.Language
		for _, l := range r.e.Languages() {
			if l.ID == "shout" {
				shout = &l
			}
		}
		if shout == nil || shout.Stateless.Backend != "" || !strings.Contains(shout.Stateless.Unavailable, why) {
			t.Fatalf("shout: %+v", shout)
		}
	})
	t.Run("configured choice", func(t *testing.T) {
		r := newRig(t, func(c *config.Config) { c.Execution.DefaultBackend["python"] = "pinned" },
			func(r *rig) { r.pm.Refuse("pinned", why, backend.Capabilities{}) })
		_, err := r.exec(t, Request{Language: "python"})
		if refusedBy(t, err) != route.RuleBackendUnavailable || !strings.Contains(err.Error(), "execution.default_backend.python") || !strings.Contains(err.Error(), why) {
			t.Fatal(err)
		}
		if _, err := r.exec(t, Request{Language: "python", SessionID: "s"}); err != nil {
			t.Fatalf("sessions are served by another mode's backend: %v", err)
		}
	})
	t.Run("known from an earlier load", func(t *testing.T) {
		r := newRig(t, nil, func(r *rig) { r.pm.Refuse("snake2", "could not restart", enginetest.Stateless("python").Caps) })
		if _, err := r.exec(t, Request{Language: "python"}); refusedBy(t, err) != route.RuleBackendUnavailable {
			t.Fatal(err)
		}
	})
}

func TestLanguages(t *testing.T) {
	r := newRig(t, nil, nil)
	ls := r.e.Languages()
	if len(ls) != 2 || ls[0].ID != "python" || ls[0].Name != "Python" || ls[0].Stateless.Backend != "snake" || ls[0].Session.Backend != "kernel" ||
		ls[1].ID != "r" || ls[1].Session.Backend != "" || !strings.Contains(ls[1].Session.Unavailable, "keeps R sessions") {
		t.Fatalf("%+v", ls)
	}
	if ls[0].Stateless.Capabilities.Image != "mcp-forge/custom:python" || ls[0].Stateless.Version != "1.0.0" {
		t.Fatalf("%+v", ls[0].Stateless)
	}
	if n := r.e.LanguageName("cobol"); n != "cobol" {
		t.Fatal(n)
	}
}

// Every refusal is a *RequestError with its rule, audited as such before
// the answer, with no execution.request line and never a value.
func TestRefusalsAreAuditedWithTheirRule(t *testing.T) {
	const secret = "S3CRET-VALUE"
	cases := []struct {
		name   string
		mutate func(*config.Config)
		req    Request
		rule   string
		msg    string
	}{
		{"empty code", nil, Request{Code: " \n"}, limits.RuleCodeEmpty, "code is empty"},
		{"code too large", func(c *config.Config) { c.Execution.MaxCodeSize = 1 << 10 }, Request{Code: strings.Repeat("x", 1025)}, limits.RuleCodeSize, "execution.max_code_size"},
		{"negative timeout", nil, Request{Timeout: -1}, limits.RuleTimeout, "positive"},
		{"timeout over max", nil, Request{Timeout: 1801}, limits.RuleTimeoutMax, "execution.max_timeout"},
		{"mcp tools", nil, Request{MCPTools: []string{"memory"}}, RuleMCPTools, "bridge plugin"},
		{"mcp tool name", nil, Request{MCPTools: []string{"../x"}}, RuleMCPToolName, `"../x"`},
		{"custom image", nil, Request{CustomImage: "docker.io/library/python:3"}, RuleImage, "images.allowed"},
		{"traversal session id", nil, Request{SessionID: "../../etc"}, session.RuleSessionID, "is invalid"},
		{"NUL in code", nil, Request{Code: "x = 1\n\x00"}, limits.RuleCodeNUL, "line 2"},
		{"env name", nil, Request{Environment: map[string]string{"1BAD": secret}}, limits.RuleEnvName, `"1BAD"`},
		{"env name with NUL", nil, Request{Environment: map[string]string{"A\x00B": secret}}, limits.RuleEnvName, "invalid"},
		{"env reserved", nil, Request{Environment: map[string]string{"FORGE_IN": secret}}, limits.RuleEnvReserved, "FORGE_"},
		{"env NUL", nil, Request{Environment: map[string]string{"TOKEN": secret + "\x00"}}, limits.RuleEnvNUL, "TOKEN: its value contains a NUL"},
		{"env value size", func(c *config.Config) { c.Execution.MaxEnvValue = 1 << 10 }, Request{Environment: map[string]string{"TOKEN": secret + strings.Repeat("x", 1024)}},
			limits.RuleEnvValueSize, "execution.max_env_value"},
		{"env total size", func(c *config.Config) { c.Execution.MaxEnvValue, c.Execution.MaxEnvTotal = 1<<10, 2<<10 },
			Request{Environment: map[string]string{"A": secret + strings.Repeat("x", 1000), "B": strings.Repeat("x", 1000), "C": strings.Repeat("x", 100)}}, limits.RuleEnvTotalSize, "3 variables take"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.mutate, nil)
			tc.req.Language = "python"
			if tc.req.Code == "" {
				tc.req.Code = "1"
			}
			_, err := r.exec(t, tc.req)
			if rule := refusedBy(t, err); rule != tc.rule || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %s %q, want %s with %q", rule, err, tc.rule, tc.msg)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the refusal echoes a value: %s", err)
			}
			entries := r.audit()
			if len(entries) != 1 {
				t.Fatalf("want exactly one audit entry, got %+v", entries)
			}
			e := entries[0]
			event, severity := EventRefused, audit.Warning
			if tc.rule == RuleImage {
				event, severity = audit.SecurityViolation, audit.Critical
			}
			wantErr := err.Error()
			if strings.HasPrefix(tc.rule, "env-") {
				// Names may be secrets too: the log records the rule only.
				wantErr = "environment refused by rule " + tc.rule
				for k := range tc.req.Environment {
					if strings.Contains(e.Error, k) {
						t.Fatalf("the audit line names variable %q: %+v", k, e)
					}
				}
			}
			if e.Event != event || e.Severity != severity || e.Success || e.Details["rule"] != tc.rule ||
				e.Details["tool"] != "execute_python" || e.UserID != "c1" || !strings.HasPrefix(e.Error, wantErr) {
				t.Fatalf("%+v", e)
			}
			if tc.rule == session.RuleSessionID && e.SessionID != "" {
				t.Fatalf("an invalid session id in the session field: %+v", e)
			}
			if len(r.snake.Log())+len(r.kernel.Log()) != 0 {
				t.Fatal("a refused request reached a backend")
			}
		})
	}
}

// The maxima themselves are allowed.
func TestLimitsAtTheirMaxima(t *testing.T) {
	r := newRig(t, func(c *config.Config) {
		c.Execution.MaxCodeSize, c.Execution.MaxEnvValue, c.Execution.MaxEnvTotal = 1<<10, 1<<10, 2<<10
	}, nil)
	env := map[string]string{"A": strings.Repeat("x", 1024), "B": strings.Repeat("y", 1024-6)} // 2+1024 + 2+1018 = 2046 bytes
	var got backend.ExecuteRequest
	r.snake.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		got = req
		return backend.ExecuteResult{Success: true}, nil
	}
	if _, err := r.exec(t, Request{Language: "python", Code: strings.Repeat("1", 1024), Timeout: 1800, Environment: env}); err != nil {
		t.Fatal(err)
	}
	if got.Timeout != 1800*time.Second || len(got.Env) != 2 || got.MaxOutputBytes != 1<<20 || got.MaxImageBytes != 5<<20 || got.RunID == "" {
		t.Fatalf("%+v", got)
	}
	if _, err := r.exec(t, Request{Language: "python"}); err != nil || got.Timeout != 300*time.Second {
		t.Fatalf("default timeout: %v %v", got.Timeout, err)
	}
}

func TestExecutionIsAudited(t *testing.T) {
	r := newRig(t, nil, nil)
	r.snake.Run = func(context.Context, backend.ExecuteRequest, func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		return backend.ExecuteResult{Error: &backend.ExecError{Name: "ZeroDivisionError"}, ExitCode: 1}, nil
	}
	if _, err := r.exec(t, Request{Language: "python", Code: "1/0", Environment: map[string]string{"TOKEN": "v"}}); err != nil {
		t.Fatal(err)
	}
	r.snake.Run = func(context.Context, backend.ExecuteRequest, func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		return backend.ExecuteResult{}, errors.New("podman went away")
	}
	if _, err := r.exec(t, Request{Language: "python"}); err == nil {
		t.Fatal("a failure of the backend must be an error")
	}
	es := r.audit()
	if len(es) != 4 {
		t.Fatalf("%+v", es)
	}
	req, done, failed := es[0], es[1], es[3]
	if req.Event != audit.ExecutionRequest || req.Severity != audit.Info || req.Details["code_sha256"] != audit.HashCode("1/0") || req.Details["backend"] != "snake" {
		t.Fatalf("request: %+v", req)
	}
	// Names too may hold secrets: only their count is recorded.
	if n, _ := req.Details["env_count"].(float64); n != 1 || req.Details["env_names"] != nil {
		t.Fatalf("env count: %+v", req.Details)
	}
	// A failure of the user's code is an ordinary outcome; a failure of the
	// server is an error.
	if done.Event != audit.ExecutionComplete || done.Severity != audit.Info || done.Success || done.Details["error_name"] != "ZeroDivisionError" {
		t.Fatalf("complete: %+v", done)
	}
	if failed.Event != audit.ExecutionComplete || failed.Severity != audit.Error || !strings.Contains(failed.Error, "podman went away") {
		t.Fatalf("failed: %+v", failed)
	}
}

func TestWaitingForASlotEndsWithTheCall(t *testing.T) {
	r := newRig(t, func(c *config.Config) { c.Execution.MaxConcurrentRuns = 1 }, nil)
	release, started := make(chan struct{}), make(chan struct{})
	r.kernel.Run = func(context.Context, backend.ExecuteRequest, func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		close(started)
		<-release
		return backend.ExecuteResult{Success: true}, nil
	}
	done := make(chan error)
	go func() { _, err := r.exec(t, Request{Language: "python", SessionID: "a"}); done <- err }()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.e.Execute(ctx, Request{Language: "python", SessionID: "b", Code: "1", Client: "c1"}, nil); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if ss := r.e.Sessions("c1", false); len(ss) != 1 || ss[0].ID != "a" {
		t.Fatalf("the session of the cancelled call was kept: %+v", ss)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// docs/audit.md lists every rule a request can break.
func TestEveryRuleIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "audit.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{limits.RuleCodeEmpty, limits.RuleCodeSize, limits.RuleCodeNUL, limits.RuleTimeout, limits.RuleTimeoutMax, RuleMCPTools, RuleImage, limits.RuleEnvName, limits.RuleEnvReserved,
		limits.RuleEnvNUL, limits.RuleEnvValueSize, limits.RuleEnvTotalSize, route.RuleBackendUnknown, route.RuleBackendUnavailable, route.RuleBackendAmbiguous, route.RuleBackendLanguage,
		route.RuleBackendStateless, route.RuleNoBackend, session.RuleSessionID, session.RuleSessionNotFound, session.RuleSessionLanguage, session.RuleSessionsMax, session.RuleVariableName, session.RuleStateDocsSize, RuleArguments, RuleImageMissing,
		RuleMCPToolName, toolbridge.RuleUnknown, toolbridge.RuleDenied, RuleSessionJob, jobs.RuleJobID, jobs.RuleJobNotFound, jobs.RuleJobsMax} {
		if !strings.Contains(string(doc), "| `"+rule+"` |") {
			t.Errorf("docs/audit.md does not list rule %s", rule)
		}
	}
	if !strings.Contains(string(doc), "| `warning` |") || !strings.Contains(string(doc), EventRefused) {
		t.Error("docs/audit.md has no severity table")
	}
}

// An allowed custom image that is not on the machine is a refusal saying
// what to do, not a backend failure; an open session keeps its image.
func TestCustomImageMissing(t *testing.T) {
	r := newRig(t, nil, nil)
	present := map[string]bool{"mcp-forge/custom:here": true}
	r.e.ImagePresent = func(_ context.Context, ref string) (bool, error) { return present[ref], nil }
	_, err := r.exec(t, Request{Language: "python", CustomImage: "mcp-forge/custom:gone"})
	if refusedBy(t, err) != RuleImageMissing || !strings.Contains(err.Error(), "build_environment") {
		t.Fatal(err)
	}
	if _, err := r.exec(t, Request{Language: "python", CustomImage: "mcp-forge/custom:here"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s", CustomImage: "mcp-forge/custom:here"}); err != nil {
		t.Fatal(err)
	}
	delete(present, "mcp-forge/custom:here")
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s", CustomImage: "mcp-forge/custom:here"}); err != nil {
		t.Fatalf("an open session was refused for its image: %v", err)
	}
}

// A result carries at most limits.MaxImages images, with a notice of the rest.
func TestImageCountCapped(t *testing.T) {
	r := newRig(t, nil, nil)
	r.snake.Run = func(context.Context, backend.ExecuteRequest, func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		var res backend.ExecuteResult
		for i := 0; i < 3*limits.MaxImages; i++ {
			res.Images = append(res.Images, backend.Image{Name: fmt.Sprintf("p%d.png", i), MIMEType: "image/png", Data: []byte{1}})
		}
		res.Success = true
		return res, nil
	}
	res, err := r.exec(t, Request{Language: "python"})
	if err != nil || len(res.Images) != limits.MaxImages || !strings.Contains(strings.Join(res.Notices, " "), fmt.Sprintf("produced %d images", 3*limits.MaxImages)) {
		t.Fatalf("%d images, notices %v, %v", len(res.Images), res.Notices, err)
	}
}
