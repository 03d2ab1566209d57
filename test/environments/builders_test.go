package environments

// The shipped builders (plugins/uv, plugins/debian, built by `make build`
// into bin/) end to end through MCP with real Podman: the uv builder against
// the local PEP 503 index of core/packages/testindex on 127.0.0.1, the
// Debian builder against deb.debian.org. Only the [environment_builder]
// builder key differs between them.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/core/packages/testindex"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// startBuilder runs a server whose builder is one of bin/'s plugins; body is
// the rest of the configuration (its [environment_builder] table included).
func startBuilder(t testing.TB, body string) *testenv.Server {
	t.Helper()
	testenv.Require(t)
	testenv.Binary(t)
	base := testenv.BaseDir(t)
	t.Cleanup(func() { removeImages(t, base) })
	return serve(t, base, body, nil)
}

// uvConfig is a uv-builder configuration on the test index ix.
func uvConfig(ix *testindex.Index, extra string) string {
	return fmt.Sprintf(`[environment_builder]
builder = "uv"
index_url = %q
%s

[environment_builder.package_validation]
use_allowlist = false

[environment_builder.templates.chain]
description = "the dependency chain"
packages = ["forge-a"]
`, ix.URL, extra)
}

func versions(pkgs []mcpserver.PackageVersion) string {
	var s []string
	for _, p := range pkgs {
		s = append(s, p.Name+"=="+p.Version)
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

// fileHits is how many requests reached any served file of the index.
func fileHits(ix *testindex.Index) int {
	n := 0
	for _, f := range ix.Files() {
		n += ix.Hits("/files/" + f)
	}
	return n
}

// The uv builder through MCP: a spec list and a template, imports in a
// stateless run and in a session, a cache hit, and the refusals (sdist only,
// blocklisted before any download, version conflict).
func TestUVBuilderEndToEnd(t *testing.T) {
	testenv.Require(t)
	ix := testindex.New(t, nil)
	s := startBuilder(t, uvConfig(ix, ""))

	// From a spec list: the chain's dependencies are resolved and locked.
	// With a progress token: the builder's phases reach the client.
	progressLog.Lock()
	progressLog.msgs = nil
	progressLog.Unlock()
	params := &mcp.CallToolParams{Name: "build_environment", Arguments: map[string]any{"name": "uv-list", "packages": []string{"forge-a", "forge-c>=2"}}}
	params.SetProgressToken("uv1")
	start := time.Now()
	res, err := s.Session.CallTool(context.Background(), params)
	cold := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	var out buildOut
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &out)
	if !out.Success || out.Builder != "uv" || out.CacheHit {
		t.Fatalf("%s\n%+v", testenv.Text(res), out)
	}
	if got, want := versions(out.Packages), "forge-a==1.0 forge-b==1.0 forge-c==2.0"; got != want {
		t.Fatalf("packages %q, want %q", got, want)
	}
	t.Logf("cold build %.2fs (reported %.2fs), warnings %q", cold.Seconds(), out.BuildTime, out.Warnings)
	testenv.WaitFor(t, "the uv builder's progress", 10*time.Second, func() bool {
		progressLog.Lock()
		defer progressLog.Unlock()
		all := strings.Join(progressLog.msgs, "|")
		return strings.Contains(all, "resolving 2 packages with uv") && strings.Contains(all, "downloaded 3 of 3 packages") &&
			strings.Contains(all, "installed 3 of 3 packages") && strings.Contains(all, "check")
	})
	// The image carries the lock with the wheels' hashes as served.
	im, ok, err := testenv.Images(t).Image(context.Background(), "mcp-forge/custom:uv-list")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if lock := im.Labels["io.mcp-forge.env.lock"]; !strings.Contains(lock, ix.SHA256(testindex.WheelName("forge-c", "2.0"))) {
		t.Fatalf("lock label lacks forge-c 2.0's hash: %s", lock)
	}

	// The same request again: a cache hit, with no new download.
	hits := fileHits(ix)
	start = time.Now()
	out2, res2 := build(t, s, map[string]any{"name": "uv-list", "packages": []string{"forge-c>=2", "forge-a"}})
	hit := time.Since(start)
	if !out2.Success || !out2.CacheHit || out2.Image != out.Image {
		t.Fatalf("%s\n%+v", testenv.Text(res2), out2)
	}
	if hit > 3*time.Second {
		t.Errorf("cache hit took %s", hit)
	}
	if n := fileHits(ix); n != hits {
		t.Errorf("the cache hit downloaded %d files", n-hits)
	}
	t.Logf("cache hit %.3fs", hit.Seconds())

	// From a template, with an extra package: another name, the uv cache warm.
	start = time.Now()
	out3, res3 := build(t, s, map[string]any{"name": "uv-tmpl", "template": "chain", "packages": []string{"forge-conflict"}})
	if out3.Success {
		t.Fatalf("forge-conflict with forge-a built: %s", testenv.Text(res3))
	}
	// forge-conflict needs forge-c<2 and forge-a (→ forge-c>=2): reported
	// naming the packages, as a tool error, not a protocol one.
	if msg := testenv.Text(res3); !res3.IsError || !strings.Contains(msg, "forge-c") || !strings.Contains(msg, "forge-conflict") {
		t.Fatalf("conflict: %s", msg)
	}
	t.Logf("conflict: %s", testenv.Text(res3))
	out3, res3 = build(t, s, map[string]any{"name": "uv-tmpl", "template": "chain"})
	warm := time.Since(start)
	if !out3.Success || out3.CacheHit || versions(out3.Packages) != "forge-a==1.0 forge-b==1.0 forge-c==2.0" {
		t.Fatalf("%s\n%+v", testenv.Text(res3), out3)
	}
	t.Logf("template build (conflict refused first) %.2fs", warm.Seconds())

	// Import in a stateless run and in a session of each image.
	code := "import forge_a, forge_b, forge_c\nprint(forge_a.__version__, forge_c.__version__)"
	for _, img := range []string{"mcp-forge/custom:uv-list", "mcp-forge/custom:uv-tmpl"} {
		var ex mcpserver.ExecuteOutput
		r := s.Call(t, "execute_python", map[string]any{"code": code, "custom_image": img}, &ex)
		if !ex.Success || strings.TrimSpace(ex.Stdout) != "1.0 2.0" {
			t.Fatalf("stateless in %s: %s", img, testenv.Text(r))
		}
	}
	var ex mcpserver.ExecuteOutput
	r := s.Call(t, "execute_python", map[string]any{"code": code, "custom_image": "mcp-forge/custom:uv-list", "session_id": "uvs"}, &ex)
	if !ex.Success || strings.TrimSpace(ex.Stdout) != "1.0 2.0" {
		t.Fatalf("session: %s", testenv.Text(r))
	}
	r = s.Call(t, "execute_python", map[string]any{"code": "forge_b.__version__", "session_id": "uvs"}, &ex)
	if !ex.Success || ex.ResultRepr != "'1.0'" {
		t.Fatalf("session state: %s", testenv.Text(r))
	}
	s.Call(t, "destroy_session", map[string]any{"session_id": "uvs"}, nil)
	// The base image does not have them: the imports above can fail.
	r = s.Call(t, "execute_python", map[string]any{"code": "import forge_a"}, &ex)
	if ex.Success {
		t.Fatalf("the base image imports forge_a: %s", testenv.Text(r))
	}

	// A package the index does not have: said so, not a version conflict.
	o, res := build(t, s, map[string]any{"name": "uv-nope", "packages": []string{"forge-nope"}})
	if msg := testenv.Text(res); o.Success || !strings.Contains(msg, "package forge-nope was not found") || strings.Contains(msg, "version conflict") {
		t.Fatalf("unknown package: %s", msg)
	}

	// An sdist-only package: refused naming it, the sdist never fetched.
	o, res = build(t, s, map[string]any{"name": "uv-sdist", "packages": []string{"forge-sdist-only"}})
	if msg := testenv.Text(res); o.Success || !res.IsError || !strings.Contains(msg, "forge-sdist-only") || !strings.Contains(msg, "wheel") {
		t.Fatalf("sdist: %s", msg)
	}
	if n := ix.Hits("/files/" + testindex.SdistName("forge-sdist-only", "1.0")); n != 0 {
		t.Fatalf("the sdist was fetched %d times", n)
	}

	// A blocklisted package: refused by the core before the builder asks
	// the index anything about it.
	o, res = build(t, s, map[string]any{"name": "uv-blocked", "packages": []string{"forge-a", "colourama"}})
	if msg := testenv.Text(res); o.Success || !strings.Contains(msg, "package_blocklist") || !strings.Contains(msg, "colourama") {
		t.Fatalf("blocklist: %s", msg)
	}
	if n := ix.Hits("/simple/colourama/") + ix.Hits("/simple/colourama") + ix.Hits("/files/"+testindex.WheelName("colourama", "0.1")); n != 0 {
		t.Fatalf("the index was asked %d times about colourama", n)
	}
	if ims := ourImages(t, s.Base); len(ims) != 2 {
		t.Fatalf("images after the refusals: %v", ims)
	}
}

// [plugins.uv.config] reaches the plugin: its own index_url (no
// [environment_builder] index) and uv_cache_path are used.
func TestUVBuilderPluginConfig(t *testing.T) {
	testenv.Require(t)
	ix := testindex.New(t, nil)
	cache := filepath.Join(t.TempDir(), "uvcache")
	s := startBuilder(t, fmt.Sprintf(`[environment_builder]
builder = "uv"

[environment_builder.package_validation]
use_allowlist = false

[plugins.uv.config]
index_url = %q
uv_cache_path = %q
`, ix.URL, cache))
	out, res := build(t, s, map[string]any{"name": "uv-cfg", "packages": []string{"forge-c==1.0"}})
	if !out.Success || versions(out.Packages) != "forge-c==1.0" {
		t.Fatalf("%s\n%+v", testenv.Text(res), out)
	}
	if ix.Hits("/simple/forge-c/") == 0 {
		t.Fatal("the plugin's index_url was not used")
	}
	if ents, err := os.ReadDir(cache); err != nil || len(ents) == 0 {
		t.Fatalf("uv_cache_path %s unused: %v", cache, err)
	}
}

// The Debian builder, switched by one key: an R environment with r-cran-r6
// that library(R6) loads, and a Python one with python3-tabulate. These
// download from deb.debian.org. With a tenant held to gVisor on the server
// (and runsc installed), the builder's own containers (its listing of a
// base image's packages) run under gVisor too.
func TestDebianBuilderEndToEnd(t *testing.T) {
	testenv.Require(t)
	strict := ""
	if _, err := os.Stat(config.DefaultRunsc); err == nil && !testenv.Kube() && !testenv.GVisor() {
		tenants, _ := testenv.TenantKeys(t, "strict")
		strict = strings.Replace(tenants, "[tenants.strict]\n", "[tenants.strict]\nisolation = \"gvisor\"\n", 1)
	}
	s := startBuilder(t, `[environment_builder]
builder = "debian"

[environment_builder.package_validation]
use_allowlist = false
`+strict)
	if strict != "" {
		defer builderContainersUnder(t, s, "debian", "gvisor")
	}
	cases := []struct {
		lang, name, pkg, tool, code, want string
	}{
		{"r", "deb-r", "R6", "execute_r", `library(R6); cat(as.character(packageVersion("R6")))`, "2.5"},
		{"python", "deb-py", "tabulate", "execute_python", "import tabulate\nprint(tabulate.tabulate([[1, 2]]))", "1  2"},
	}
	for _, c := range cases {
		t.Run(c.lang, func(t *testing.T) {
			start := time.Now()
			out, res := build(t, s, map[string]any{"name": c.name, "language": c.lang, "packages": []string{c.pkg}})
			if !out.Success || out.Builder != "debian" {
				t.Fatalf("%s\n%+v", testenv.Text(res), out)
			}
			t.Logf("%s build %.1fs: %s", c.lang, time.Since(start).Seconds(), versions(out.Packages))
			var ex mcpserver.ExecuteOutput
			r := s.Call(t, c.tool, map[string]any{"code": c.code, "custom_image": out.Image}, &ex)
			if !ex.Success || !strings.Contains(ex.Stdout, c.want) {
				t.Fatalf("%s in %s: %s", c.tool, out.Image, testenv.Text(r))
			}
			// Without the environment it does not load.
			r = s.Call(t, c.tool, map[string]any{"code": c.code}, &ex)
			if ex.Success {
				t.Fatalf("the base image loads it: %s", testenv.Text(r))
			}
			start = time.Now()
			out2, res2 := build(t, s, map[string]any{"name": c.name, "language": c.lang, "packages": []string{c.pkg}})
			if !out2.Success || !out2.CacheHit {
				t.Fatalf("second build: %s\n%+v", testenv.Text(res2), out2)
			}
			t.Logf("%s cache hit %.3fs", c.lang, time.Since(start).Seconds())
		})
	}
	// Refusals name the package: one Debian does not have, and a range
	// (a release has one version of a package).
	for _, c := range []struct{ pkg, want string }{
		{"forgenosuchpkg", "r-cran-forgenosuchpkg"},
		{"R6>=2", "R6"},
	} {
		out, res := build(t, s, map[string]any{"name": "deb-bad", "language": "r", "packages": []string{c.pkg}})
		if msg := testenv.Text(res); out.Success || !res.IsError || !strings.Contains(msg, c.want) {
			t.Fatalf("%s: %s", c.pkg, msg)
		}
		t.Logf("%s: %s", c.pkg, testenv.Text(res))
	}
}

// builderContainersUnder checks that plugin created containers, each under
// isolation (its container.create audit lines).
func builderContainersUnder(t *testing.T, s *testenv.Server, plugin, isolation string) {
	t.Helper()
	n := 0
	for _, e := range testenv.AuditEntries(t, s.AuditLog) {
		if e.Event != audit.ContainerCreate || e.Details["plugin"] != plugin {
			continue
		}
		n++
		if e.Details["isolation"] != isolation {
			t.Errorf("a container of the %s builder ran under %v, want %s", plugin, e.Details["isolation"], isolation)
		}
	}
	if n == 0 {
		t.Errorf("the %s builder created no container", plugin)
	}
}

// Every index setting of [environment_builder] reaches the uv builder:
// index_url (with credentials that never reach a log or the audit),
// extra_index_urls and find_links; then offline with find_links only.
func TestUVBuilderIndexSettings(t *testing.T) {
	testenv.Require(t)
	main := testindex.New(t, nil)
	extra := testindex.New(t, []testindex.Project{{Name: "forge-extra", Version: "1.0"}})
	links := t.TempDir()
	for _, p := range []testindex.Project{{Name: "forge-local", Version: "3.0"}, {Name: "forge-c", Version: "2.0"}} {
		name, data, err := testindex.Wheel(p.Name, p.Version, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(links, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "s3cr3t-pw"
	withCreds := strings.Replace(main.URL, "http://", "http://forge:"+secret+"@", 1)
	s := startBuilder(t, fmt.Sprintf(`[environment_builder]
builder = "uv"
index_url = %q
extra_index_urls = [%q]
find_links = [%q]

[environment_builder.package_validation]
use_allowlist = false
`, withCreds, extra.URL, links))
	out, res := build(t, s, map[string]any{"name": "uv-idx", "packages": []string{"forge-a", "forge-extra", "forge-local"}})
	if !out.Success || versions(out.Packages) != "forge-a==1.0 forge-b==1.0 forge-c==2.0 forge-extra==1.0 forge-local==3.0" {
		t.Fatalf("%s\n%+v", testenv.Text(res), out)
	}
	if main.Hits("/simple/forge-a/") == 0 || extra.Hits("/simple/forge-extra/") == 0 {
		t.Fatalf("index hits: main %d, extra %d", main.Hits("/simple/forge-a/"), extra.Hits("/simple/forge-extra/"))
	}
	var ex mcpserver.ExecuteOutput
	r := s.Call(t, "execute_python", map[string]any{"code": "import forge_a, forge_extra, forge_local\nprint(forge_local.__version__)", "custom_image": out.Image}, &ex)
	if !ex.Success || strings.TrimSpace(ex.Stdout) != "3.0" {
		t.Fatalf("%s", testenv.Text(r))
	}
	// The password is in no log, no audit entry and no image label.
	logs, _ := filepath.Glob(filepath.Join(s.Base, "*.log"))
	for _, f := range logs {
		if b, _ := os.ReadFile(f); strings.Contains(string(b), secret) {
			t.Errorf("%s holds the index password", f)
		}
	}
	im, _, _ := testenv.Images(t).Image(context.Background(), out.Image)
	if strings.Contains(fmt.Sprint(im.Labels), secret) {
		t.Errorf("the image labels hold the index password: %v", im.Labels)
	}

	// Offline, find_links only: built from the directory, no index asked.
	// Here find_links is the plugin's own key, not its alias in
	// [environment_builder].
	s2 := startBuilder(t, fmt.Sprintf(`[environment_builder]
builder = "uv"
offline = true

[environment_builder.package_validation]
use_allowlist = false

[plugins.uv.config]
find_links = [%q]
`, links))
	out, res = build(t, s2, map[string]any{"name": "uv-offline", "packages": []string{"forge-local"}})
	if !out.Success || versions(out.Packages) != "forge-local==3.0" {
		t.Fatalf("offline: %s\n%+v", testenv.Text(res), out)
	}
	// Offline, a package the directory lacks: a clear refusal naming it.
	out, res = build(t, s2, map[string]any{"name": "uv-offline2", "packages": []string{"forge-missing"}})
	if msg := testenv.Text(res); out.Success || !strings.Contains(msg, "package forge-missing is neither in the download cache nor in a find_links directory") || strings.Contains(msg, "version conflict") {
		t.Fatalf("offline, missing: %s", msg)
	}
	t.Logf("offline, missing: %s", testenv.Text(res))
}

// With no uv (uv_path = "none") the builder falls back to pip through the
// same MCP call, and says so in the result.
func TestUVBuilderPipFallback(t *testing.T) {
	testenv.Require(t)
	ix := testindex.New(t, nil)
	s := startBuilder(t, uvConfig(ix, "")+`
[plugins.uv.config]
uv_path = "none"
`)
	out, res := build(t, s, map[string]any{"name": "uv-pip", "packages": []string{"forge-a"}})
	if !out.Success || versions(out.Packages) != "forge-a==1.0 forge-b==1.0 forge-c==2.0" || !strings.Contains(strings.Join(out.Warnings, "|"), "built with pip, not uv") {
		t.Fatalf("%s\n%+v", testenv.Text(res), out)
	}
	var ex mcpserver.ExecuteOutput
	r := s.Call(t, "execute_python", map[string]any{"code": "import forge_a, forge_c\nprint(forge_c.__version__)", "custom_image": out.Image}, &ex)
	if !ex.Success || strings.TrimSpace(ex.Stdout) != "2.0" {
		t.Fatalf("%s", testenv.Text(r))
	}
	o, res := build(t, s, map[string]any{"name": "uv-pip-sdist", "packages": []string{"forge-sdist-only"}})
	if msg := testenv.Text(res); o.Success || !strings.Contains(msg, "forge-sdist-only") {
		t.Fatalf("sdist with pip: %s", msg)
	}
	if n := ix.Hits("/files/" + testindex.SdistName("forge-sdist-only", "1.0")); n != 0 {
		t.Fatalf("pip fetched the sdist %d times", n)
	}
}

// The uv builder built against plugin API v1 (testenv.V1Commit), as this
// core's builder: v1 expects host paths in its requests, which v2 has no
// field for, and the core's v1 path adds them. Without work_dir the v1
// builder refuses every build ("work directory is not an absolute path");
// a package only in the find_links directory resolves only if v1's
// IndexSettings.find_links carried environment_builder.find_links. The
// image it builds runs the package through MCP.
func TestV1UVBuilderThroughMCP(t *testing.T) {
	testenv.Require(t)
	bin := testenv.BuildV1(t, "plugins/uv")["plugins/uv"]
	ix := testindex.New(t, nil)
	links := t.TempDir()
	name, data, err := testindex.Wheel("forge-local", "3.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(links, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s := startBuilder(t, uvConfig(ix, fmt.Sprintf("find_links = [%q]", links))+fmt.Sprintf("\n[plugins.uv]\npath = %q\n", bin))
	out, res := build(t, s, map[string]any{"name": "uv-v1", "packages": []string{"forge-a", "forge-local"}})
	if !out.Success || versions(out.Packages) != "forge-a==1.0 forge-b==1.0 forge-c==2.0 forge-local==3.0" {
		t.Fatalf("build through the v1 uv builder: %s\n%+v", testenv.Text(res), out)
	}
	var ex mcpserver.ExecuteOutput
	r := s.Call(t, "execute_python", map[string]any{"code": "import forge_a, forge_local\nprint(forge_local.__version__)", "custom_image": out.Image}, &ex)
	if !ex.Success || strings.TrimSpace(ex.Stdout) != "3.0" {
		t.Fatalf("the v1 builder's image: %s", testenv.Text(r))
	}
	if api := testenv.PluginAPIs(t, s)["uv"]; api != 1 {
		t.Fatalf("the uv plugin negotiated API %d; want 1 (the v1 build)", api)
	}
	// Its layers are where the core starts it and resolves them.
	if ents, err := os.ReadDir(filepath.Join(s.Base, "builds", "uv", "uv", "layers")); err != nil || len(ents) == 0 {
		t.Fatalf("no layer in the builder's work directory: %v", err)
	}
}
