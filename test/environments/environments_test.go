// Package environments tests custom environments end to end: a real
// `mcp-forge serve` over MCP, real Podman layering, and a real builder
// plugin process (testdata/forgedemo) that writes stub Python modules, so
// these tests do not depend on a package index. The uv and debian builders
// have their own tests.
package environments

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/environments"
	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

type buildOut = mcpserver.BuildEnvironmentOutput

// start runs a server whose builder is forgedemo; extra is TOML appended
// inside [environment_builder]. Every image it builds is removed at the end.
func start(t *testing.T, extra string) *testenv.Server {
	t.Helper()
	return startWith(t, extra, nil)
}

// startWith is start with a client that answers elicitation requests with
// approve (nil: a client without elicitation).
func startWith(t *testing.T, extra string, approve *bool) *testenv.Server {
	t.Helper()
	base, cfg := demoConfig(t, extra)
	return serve(t, base, cfg, approve)
}

// demoConfig is the base directory and configuration of start.
func demoConfig(t *testing.T, extra string) (base, cfg string) {
	t.Helper()
	testenv.Require(t)
	bin := testenv.BuildPlugin(t, "./testdata/forgedemo")
	base = testenv.BaseDir(t)
	t.Cleanup(func() { removeImages(t, base) })
	cfg = fmt.Sprintf(`[environment_builder]
builder = "forgedemo"
security_scan = "auto"
%s

[environment_builder.package_validation]
use_allowlist = false

[environment_builder.templates.demo]
description = "the demo package and a helper"
packages = ["forgedemo", "helper-one"]

[plugins.forgedemo]
path = %q
`, extra, bin)
	return base, cfg
}

// progressLog collects the progress notifications the client receives.
var progressLog struct {
	sync.Mutex
	msgs []string
}

// elicited collects the approval questions the client was asked.
var elicited struct {
	sync.Mutex
	msgs []string
}

// serve is testenv.StartServerAt with a client that records progress.
func serve(t testing.TB, base, toml string, approve *bool) *testenv.Server {
	t.Helper()
	opts := &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			progressLog.Lock()
			progressLog.msgs = append(progressLog.msgs, fmt.Sprintf("%v/%v %s", r.Params.Progress, r.Params.Total, r.Params.Message))
			progressLog.Unlock()
		}}
	if approve != nil {
		opts.ElicitationHandler = func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited.Lock()
			elicited.msgs = append(elicited.msgs, r.Params.Message)
			elicited.Unlock()
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": *approve}}, nil
		}
	}
	return serveWith(t, base, toml, opts)
}

// serveWith is serve with the client's options.
func serveWith(t testing.TB, base, toml string, opts *mcp.ClientOptions) *testenv.Server {
	t.Helper()
	cfg := filepath.Join(base, "forge.toml")
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.Binary(t), "--config", cfg, "serve")
	// The uv cache is the test's own (environment_builder.uv_cache_path
	// defaults to one of the host's).
	cmd.Env = append(os.Environ(), "FORGE_VOLUMES_BASE_PATH="+base, "FORGE_SECURITY_AUDIT_LOG="+filepath.Join(base, "audit.log"),
		"FORGE_ENVIRONMENT_BUILDER_UV_CACHE_PATH="+filepath.Join(base, "uv-cache"))
	// On the Kubernetes leg, its sandboxes are pods and its images go to the cluster's registry.
	cmd.Env = append(cmd.Env, testenv.RuntimeEnv(t)...)
	logf, _ := os.Create(filepath.Join(base, "server.log"))
	cmd.Stderr = logf
	client := mcp.NewClient(&mcp.Implementation{Name: "forge-envs-e2e", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(base, "server.log"))
		t.Fatalf("connect: %v\n%s", err, log)
	}
	t.Cleanup(func() {
		sess.Close()
		logf.Close()
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(base, "server.log"))
			t.Logf("server log:\n%s", log)
		}
	})
	return &testenv.Server{Session: sess, Cmd: cmd, Base: base, AuditLog: filepath.Join(base, "audit.log"), Config: cfg}
}

