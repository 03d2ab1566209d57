package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"net/http/httptest"

	"github.com/mcp-forge/mcp-forge/core/packages/testindex"
	"github.com/mcp-forge/mcp-forge/plugins/internal/prune"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// modes are the two ways this builder installs: uv, and the pip fallback
// forced by configuration.
var modes = []struct {
	name string
	cfg  Config
}{
	{"uv", Config{}},
	{"pip", Config{UVPath: "none"}},
}

func newTestBuilder(t *testing.T, cfg Config) *uvBuilder {
	t.Helper()
	b, err := newBuilder(cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.UVPath == "" && b.uv == "" {
		t.Skipf("no uv on this machine (%s): run make setup", b.why)
	}
	if cfg.UVPath == "none" && b.uv != "" {
		t.Fatalf("uv_path = none still uses uv at %s", b.uv)
	}
	return b
}

func spec(ix *testindex.Index, pkgs ...string) builder.PlanRequest {
	r := builder.PlanRequest{Language: "python", BaseImage: "mcp-forge/python:3.11", BaseImageID: "sha256:1e545a0e46c6",
		Index: builder.Index{URL: ix.URL}}
	for _, p := range pkgs {
		name, version, _ := strings.Cut(p, " ")
		r.Packages = append(r.Packages, builder.Package{Name: name, Version: version})
	}
	return r
}

type progressRec struct {
	mu     sync.Mutex
	events []builder.Progress
}

func (p *progressRec) add(e builder.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, e)
}

func (p *progressRec) phases() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, e := range p.events {
		if len(out) == 0 || out[len(out)-1] != e.Phase {
			out = append(out, e.Phase)
		}
	}
	return out
}

// at is b working in work, as the core has it by starting the plugin
// there.
func at(b *uvBuilder, work string) *uvBuilder {
	b.dir = work
	return b
}

func build(t *testing.T, b *uvBuilder, r builder.PlanRequest, work string, rec *progressRec) (builder.BuildResult, error) {
	t.Helper()
	at(b, work)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	plan, err := b.Plan(ctx, r)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if rec == nil {
		rec = &progressRec{}
	}
	return b.Build(ctx, builder.BuildRequest{Spec: r, CacheKey: plan.CacheKey, BuildID: "t"}, rec.add)
}

func TestConformance(t *testing.T) {
	ix := testindex.New(t, nil)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			sdktest.RunBuilder(t, newTestBuilder(t, m.cfg), sdktest.BuilderCases{Spec: spec(ix, testindex.ChainTop), Timeout: 2 * time.Minute})
		})
	}
}

func TestConformanceOverGRPC(t *testing.T) {
	ix := testindex.New(t, nil)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			newTestBuilder(t, m.cfg) // skips without uv
			raw := `{"uv_path":"` + m.cfg.UVPath + `"}`
			// In this process New would work in the test's directory: the
			// factory gives it one of its own, as the core's start does.
			work := t.TempDir()
			factory := func(h host.Host, cfg backend.Config) (builder.Builder, error) {
				b, err := New(h, cfg)
				if err != nil {
					return nil, err
				}
				return at(b.(*uvBuilder), work), nil
			}
			b := sdktest.ServeBuilder(t, Info, factory, sdktest.NewLocalHost(t.TempDir()), []byte(raw))
			sdktest.RunBuilder(t, b, sdktest.BuilderCases{Spec: spec(ix, testindex.ChainTop), Timeout: 2 * time.Minute})
		})
	}
}

// The plugin binary itself, launched as the core launches it.
func TestConformanceLaunched(t *testing.T) {
	ix := testindex.New(t, nil)
	bin := testenv.BuildPlugin(t, ".")
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			newTestBuilder(t, m.cfg) // skips without uv
			b := sdktest.LaunchBuilder(t, bin, sdktest.NewLocalHost(t.TempDir()), []byte(`{"uv_path":"`+m.cfg.UVPath+`"}`))
			sdktest.RunBuilder(t, b, sdktest.BuilderCases{Spec: spec(ix, testindex.ChainTop), Timeout: 2 * time.Minute})
		})
	}
}