// removeImages removes every image a test server built (by its instance label).
func removeImages(t testing.TB, base string) {
	rt := testenv.Images(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ims, err := rt.Images(ctx, map[string]string{environments.LabelInstance: forge.Instance(base)})
	if err != nil {
		t.Logf("listing test images: %v", err)
		return
	}
	for _, im := range ims {
		// The server may still be removing the container of a run in this
		// image (cleanups run before the server stops): retry until it is gone,
		// or a later run finds the name taken.
		var err error
		for ctx.Err() == nil {
			if err = rt.RemoveImage(ctx, im.ID); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("test image %s left behind: %v", im.ID, err)
		}
	}
}

func ourImages(t testing.TB, base string) []string {
	t.Helper()
	ims, err := testenv.Images(t).Images(context.Background(), map[string]string{environments.LabelInstance: forge.Instance(base)})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, im := range ims {
		out = append(out, fmt.Sprintf("%s %v", im.ID[:12], im.Names))
	}
	return out
}

func build(t testing.TB, s *testenv.Server, args map[string]any) (buildOut, *mcp.CallToolResult) {
	t.Helper()
	var out buildOut
	res := s.Call(t, "build_environment", args, &out)
	return out, res
}

func calls(t *testing.T, s *testenv.Server) string {
	b, _ := os.ReadFile(filepath.Join(s.Base, "builds", "forgedemo", "calls.log"))
	return string(b)
}

// auditRules are the rules of refusals in the audit log.
func auditRules(t *testing.T, s *testenv.Server) []string {
	t.Helper()
	var out []string
	for _, e := range testenv.AuditEntries(t, s.AuditLog) {
		if e.Event == environments.EventRefused || e.Event == environments.EventViolation {
			out = append(out, fmt.Sprint(e.Details["rule"]))
		}
	}
	return out
}

func auditEvents(t *testing.T, s *testenv.Server, event string) int {
	t.Helper()
	b, _ := os.ReadFile(s.AuditLog)
	return strings.Count(string(b), `"event":"`+event+`"`)
}

// The whole life of an environment through MCP: build from a template with
// progress, a cache hit, imports in a stateless run and in a session, the
// list tool and resource, refusals before the builder, delete.
func TestEnvironmentLifecycle(t *testing.T) {
	s := start(t, "")
	ctx := context.Background()

	// Progress notifications arrive while it builds.
	params := &mcp.CallToolParams{Name: "build_environment", Arguments: map[string]any{
		"name": "demo", "template": "demo", "packages": []string{"Extra_Pkg>=1.0"}, "description": "e2e demo"}}
	params.SetProgressToken("p1")
	start := time.Now()
	res, err := s.Session.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	cold := time.Since(start)
	var out buildOut
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	if res.IsError || !out.Success || out.Image != "mcp-forge/custom:demo" || out.CacheHit || out.Builder != "forgedemo" || out.BuilderVersion != "0.3.0" {
		t.Fatalf("%s\n%+v", testenv.Text(res), out)
	}
	if len(out.Packages) != 3 || out.SizeBytes < 100<<20 || !strings.Contains(out.Scan, "not scanned: trivy is not on PATH") ||
		len(out.Warnings) == 0 {
		t.Fatalf("%+v", out)
	}
	t.Logf("cold build %.2fs (%s)", cold.Seconds(), testenv.Text(res))
	testenv.WaitFor(t, "progress notifications", 10*time.Second, func() bool {
		progressLog.Lock()
		defer progressLog.Unlock()
		all := strings.Join(progressLog.msgs, "|")
		return strings.Contains(all, "resolve") && strings.Contains(all, "fetch: 3 of 3") && strings.Contains(all, "4/4 check")
	})

	// Labels on the real image.
	im, ok, err := testenv.Images(t).Image(ctx, "mcp-forge/custom:demo")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	for k, want := range map[string]string{environments.LabelBuilder: "forgedemo", environments.LabelBuilderVersion: "0.3.0",
		environments.LabelPackages: `["forgedemo","helper-one","extra-pkg>=1.0"]`, environments.LabelInstance: forge.Instance(s.Base),
		environments.LabelBaseImage: "mcp-forge/python:3.11", environments.LabelTemplate: "demo", environments.LabelClient: "local"} {
		if im.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, im.Labels[k], want)
		}
	}
	if !strings.Contains(im.Labels[environments.LabelLock], `"sha256:`) {
		t.Errorf("lock label %q", im.Labels[environments.LabelLock])
	}

	// The same request again: a cache hit, in about a second.
	start = time.Now()
	out2, res2 := build(t, s, map[string]any{"name": "demo", "template": "demo", "packages": []string{"extra-pkg>=1.0"}})
	hit := time.Since(start)
	if !out2.Success || !out2.CacheHit || out2.Image != out.Image {
		t.Fatalf("%s %+v", testenv.Text(res2), out2)
	}
	if hit > 3*time.Second {
		t.Errorf("cache hit took %s", hit)
	}
	t.Logf("cache hit %.2fs", hit.Seconds())
	if n := strings.Count(calls(t, s), "build "); n != 1 {
		t.Fatalf("the builder built %d times:\n%s", n, calls(t, s))
	}

	// Import in a stateless run and in a session.
	code := "import forgedemo, helper_one, extra_pkg\nprint(forgedemo.NAME, helper_one.VERSION, extra_pkg.NAME)"
	var ex mcpserver.ExecuteOutput
	r := s.Call(t, "execute_python", map[string]any{"code": code, "custom_image": "mcp-forge/custom:demo"}, &ex)
	if !ex.Success || strings.TrimSpace(ex.Stdout) != "forgedemo 1.0.0 extra-pkg" {
		t.Fatalf("stateless: %s", testenv.Text(r))
	}
	r = s.Call(t, "execute_python", map[string]any{"code": code, "custom_image": "mcp-forge/custom:demo", "session_id": "envs"}, &ex)
	if !ex.Success || strings.TrimSpace(ex.Stdout) != "forgedemo 1.0.0 extra-pkg" {
		t.Fatalf("session: %s", testenv.Text(r))
	}
	r = s.Call(t, "execute_python", map[string]any{"code": "forgedemo.VERSION", "session_id": "envs"}, &ex)
	if !ex.Success || ex.ResultRepr != "'1.0.0'" {
		t.Fatalf("session state: %s", testenv.Text(r))
	}
	s.Call(t, "destroy_session", map[string]any{"session_id": "envs"}, nil)

	// Listed by the tool and the resource.
	var list mcpserver.ListEnvironmentsOutput
	s.Call(t, "list_environments", map[string]any{}, &list)
	if len(list.Environments) != 1 || list.Environments[0].Name != "demo" || len(list.Environments[0].Packages) != 3 {
		t.Fatalf("%+v", list)
	}
	rr, err := s.Session.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpserver.EnvironmentsURI})
	if err != nil {
		t.Fatal(err)
	}
	txt := rr.Contents[0].Text
	for _, want := range []string{`"name": "demo"`, `"the demo package and a helper"`, environments.LabelLock, `"builder": "forgedemo"`} {
		if !strings.Contains(txt, want) {
			t.Errorf("resource lacks %s:\n%s", want, txt)
		}
	}

	// Refused before the builder hears of it.
	for _, tc := range []struct {
		args map[string]any
		rule string
	}{
		{map[string]any{"name": "bad", "packages": []string{"forgedemo", "colourama"}}, "package_blocklist"},
		{map[string]any{"name": "bad", "packages": []string{"--extra-index-url=https://evil.example"}}, "package_spec"},
		// The fuzz corpus's worst: an option smuggled after a newline, a NUL,
		// a Cyrillic look-alike, a marker, a path, an editable install.
		{map[string]any{"name": "bad", "packages": []string{"numpy\n--extra-index-url=x"}}, "package_spec"},
		{map[string]any{"name": "bad", "packages": []string{"numpy\x00"}}, "package_spec"},
		{map[string]any{"name": "bad", "packages": []string{"p\u0430ndas"}}, "package_spec"},
		{map[string]any{"name": "bad", "packages": []string{"numpy; python_version<'3.12'"}}, "package_spec"},
		{map[string]any{"name": "bad", "packages": []string{"./pkg"}}, "package_spec"},
		{map[string]any{"name": "bad", "packages": []string{"-e ."}}, "package_spec"},
		{map[string]any{"name": "bad", "packages": []string{"x @ file:///etc/passwd"}}, "package_spec"},
		{map[string]any{"name": "bad", "packages": []string{"thing-dev"}}, "package_approval"},
		{map[string]any{"name": "../etc", "packages": []string{"forgedemo"}}, environments.RuleName},
	} {
		o, res := build(t, s, tc.args)
		if !res.IsError || o.Error == nil || o.Error.Type != "RequestError" || !strings.Contains(o.Error.Message, tc.rule) {
			t.Fatalf("%v: %s", tc.args, testenv.Text(res))
		}
	}
	if c := calls(t, s); strings.Contains(c, "colourama") || strings.Contains(c, "thing") || strings.Count(c, "build ") != 1 {
		t.Fatalf("a refused request reached the builder:\n%s", c)
	}
	rules := strings.Join(auditRules(t, s), ",")
	for _, want := range []string{"package_blocklist", "package_spec", "package_approval", environments.RuleName} {
		if !strings.Contains(rules, want) {
			t.Errorf("audit lacks refusal %s: %s", want, rules)
		}
	}

	// Delete: gone from Podman and from the list; a second delete refuses.
	var del mcpserver.DeleteEnvironmentOutput
	if res := s.Call(t, "delete_environment", map[string]any{"name": "demo"}, &del); !del.Deleted {
		t.Fatal(testenv.Text(res))
	}
	if _, ok, _ := testenv.Images(t).Image(ctx, "mcp-forge/custom:demo"); ok {
		t.Fatal("image still there")
	}
	if res := s.Call(t, "delete_environment", map[string]any{"name": "demo"}, &del); !res.IsError || del.Deleted {
		t.Fatal(testenv.Text(res))
	}
	// Not an image this forge built: delete refuses to touch it.
	if res := s.Call(t, "delete_environment", map[string]any{"name": "python"}, &del); !res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if auditEvents(t, s, environments.EventDelete) != 1 || auditEvents(t, s, "build.complete") != 2 {
		t.Fatalf("audit: %d deletes, %d build.complete", auditEvents(t, s, environments.EventDelete), auditEvents(t, s, "build.complete"))
	}
}

// Limits: concurrency, cancellation leaving nothing, timeout, oversize
// removed, and the per-user rate limit.
func TestEnvironmentLimits(t *testing.T) {
	testenv.Require(t)
	ctx := context.Background()
	baseImg, ok, err := testenv.Images(t).Image(ctx, "mcp-forge/python:3.11")
	if err != nil || !ok {
		t.Fatal("base image missing", err)
	}
	// Room for the base and 1 MiB: forgedemo's bigpkg adds 4 MiB.
	max := baseImg.Size + 1<<20
	s := start(t, fmt.Sprintf("max_concurrent_builds = 1\nmax_build_time = 12\nmax_image_size = \"%d\"\n\n[environment_builder.build_rate_limit]\nmax_builds_per_hour = 4\nmax_builds_per_day = 10\n", max))

	// A slow build holds the only slot; a second build is refused meanwhile.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := s.Session.CallTool(cctx, &mcp.CallToolParams{Name: "build_environment", Arguments: map[string]any{"name": "slow", "packages": []string{"slowpkg"}}})
		done <- res
	}()
	testenv.WaitFor(t, "the slow build to reach the builder", 30*time.Second, func() bool { return strings.Contains(calls(t, s), "build slowpkg") })
	o, res := build(t, s, map[string]any{"name": "other", "packages": []string{"forgedemo"}})
	if !res.IsError || !strings.Contains(o.Error.Message, "max_concurrent_builds") {
		t.Fatalf("concurrent: %s", testenv.Text(res))
	}
	// Cancel it: no image, no partial layer.
	cancel()
	<-done
	partial := func() []string {
		m, _ := filepath.Glob(filepath.Join(s.Base, "builds", "forgedemo", "partial-*"))
		return m
	}
	testenv.WaitFor(t, "the cancelled build to release its slot and remove its partial layer", 30*time.Second, func() bool {
		return len(partial()) == 0 && auditEvents(t, s, "build.complete") == 1
	})
	if ims := ourImages(t, s.Base); len(ims) != 0 {
		t.Fatalf("the cancelled build left images %v", ims)
	}

	// Timeout (max_build_time = 12 s).
	startT := time.Now()
	o, res = build(t, s, map[string]any{"name": "slow", "packages": []string{"slowpkg"}})
	if !res.IsError || !strings.Contains(o.Error.Message, "max_build_time") || time.Since(startT) > 40*time.Second {
		t.Fatalf("timeout: %s", testenv.Text(res))
	}
	testenv.WaitFor(t, "the timed-out build's partial layer to go", 30*time.Second, func() bool { return len(partial()) == 0 })

	// Oversize: layered, measured, refused and removed.
	o, res = build(t, s, map[string]any{"name": "big", "packages": []string{"bigpkg"}})
	if !res.IsError || !strings.Contains(o.Error.Message, "max_image_size") || !strings.Contains(o.Error.Message, "removed") {
		t.Fatalf("oversize: %s", testenv.Text(res))
	}
	if ims := ourImages(t, s.Base); len(ims) != 0 {
		t.Fatalf("the oversize image was kept: %v", ims)
	}

	// The fourth build of the hour passes, the fifth is refused.
	if o, res := build(t, s, map[string]any{"name": "fine", "packages": []string{"forgedemo"}}); !o.Success {
		t.Fatal(testenv.Text(res))
	}
	o, res = build(t, s, map[string]any{"name": "more", "packages": []string{"forgedemo"}})
	if !res.IsError || !strings.Contains(o.Error.Message, "max_builds_per_hour") {
		t.Fatalf("rate: %s", testenv.Text(res))
	}
	// Refused requests are audited as refusals, failed builds as
	// build.complete with the rule that stopped them.
	rules := strings.Join(auditRules(t, s), ",")
	for _, want := range []string{"max_concurrent_builds", "build_rate_limit_hour"} {
		if !strings.Contains(rules, want) {
			t.Errorf("audit lacks refusal %s: %s", want, rules)
		}
	}
	log, _ := os.ReadFile(s.AuditLog)
	for _, want := range []string{environments.RuleCancelled, environments.RuleTimeout, environments.RuleImageSize} {
		if !strings.Contains(string(log), `"rule":"`+want+`"`) {
			t.Errorf("audit lacks a build.complete with rule %s", want)
		}
	}
}