// forge-a needs forge-b, which needs forge-c>=2: the lock holds all three
// with the index's sha256, the layer tree puts them where Debian's python3
// looks, and they import.
func TestDependencyChain(t *testing.T) {
	ix := testindex.New(t, nil)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			b := newTestBuilder(t, m.cfg)
			work := t.TempDir()
			rec := &progressRec{}
			// A strict umask must not make the layer's /usr unreadable.
			old := syscall.Umask(0o077)
			res, err := build(t, b, spec(ix, testindex.ChainTop), work, rec)
			syscall.Umask(old)
			if err != nil {
				t.Fatal(err)
			}
			for d := "usr/local/lib/python3.11/dist-packages"; d != "."; d = filepath.Dir(d) {
				if st, err := os.Stat(filepath.Join(work, res.Dir, d)); err != nil || st.Mode().Perm() != 0o755 {
					t.Errorf("layer directory %s: %v %v, want 0755", d, st.Mode(), err)
				}
			}
			if st, err := os.Stat(filepath.Join(work, res.Dir)); err != nil || st.Mode().Perm() != 0o755 {
				t.Errorf("layer root: %v %v, want 0755", st.Mode(), err)
			}
			want := map[string]string{"forge-a": "1.0", "forge-b": "1.0", "forge-c": "2.0"}
			if len(res.Lock) != len(want) {
				t.Fatalf("lock %+v, want %v", res.Lock, want)
			}
			for _, l := range res.Lock {
				if want[l.Name] != l.Version {
					t.Errorf("locked %s %s, want %s", l.Name, l.Version, want[l.Name])
				}
				sum := ix.SHA256(testindex.WheelName(l.Name, l.Version))
				if !slices.Equal(l.Hashes, []string{"sha256:" + sum}) {
					t.Errorf("%s: hashes %v, want the served wheel's sha256:%s", l.Name, l.Hashes, sum)
				}
			}
			site := filepath.Join(work, res.Dir, "usr/local/lib/python3.11/dist-packages")
			for _, mod := range []string{"forge_a", "forge_b", "forge_c"} {
				if _, err := os.Stat(filepath.Join(site, mod, "__init__.py")); err != nil {
					t.Errorf("layer lacks %s: %v", mod, err)
				}
			}
			entries, _ := os.ReadDir(filepath.Join(work, res.Dir))
			if len(entries) != 1 || entries[0].Name() != "usr" {
				t.Errorf("the layer tree holds more than usr/: %v", entries)
			}
			if res.SizeBytes <= 0 {
				t.Errorf("size %d", res.SizeBytes)
			}
			out, err := exec.Command("/usr/bin/python3", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import forge_a, forge_c; print(forge_c.__version__)", site).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "2.0" {
				t.Errorf("import from the layer: %v %s", err, out)
			}
			if got := rec.phases(); !slices.Equal(got, []string{"resolve", "download", "install", "done"}) {
				t.Errorf("phases %v, want resolve, download, install, done", got)
			}
			hasFallback := slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "built with pip, not uv") })
			if hasFallback != (m.name == "pip") {
				t.Errorf("warnings %q: the pip fallback must be said when (and only when) it is used", res.Warnings)
			}
			if slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "not on the work directory's filesystem") }) {
				t.Errorf("the default cache is under the work dir, yet: %q", res.Warnings)
			}
			if m.name == "uv" {
				if _, err := os.Stat(filepath.Join(work, "uv", "cache")); err != nil {
					t.Errorf("no uv cache under the work dir: %v", err)
				}
			}
		})
	}
}

func TestVersionConflict(t *testing.T) {
	ix := testindex.New(t, nil)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			b := newTestBuilder(t, m.cfg)
			work := t.TempDir()
			_, err := build(t, b, spec(ix, testindex.Conflict), work, nil)
			if err == nil || !strings.Contains(err.Error(), "version conflict") || !strings.Contains(err.Error(), testindex.ChainBottom) {
				t.Fatalf("want a version-conflict error naming %s, got %v", testindex.ChainBottom, err)
			}
			assertNoLeftovers(t, work)
		})
	}
}