// A package matching an approval pattern is asked of the user through MCP
// elicitation: built when approved, refused (and never built) when not.
func TestEnvironmentApprovalByElicitation(t *testing.T) {
	for _, approve := range []bool{false, true} {
		t.Run(fmt.Sprint("approve=", approve), func(t *testing.T) {
			s := startWith(t, "", &approve)
			elicited.Lock()
			elicited.msgs = nil
			elicited.Unlock()
			o, res := build(t, s, map[string]any{"name": "nightly", "packages": []string{"forgedemo", "thing-nightly"}})
			elicited.Lock()
			asked := strings.Join(elicited.msgs, "|")
			elicited.Unlock()
			t.Logf("result: %s", testenv.Text(res))
			if !strings.Contains(asked, "thing-nightly") || !strings.Contains(asked, `"*-nightly"`) || strings.Contains(asked, "forgedemo,") {
				t.Fatalf("asked %q", asked)
			}
			built := strings.Contains(calls(t, s), "thing-nightly")
			if approve && (!o.Success || !built) {
				t.Fatalf("approved: %s", testenv.Text(res))
			}
			if !approve && (o.Success || built || !strings.Contains(o.Error.Message, "package_approval") || !strings.Contains(o.Error.Message, "did not approve")) {
				t.Fatalf("declined: %s (built %v)", testenv.Text(res), built)
			}
		})
	}
}

// Issue 20 item 5: an approval answer counts only when it answers the
// question the server asked in that call. A client that declared no
// elicitation and sends an accept on its first call (with no request
// state, or a made-up one) builds nothing; a client that was asked
// approves once, and replaying its answer is asked again. Every ignored
// answer is a security.violation with rule approval_unsolicited.
func TestEnvironmentApprovalUnsolicited(t *testing.T) {
	accept := mcp.InputResponseMap{"approve_packages": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	args := map[string]any{"name": "nightly", "packages": []string{"forgedemo", "thing-nightly"}}
	call := func(t *testing.T, s *testenv.Server, state string, answers mcp.InputResponseMap) *mcp.CallToolResult {
		t.Helper()
		res, err := s.Session.CallTool(t.Context(), &mcp.CallToolParams{Name: "build_environment", Arguments: args, InputResponses: answers, RequestState: state})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	count := func(t *testing.T, s *testenv.Server, rule string) int {
		n := 0
		for _, r := range auditRules(t, s) {
			if r == rule {
				n++
			}
		}
		return n
	}

	t.Run("client that was never asked", func(t *testing.T) {
		s := start(t, "")
		for _, state := range []string{"", "0123456789abcdef0123456789abcdef"} {
			res := call(t, s, state, accept)
			if !res.IsError || !strings.Contains(testenv.Text(res), "refused (package_approval)") || !strings.Contains(testenv.Text(res), "ignored") {
				t.Fatalf("state %q: %s", state, testenv.Text(res))
			}
		}
		if strings.Contains(calls(t, s), "thing-nightly") || auditEvents(t, s, environments.EventApproved) != 0 {
			t.Fatalf("built or audited as approved without being asked:\n%s", calls(t, s))
		}
		if n := count(t, s, "approval_unsolicited"); n != 2 {
			t.Fatalf("%d audit entries with rule %s, want 2; rules %v", n, "approval_unsolicited", auditRules(t, s))
		}
	})

	t.Run("answer replayed", func(t *testing.T) {
		base, cfg := demoConfig(t, "")
		s := serveWith(t, base, cfg, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return nil, fmt.Errorf("the server should return input requests, not ask by request")
			}})
		first := call(t, s, "", nil)
		if !first.NeedsInput() || first.RequestState == "" || first.InputRequests["approve_packages"] == nil {
			t.Fatalf("want the approval question: %s", testenv.Text(first))
		}
		var o buildOut
		res := call(t, s, first.RequestState, accept)
		if raw, _ := json.Marshal(res.StructuredContent); json.Unmarshal(raw, &o) != nil || !o.Success || !strings.Contains(calls(t, s), "thing-nightly") {
			t.Fatalf("the answer to the question asked was not taken: %s", testenv.Text(res))
		}
		if again := call(t, s, first.RequestState, accept); !again.NeedsInput() {
			t.Fatalf("a replayed answer was taken: %s", testenv.Text(again))
		}
		if auditEvents(t, s, environments.EventApproved) != 1 || count(t, s, "approval_unsolicited") != 1 {
			t.Fatalf("want one approval and one ignored answer; rules %v", auditRules(t, s))
		}
	})
}