func TestSdistOnlyRefused(t *testing.T) {
	ix := testindex.New(t, nil)
	sdist := "/files/" + testindex.SdistName(testindex.SdistOnly, "1.0")
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			b := newTestBuilder(t, m.cfg)
			work := t.TempDir()
			_, err := build(t, b, spec(ix, testindex.SdistOnly), work, nil)
			if err == nil || !strings.Contains(err.Error(), testindex.SdistOnly) {
				t.Fatalf("want a refusal naming %s, got %v", testindex.SdistOnly, err)
			}
			if m.name == "uv" && !strings.Contains(err.Error(), "only as a source distribution") {
				t.Errorf("the refusal does not say why: %v", err)
			}
			var he *host.Error
			if !errors.As(err, &he) || he.Kind != host.KindInvalid {
				t.Errorf("a refusal of the request, not an internal error: %#v", err)
			}
			t.Logf("refusal: %v", err)
			if n := ix.Hits(sdist); n != 0 {
				t.Errorf("the sdist was fetched %d times", n)
			}
			assertNoLeftovers(t, work)
		})
	}
}

// An identical request reuses the layer: same directory, no wheel fetched
// again, said in the warnings.
func TestCacheHit(t *testing.T) {
	ix := testindex.New(t, nil)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			b := newTestBuilder(t, m.cfg)
			work := t.TempDir()
			r := spec(ix, testindex.ChainTop)
			first, err := build(t, b, r, work, nil)
			if err != nil {
				t.Fatal(err)
			}
			wheel := "/files/" + testindex.WheelName(testindex.ChainBottom, "2.0")
			fetched := ix.Hits(wheel)
			start := time.Now()
			rec := &progressRec{}
			second, err := build(t, b, r, work, rec)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if second.Dir != first.Dir || second.SizeBytes != first.SizeBytes {
				t.Errorf("second build %s (%d bytes), first %s (%d bytes)", second.Dir, second.SizeBytes, first.Dir, first.SizeBytes)
			}
			if !slices.ContainsFunc(second.Warnings, func(w string) bool { return strings.HasPrefix(w, "cache hit") }) {
				t.Errorf("the second build does not say it was a cache hit: %q", second.Warnings)
			}
			if slices.ContainsFunc(first.Warnings, func(w string) bool { return strings.HasPrefix(w, "cache hit") }) {
				t.Errorf("the first build claims a cache hit: %q", first.Warnings)
			}
			if slices.Contains(rec.phases(), "install") {
				t.Errorf("the cache hit installed again: %v", rec.phases())
			}
			// uv may read the index again while it resolves (its own cache
			// policy); what a cache hit saves is the install, checked above.
			t.Logf("%s: %s fetched %d times before, %d after", m.name, wheel, fetched, ix.Hits(wheel))
			t.Logf("%s: cache hit in %s", m.name, took.Round(time.Millisecond))
		})
	}
}

// Cancelling at the first progress report stops the tool and leaves no
// partial directory.
func TestCancelLeavesNothing(t *testing.T) {
	ix := testindex.New(t, nil)
	for _, m := range modes {
		for _, at := range []string{"resolve", "download"} {
			t.Run(m.name+"-"+at, func(t *testing.T) {
				b := newTestBuilder(t, m.cfg)
				work := t.TempDir()
				r := spec(ix, testindex.ChainTop)
				plan, err := b.Plan(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				b.dir = work
				_, err = b.Build(ctx, builder.BuildRequest{Spec: r, CacheKey: plan.CacheKey}, func(p builder.Progress) {
					if p.Phase == at {
						cancel()
					}
				})
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("want context.Canceled, got %v", err)
				}
				assertNoLeftovers(t, work)
			})
		}
	}
}