// Over HTTP each tenant owns its environments: another tenant neither sees,
// runs, rebuilds nor deletes them.
func TestEnvironmentsBelongToTenants(t *testing.T) {
	testenv.Require(t)
	bin := testenv.BuildPlugin(t, "./testdata/forgedemo")
	tenants, keys := testenv.TenantKeys(t, "alice", "bob")
	s := testenv.StartHTTP(t, fmt.Sprintf(`[environment_builder]
builder = "forgedemo"

[environment_builder.package_validation]
use_allowlist = false

[plugins.forgedemo]
path = %q

%s`, bin, tenants))
	t.Cleanup(func() { removeImages(t, s.Base) })
	alice, bob := s.MustConnect(t, keys["alice"]), s.MustConnect(t, keys["bob"])

	var out buildOut
	if res := testenv.Call(t, alice, "build_environment", map[string]any{"name": "alices", "packages": []string{"forgedemo"}}, &out); !out.Success {
		t.Fatal(testenv.Text(res))
	}
	var list mcpserver.ListEnvironmentsOutput
	testenv.Call(t, bob, "list_environments", map[string]any{}, &list)
	if len(list.Environments) != 0 {
		t.Fatalf("bob sees %+v", list)
	}
	testenv.Call(t, alice, "list_environments", map[string]any{}, &list)
	if len(list.Environments) != 1 {
		t.Fatalf("alice sees %+v", list)
	}
	var ex mcpserver.ExecuteOutput
	if res := testenv.Call(t, bob, "execute_python", map[string]any{"code": "import forgedemo", "custom_image": "mcp-forge/custom:alices"}, &ex); !res.IsError || !strings.Contains(testenv.Text(res), environments.RuleOwner) {
		t.Fatalf("bob ran in alice's environment: %s", testenv.Text(res))
	}
	if res := testenv.Call(t, alice, "execute_python", map[string]any{"code": "import forgedemo; print(forgedemo.NAME)", "custom_image": "mcp-forge/custom:alices"}, &ex); !ex.Success {
		t.Fatalf("alice: %s", testenv.Text(res))
	}
	if res := testenv.Call(t, bob, "build_environment", map[string]any{"name": "alices", "packages": []string{"other"}}, &out); !res.IsError || !strings.Contains(testenv.Text(res), environments.RuleOwner) {
		t.Fatalf("bob took the name: %s", testenv.Text(res))
	}
	// Building on alice's environment is using it: refused, audited, and no
	// image of bob's name appears (whichever spelling names it).
	for _, base := range []string{"mcp-forge/custom:alices", "localhost/mcp-forge/custom:alices"} {
		if res := testenv.Call(t, bob, "build_environment", map[string]any{"name": "bobs", "base_image": base, "packages": []string{"forgedemo"}}, &out); !res.IsError || out.Success || !strings.Contains(testenv.Text(res), environments.RuleOwner) {
			t.Fatalf("bob built on alice's environment (%s): %s", base, testenv.Text(res))
		}
	}
	if _, ok, _ := testenv.Images(t).Image(context.Background(), "mcp-forge/custom:bobs"); ok {
		t.Fatal("bob's image on alice's environment exists")
	}
	if b, _ := os.ReadFile(s.AuditLog); strings.Count(string(b), `"rule":"`+environments.RuleOwner+`"`) < 4 || !strings.Contains(string(b), `"field":"base_image"`) {
		t.Fatalf("the refusals are not audited with their rule:\n%s", b)
	}
	// alice can.
	if res := testenv.Call(t, alice, "build_environment", map[string]any{"name": "alices2", "base_image": "mcp-forge/custom:alices", "packages": []string{"helper-one"}}, &out); !out.Success {
		t.Fatalf("alice on her own environment: %s", testenv.Text(res))
	}
	var del mcpserver.DeleteEnvironmentOutput
	if res := testenv.Call(t, bob, "delete_environment", map[string]any{"name": "alices"}, &del); !res.IsError || del.Deleted {
		t.Fatalf("bob deleted it: %s", testenv.Text(res))
	}
	if _, ok, _ := testenv.Images(t).Image(context.Background(), "mcp-forge/custom:alices"); !ok {
		t.Fatal("alice's environment is gone")
	}
}