// Cancelling while uv or pip waits on the index kills it (its connection
// closes) and leaves nothing: the proxy holds the request for forge-c's
// page until the client goes away.
func TestCancelKillsTheTool(t *testing.T) {
	ix := testindex.New(t, nil)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			b := newTestBuilder(t, m.cfg)
			target, _ := url.Parse(ix.URL)
			proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
			held := make(chan struct{}, 8)
			gone := make(chan struct{}, 8)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.URL.Path, "/simple/"+testindex.ChainBottom) {
					held <- struct{}{}
					<-r.Context().Done()
					gone <- struct{}{}
					return
				}
				proxy.ServeHTTP(w, r)
			}))
			defer srv.Close()
			r := spec(ix, testindex.ChainTop)
			r.Index.URL = srv.URL + "/simple"
			plan, err := b.Plan(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			work := t.TempDir()
			done := make(chan error, 1)
			go func() {
				_, err := at(b, work).Build(ctx, builder.BuildRequest{Spec: r, CacheKey: plan.CacheKey}, nil)
				done <- err
			}()
			select {
			case <-held:
			case err := <-done:
				t.Fatalf("the build ended before asking for %s: %v", testindex.ChainBottom, err)
			case <-time.After(2 * time.Minute):
				t.Fatal("the tool never asked for " + testindex.ChainBottom)
			}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("want context.Canceled, got %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the build still runs 30 s after it was cancelled")
			}
			select {
			case <-gone:
			case <-time.After(10 * time.Second):
				t.Fatal("the tool's request is still open: the tool was not killed")
			}
			assertNoLeftovers(t, work)
		})
	}
}

// assertNoLeftovers: no layer and no scratch directory after a failed build.
func assertNoLeftovers(t *testing.T, work string) {
	t.Helper()
	for _, d := range []string{"uv/tmp", "uv/layers"} {
		entries, err := os.ReadDir(filepath.Join(work, d))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if len(entries) > 0 {
			t.Errorf("%s holds %d entries after a failed build (first %s)", d, len(entries), entries[0].Name())
		}
	}
}

// Credentials in an index URL never appear in an error, and do not change
// the cache key.
func TestCredentialsMasked(t *testing.T) {
	ix := testindex.New(t, nil)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			b := newTestBuilder(t, m.cfg)
			plain := spec(ix, testindex.SdistOnly)
			secret := plain
			secret.Index.URL = strings.Replace(ix.URL, "http://", "http://forgeuser:s3cr3t-pw@", 1)
			p1, err := b.Plan(context.Background(), plain)
			if err != nil {
				t.Fatal(err)
			}
			p2, err := b.Plan(context.Background(), secret)
			if err != nil {
				t.Fatal(err)
			}
			if p1.CacheKey != p2.CacheKey {
				t.Errorf("credentials changed the cache key")
			}
			_, err = build(t, b, secret, t.TempDir(), nil)
			if err == nil {
				t.Fatal("the sdist-only package built")
			}
			if strings.Contains(err.Error(), "s3cr3t-pw") {
				t.Fatalf("the password leaked into the error: %v", err)
			}
		})
	}
}

func TestPlanKey(t *testing.T) {
	b, err := newBuilder(Config{UVPath: "none"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base := builder.PlanRequest{Language: "python", BaseImage: "mcp-forge/python:3.11", BaseImageID: "sha256:aa",
		Packages: []builder.Package{{Name: "Forge_A"}, {Name: "forge-c", Version: ">=2"}}, Index: builder.Index{URL: "https://pypi.org/simple"}}
	key := func(f func(*builder.PlanRequest)) string {
		r := base
		r.Packages = slices.Clone(base.Packages)
		r.BaseLabels = map[string]string{}
		f(&r)
		p, err := b.Plan(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		return p.CacheKey
	}
	k0 := key(func(*builder.PlanRequest) {})
	same := map[string]func(*builder.PlanRequest){
		"order":          func(r *builder.PlanRequest) { slices.Reverse(r.Packages) },
		"name spelling":  func(r *builder.PlanRequest) { r.Packages[0].Name = "forge.a" },
		"labels default": func(r *builder.PlanRequest) { r.BaseLabels[LabelPythonVersion] = "3.11" },
	}
	for name, f := range same {
		if key(f) != k0 {
			t.Errorf("%s changed the key", name)
		}
	}
	differ := map[string]func(*builder.PlanRequest){
		"image id": func(r *builder.PlanRequest) { r.BaseImageID = "sha256:bb" },
		"python":   func(r *builder.PlanRequest) { r.BaseLabels[LabelPythonVersion] = "3.12" },
		"platform": func(r *builder.PlanRequest) { r.BaseLabels[LabelPlatform] = "aarch64-manylinux_2_36" },
		"version":  func(r *builder.PlanRequest) { r.Packages[1].Version = ">=3" },
		"index":    func(r *builder.PlanRequest) { r.Index.URL = "https://example.org/simple" },
		"extra":    func(r *builder.PlanRequest) { r.Index.ExtraURLs = []string{"https://example.org/simple"} },
		"offline":  func(r *builder.PlanRequest) { r.Index.Offline = true },
	}
	for name, f := range differ {
		if key(f) == k0 {
			t.Errorf("%s did not change the key", name)
		}
	}
	// find_links is configuration, not a field of the spec: it keys too.
	fl, err := newBuilder(Config{UVPath: "none", FindLinks: []string{"/srv/wheels"}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if p, err := fl.Plan(context.Background(), base); err != nil || p.CacheKey == k0 {
		t.Errorf("find_links did not change the key (%v)", err)
	}
	r := base
	r.Language = "r"
	if _, err := b.Plan(context.Background(), r); err == nil || !strings.Contains(err.Error(), "debian builder") {
		t.Errorf("an R spec: %v", err)
	}
	r = base
	r.BaseLabels = map[string]string{LabelPythonVersion: "3.11; id"}
	if _, err := b.Plan(context.Background(), r); err == nil || !strings.Contains(err.Error(), LabelPythonVersion) {
		t.Errorf("a bad label: %v", err)
	}
}

func TestHelpers(t *testing.T) {
	if got := mask("GET https://alice:pw@idx.example/simple and http://u@127.0.0.1/x"); got != "GET https://***@idx.example/simple and http://***@127.0.0.1/x" {
		t.Errorf("mask: %s", got)
	}
	if got := pipPlatform("x86_64-manylinux_2_36"); got != "manylinux_2_36_x86_64" {
		t.Errorf("pipPlatform: %s", got)
	}
	for in, want := range map[string]string{"": "x", "1.0": "x==1.0", "==1.0": "x==1.0", ">=1,<2": "x>=1,<2", "~=1.2": "x~=1.2"} {
		if got := requirement(builder.Package{Name: "x", Version: in}); got != want {
			t.Errorf("requirement(%q) = %q, want %q", in, got, want)
		}
	}
	lock, err := parseLock("a==1.0 \\\n    --hash=sha256:" + strings.Repeat("a", 64) + "\nB_c==2 \\\n    --hash=sha256:" + strings.Repeat("b", 64) + " \\\n    --hash=sha256:" + strings.Repeat("c", 64) + "\n")
	if err != nil || len(lock) != 2 || lock[1].Name != "b-c" || len(lock[1].Hashes) != 2 {
		t.Errorf("parseLock: %+v %v", lock, err)
	}
	if _, err := parseLock("a==1.0\n"); err == nil {
		t.Error("a lock without hashes was accepted")
	}
	for _, bad := range []Config{{UVPath: "uv"}, {UVPath: "/nonexistent/uv"}, {PythonVersion: "3"}, {Platform: "x86 64"}, {IndexURL: "http://example.org/simple"}, {Timeout: "soon"}, {UVCachePath: "cache"},
		{FindLinks: []string{"wheels"}}, {FindLinks: []string{"/srv/../etc"}}, {FindLinks: []string{"/srv/wheels --pre"}}, {FindLinks: []string{"--index-url=https://x"}}} {
		if _, err := newBuilder(bad, t.TempDir()); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
	// Neither uv nor pip: the plugin loads (the server starts) and refuses
	// every build with the reason.
	nb, err := newBuilder(Config{UVPath: "none", PythonPath: "/nonexistent/python3"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nb.Plan(context.Background(), builder.PlanRequest{Language: "python", BaseImage: "mcp-forge/python:3.11", Packages: []builder.Package{{Name: "x"}}}); err == nil || !strings.Contains(err.Error(), "cannot build here") {
		t.Errorf("a builder with no tool planned: %v", err)
	}
	if _, err := New(nil, backend.Config(`{"uv_path": 3}`)); err == nil {
		t.Error("a malformed config was accepted")
	}
}

// End to end: the layer, copied onto / of a throw-away container of the
// Python image (no network), makes the packages importable by the image's
// own python3; without it they are not.
func TestE2ELayerImports(t *testing.T) {
	testenv.Require(t)
	ix := testindex.New(t, nil)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			b := newTestBuilder(t, m.cfg)
			work := t.TempDir()
			res, err := build(t, b, spec(ix, testindex.ChainTop), work, nil)
			if err != nil {
				t.Fatal(err)
			}
			rnd := make([]byte, 4)
			rand.Read(rnd)
			name := "forge-envplug-test-" + hex.EncodeToString(rnd)
			check := `python3 -c 'import forge_a, forge_b, forge_c; print("forge-c", forge_c.__version__)'`
			out, err := exec.Command("podman", "run", "--rm", "--name", name, "--network", "none", "--user", "0",
				"-v", filepath.Join(work, res.Dir)+":/l:ro", "mcp-forge/python:3.11", "sh", "-c", "cp -a /l/. / && "+check).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "forge-c 2.0") {
				t.Fatalf("the packages do not import from the layer: %v\n%s", err, out)
			}
			if out, err := exec.Command("podman", "run", "--rm", "--name", name+"-base", "--network", "none", "mcp-forge/python:3.11", "sh", "-c", check).CombinedOutput(); err == nil {
				t.Fatalf("the base image already imports them: %s", out)
			}
		})
	}
}

// A cache on another filesystem works and is said to be slow.
func TestCacheOnOtherFilesystem(t *testing.T) {
	ix := testindex.New(t, nil)
	var a, b syscall.Stat_t
	work := t.TempDir()
	if syscall.Stat("/dev/shm", &a) != nil || syscall.Stat(work, &b) != nil || a.Dev == b.Dev {
		t.Skip("no second filesystem (/dev/shm) here")
	}
	cache, err := os.MkdirTemp("/dev/shm", "forge-uv-cache-")
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(cache)
	bl := newTestBuilder(t, Config{UVCachePath: cache})
	res, err := build(t, bl, spec(ix, testindex.ChainTop), work, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "not on the work directory's filesystem") }) {
		t.Errorf("no warning about the cache's filesystem: %q", res.Warnings)
	}
}

// An offline build from a find-links directory of wheels: nothing else is
// asked for (the default index is unreachable from here anyway).
func TestFindLinksOffline(t *testing.T) {
	dir := t.TempDir()
	for _, p := range testindex.DefaultProjects() {
		if p.SdistOnly {
			continue
		}
		name, data, err := testindex.Wheel(p.Name, p.Version, p.Requires)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cfg := m.cfg
			cfg.FindLinks = []string{dir}
			b := newTestBuilder(t, cfg)
			r := builder.PlanRequest{Language: "python", BaseImage: "mcp-forge/python:3.11", Packages: []builder.Package{{Name: testindex.ChainTop}},
				Index: builder.Index{Offline: true}}
			work := t.TempDir()
			res, err := build(t, b, r, work, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Lock) != 3 {
				t.Fatalf("lock %+v", res.Lock)
			}
			if _, err := os.Stat(filepath.Join(work, res.Dir, "usr/local/lib/python3.11/dist-packages/forge_c/__init__.py")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A package no source has, and a constraint no version meets, are said as
// such, not as a version conflict (uv's "No solution found" covers all
// three).
func TestNotFoundAndNoVersion(t *testing.T) {
	ix := testindex.New(t, nil)
	links := t.TempDir() // empty: the offline case finds nothing there
	b := newTestBuilder(t, Config{FindLinks: []string{links}})
	offline := spec(ix, "forge-missing")
	offline.Index = builder.Index{URL: ix.URL, Offline: true}
	for _, c := range []struct {
		name string
		req  builder.PlanRequest
		want []string
	}{
		{"unknown", spec(ix, "forge-nope"), []string{"package forge-nope was not found in the package registry", "check the name"}},
		{"unknown dependency", spec(ix, testindex.ChainTop, "forge-nope"), []string{"package forge-nope was not found"}},
		{"offline", offline, []string{"package forge-missing is neither in the download cache nor in a find_links directory", "offline = true"}},
		{"no version", spec(ix, testindex.ChainBottom+" >=3"), []string{"no version of package forge-c satisfies forge-c>=3"}},
		{"conflict stays a conflict", spec(ix, testindex.ChainTop, testindex.ChainBottom+" <2"), []string{"version conflict", testindex.ChainBottom}},
	} {
		t.Run(c.name, func(t *testing.T) {
			work := t.TempDir()
			_, err := build(t, b, c.req, work, nil)
			var he *host.Error
			if err == nil || !errors.As(err, &he) || he.Kind != host.KindInvalid {
				t.Fatalf("want a refusal of the request, got %#v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal lacks %q: %v", w, err)
				}
			}
			if c.name != "conflict stays a conflict" && strings.Contains(err.Error(), "version conflict") {
				t.Errorf("reported as a version conflict: %v", err)
			}
			assertNoLeftovers(t, work)
		})
	}
}

// workDir is a builder's work directory, removed when the test ends once
// nothing writes into it any more: a tool killed with the plugin may still
// be exiting when the plugin's own cleanup returns.
func workDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "uv-work-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.RemoveAll(dir)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("work directory not removable 10 s after the test: %v", err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return dir
}

// An extra's dependencies are resolved and installed with the package
// (issue 20, item 9: extras were dropped); the extra is in the cache key.
func TestExtras(t *testing.T) {
	ix := testindex.New(t, []testindex.Project{
		{Name: "forge-extras", Version: "1.0", Extras: map[string][]string{"fancy": {"forge-fancy-dep"}}},
		{Name: "forge-fancy-dep", Version: "1.0"},
	})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			b := newTestBuilder(t, m.cfg)
			plain, with := spec(ix, "forge-extras"), spec(ix, "forge-extras")
			with.Packages[0].Extras = []string{"Fancy"}
			p1, _ := b.Plan(context.Background(), plain)
			p2, err := b.Plan(context.Background(), with)
			if err != nil || p1.CacheKey == p2.CacheKey || strings.Join(p2.Packages[0].Extras, ",") != "fancy" {
				t.Fatalf("plan with the extra: %+v %v (key %s vs %s)", p2, err, p2.CacheKey, p1.CacheKey)
			}
			work := workDir(t)
			res, err := build(t, b, with, work, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := lockNames(res.Lock); got != "forge-extras forge-fancy-dep" {
				t.Fatalf("lock %s", got)
			}
			if _, err := os.Stat(filepath.Join(work, res.Dir, "usr/local/lib/python3.11/dist-packages/forge_fancy_dep/__init__.py")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func lockNames(l []builder.Locked) string {
	var s []string
	for _, p := range l {
		s = append(s, p.Name)
	}
	return strings.Join(s, " ")
}

// A wheel that unpacks to far more than the build may write is stopped
// while it unpacks, near the limit, and nothing of it stays: no layer, no
// scratch, nothing new in the cache (issue 20, item 3).
func TestDecompressionBombStopped(t *testing.T) {
	const payload, limit = 1 << 30, 32 << 20
	ix := testindex.New(t, []testindex.Project{{Name: "forge-bomb", Version: "1.0", Payload: payload}, {Name: "forge-c", Version: "1.0"}})
	if n := len(ix.Files()); n != 2 {
		t.Fatal(ix.Files())
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			b := newTestBuilder(t, m.cfg)
			work := workDir(t)
			cache := filepath.Join(work, "cache")
			// A build first, so the cache holds something to keep.
			if _, err := buildLimited(t, b, spec(ix, "forge-c"), work, cache, limit); err != nil {
				t.Fatal(err)
			}
			kept := cacheEntries(cache)
			layers, _ := os.ReadDir(filepath.Join(work, "uv/layers"))
			peak := watchPeak(t, work)
			_, err := buildLimited(t, b, spec(ix, "forge-bomb"), work, cache, limit)
			max := peak()
			var he *host.Error
			if !errors.As(err, &he) || he.Kind != host.KindTooLarge || !strings.Contains(err.Error(), fmt.Sprint(limit)) {
				t.Fatalf("want a too-large refusal naming the limit, got %v", err)
			}
			if max > 4*limit {
				t.Fatalf("%d bytes were on disk while unpacking, with a limit of %d", max, limit)
			}
			if tmp, _ := os.ReadDir(filepath.Join(work, "uv/tmp")); len(tmp) > 0 {
				t.Errorf("scratch %s stays", tmp[0].Name())
			}
			if now, _ := os.ReadDir(filepath.Join(work, "uv/layers")); len(now) != len(layers) {
				t.Errorf("layers %v, before the build %v", now, layers)
			}
			after := cacheEntries(cache)
			for p := range after {
				if !kept[p] {
					t.Errorf("the refused build left %s in the cache", p)
				}
			}
			for p := range kept {
				if !after[p] {
					t.Errorf("%s of an earlier build was removed", p)
				}
			}
			if n := treeBytes(work); n > limit {
				t.Errorf("%d bytes stay in the work directory", n)
			}
			t.Logf("peak %d bytes on disk; %v", max, err)
		})
	}
}

func buildLimited(t *testing.T, b *uvBuilder, r builder.PlanRequest, work, cache string, max int64) (builder.BuildResult, error) {
	t.Helper()
	at(b, work).cfg.UVCachePath = cache
	plan, err := b.Plan(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return b.Build(ctx, builder.BuildRequest{Spec: r, CacheKey: plan.CacheKey, BuildID: "t", MaxBytes: max}, nil)
}

// watchPeak samples the bytes under dir until the returned function is
// called, which returns the largest sample.
func watchPeak(t *testing.T, dir string) func() int64 {
	var peak atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if n := treeBytes(dir); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() int64 {
		close(stop)
		<-done
		return peak.Load()
	}
}

// treeBytes is the bytes of the distinct files under dir.
func treeBytes(dir string) int64 {
	e, _ := prune.Scan(dir, time.Now())
	var n int64
	for _, s := range e.Inodes {
		n += s
	}
	return n
}

// After a build, layers and cache entries past environment_builder.storage
// are pruned: the layer of the build stays.
func TestBuildPrunes(t *testing.T) {
	ix := testindex.New(t, nil)
	b := newTestBuilder(t, Config{})
	work := workDir(t)
	old, err := build(t, b, spec(ix, "forge-c 1.0"), work, nil)
	if err != nil {
		t.Fatal(err)
	}
	oldLayer := filepath.Dir(filepath.Join(work, old.Dir))
	// Unused for 10 days: past a 7-day bound, and past the grace.
	long := time.Now().Add(-10 * 24 * time.Hour)
	if err := os.Chtimes(filepath.Join(oldLayer, "lock.json"), long, long); err != nil {
		t.Fatal(err)
	}
	r := spec(ix, "forge-c 2.0")
	plan, _ := b.Plan(context.Background(), r)
	res, err := at(b, work).Build(context.Background(), builder.BuildRequest{Spec: r, CacheKey: plan.CacheKey, Prune: builder.Prune{MaxAge: 7 * 24 * time.Hour}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(oldLayer); !os.IsNotExist(err) {
		t.Fatalf("the old layer stays: %v", err)
	}
	if _, err := os.Stat(filepath.Join(work, res.Dir)); err != nil {
		t.Fatalf("the new layer went: %v", err)
	}
}