// auto_cleanup runs when the server starts (then hourly): beyond max_images
// the least recently used environment is removed, and audited.
func TestEnvironmentAutoCleanup(t *testing.T) {
	testenv.Require(t)
	bin := testenv.BuildPlugin(t, "./testdata/forgedemo")
	base := testenv.BaseDir(t)
	t.Cleanup(func() { removeImages(t, base) })
	cfg := fmt.Sprintf(`[environment_builder]
builder = "forgedemo"

[environment_builder.auto_cleanup]
enabled = true
max_images = 1

[environment_builder.package_validation]
use_allowlist = false

[plugins.forgedemo]
path = %q
`, bin)
	s := serve(t, base, cfg, nil)
	for _, name := range []string{"older", "newer"} {
		if o, res := build(t, s, map[string]any{"name": name, "packages": []string{"forgedemo"}}); !o.Success {
			t.Fatal(testenv.Text(res))
		}
	}
	// The newer one was last used last (its build); the older one goes.
	s.Session.Close()
	s2 := serve(t, base, cfg, nil)
	testenv.WaitFor(t, "the cleanup at start", 60*time.Second, func() bool { return auditEvents(t, s2, environments.EventCleanup) == 1 })
	ctx := context.Background()
	if _, ok, _ := testenv.Images(t).Image(ctx, "mcp-forge/custom:older"); ok {
		t.Fatal("the least recently used environment was kept")
	}
	if _, ok, _ := testenv.Images(t).Image(ctx, "mcp-forge/custom:newer"); !ok {
		t.Fatal("the newest environment was removed")
	}
	b, _ := os.ReadFile(s2.AuditLog)
	if !strings.Contains(string(b), `"env_name":"older"`) || !strings.Contains(string(b), "max_images") {
		t.Fatalf("cleanup not audited with its reason:\n%s", b)
	}
}
