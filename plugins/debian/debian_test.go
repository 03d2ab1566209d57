package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// The status files in testdata are the installed packages of the forge
// images (the output of statusScript), so these tests resolve as a build
// against the real images would, without Podman.
func fixture(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name+".status"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newTestBuilder(t *testing.T, h host.Host, cfg Config) *debBuilder {
	t.Helper()
	b, err := newBuilder(h, cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	rSpec  = builder.PlanRequest{Language: "r", BaseImage: "mcp-forge/r:4.2", BaseImageID: "sha256:df72dd61b5be", Packages: []builder.Package{{Name: "R6"}}}
	pySpec = builder.PlanRequest{Language: "python", BaseImage: "mcp-forge/python:3.11", BaseImageID: "sha256:1e545a0e46c6", Packages: []builder.Package{{Name: "tabulate"}}}
)

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

func build(t *testing.T, b *debBuilder, r builder.PlanRequest, work string, rec *progressRec) (builder.BuildResult, error) {
	t.Helper()
	b.dir = work // as the core has it by starting the plugin there
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
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

// The conformance suite with the status read through host services (the
// local fake host runs the listing on this Debian host).
func TestConformance(t *testing.T) {
	b := newTestBuilder(t, sdktest.NewLocalHost(t.TempDir()), Config{})
	sdktest.RunBuilder(t, b, sdktest.BuilderCases{Spec: pySpec, Timeout: 3 * time.Minute})
}

// The plugin binary itself, launched as the core launches it (go-plugin
// over gRPC), configured with a status file.
func TestConformanceLaunched(t *testing.T) {
	cfg, _ := json.Marshal(Config{StatusFile: fixture(t, "python")})
	b := sdktest.LaunchBuilder(t, testenv.BuildPlugin(t, "."), sdktest.NewLocalHost(t.TempDir()), cfg)
	sdktest.RunBuilder(t, b, sdktest.BuilderCases{Spec: pySpec, Timeout: 3 * time.Minute})
}

// r-cran-r6's dependencies are all in the R image: the lock is R6 alone,
// hashed, and the layer puts it in R's site library.
func TestRLayer(t *testing.T) {
	b := newTestBuilder(t, nil, Config{StatusFile: fixture(t, "r")})
	work := t.TempDir()
	rec := &progressRec{}
	// A strict umask must not make the layer's root (laid over /) private.
	old := syscall.Umask(0o077)
	res, err := build(t, b, rSpec, work, rec)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{".", "usr", "usr/lib/R/site-library/R6"} {
		if st, err := os.Stat(filepath.Join(work, res.Dir, d)); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("layer directory %s: %v %v, want 0755", d, st.Mode(), err)
		}
	}
	checkLayer(t, work, res, "r-cran-r6", "usr/lib/R/site-library/R6/DESCRIPTION")
	if got := rec.phases(); !slices.Equal(got, []string{"resolve", "download", "install", "done"}) {
		t.Errorf("phases %v", got)
	}
}

func TestPythonLayer(t *testing.T) {
	b := newTestBuilder(t, nil, Config{StatusFile: fixture(t, "python")})
	work := t.TempDir()
	res, err := build(t, b, pySpec, work, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkLayer(t, work, res, "python3-tabulate", "usr/lib/python3/dist-packages/tabulate.py")
}

func checkLayer(t *testing.T, work string, res builder.BuildResult, pkg, file string) {
	t.Helper()
	i := slices.IndexFunc(res.Lock, func(l builder.Locked) bool { return l.Name == pkg })
	if i < 0 {
		t.Fatalf("%s is not in the lock %+v", pkg, res.Lock)
	}
	for _, l := range res.Lock {
		if l.Version == "" || len(l.Hashes) != 1 || len(l.Hashes[0]) != len("sha256:")+64 {
			t.Errorf("lock entry %+v", l)
		}
		// The hash is the .deb's: check it against the cached file.
		deb := filepath.Join(work, "debian", "debs", debFile(inst{Name: l.Name, Version: l.Version, Arch: archOf(t, work, l.Name)}))
		if ok, err := fileSHA256(deb, strings.TrimPrefix(l.Hashes[0], "sha256:")); !ok || err != nil {
			t.Errorf("%s: the locked hash is not the cached .deb's (%v)", l.Name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(work, res.Dir, file)); err != nil {
		t.Errorf("the layer lacks %s: %v", file, err)
	}
	if _, err := os.Stat(filepath.Join(work, res.Dir, "var/lib/dpkg")); err == nil {
		t.Error("the layer holds dpkg state: a package was configured, not only unpacked")
	}
	if res.SizeBytes <= 0 {
		t.Errorf("size %d", res.SizeBytes)
	}
	t.Logf("lock %+v, %d bytes", res.Lock, res.SizeBytes)
}

func archOf(t *testing.T, work, name string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(work, "debian", "debs", name+"_*.deb"))
	if len(m) != 1 {
		t.Fatalf("%d cached .deb files of %s", len(m), name)
	}
	base := strings.TrimSuffix(filepath.Base(m[0]), ".deb")
	return base[strings.LastIndex(base, "_")+1:]
}

func TestCacheHit(t *testing.T) {
	b := newTestBuilder(t, nil, Config{StatusFile: fixture(t, "r")})
	work := t.TempDir()
	first, err := build(t, b, rSpec, work, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &progressRec{}
	start := time.Now()
	second, err := build(t, b, rSpec, work, rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cache hit in %s", time.Since(start).Round(time.Millisecond))
	if second.Dir != first.Dir || !slices.ContainsFunc(second.Warnings, func(w string) bool { return strings.HasPrefix(w, "cache hit") }) {
		t.Errorf("second build %s %q, first %s", second.Dir, second.Warnings, first.Dir)
	}
	// Remembered: apt does not even resolve.
	if got := rec.phases(); !slices.Equal(got, []string{"resolve", "done"}) {
		t.Errorf("the cache hit went through %v, want resolve (reading the image's status), done", got)
	}
	for _, e := range rec.events {
		if strings.Contains(e.Message, "with apt") {
			t.Errorf("the cache hit ran apt: %q", e.Message)
		}
	}
	if second.SizeBytes != first.SizeBytes || !slices.EqualFunc(second.Lock, first.Lock, func(a, b builder.Locked) bool {
		return a.Name == b.Name && a.Version == b.Version && slices.Equal(a.Hashes, b.Hashes)
	}) {
		t.Errorf("the cache hit's result differs: %+v vs %+v", second, first)
	}
	// A removed layer (cleaned up) is built again, not answered from memory.
	if err := os.RemoveAll(filepath.Dir(filepath.Join(work, first.Dir))); err != nil {
		t.Fatal(err)
	}
	third, err := build(t, b, rSpec, work, nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(third.Warnings, func(w string) bool { return strings.HasPrefix(w, "cache hit") }) {
		t.Errorf("a build after the layer was removed claims a cache hit: %q", third.Warnings)
	}
	if _, err := os.Stat(filepath.Join(work, third.Dir, "usr/lib/R/site-library/R6/DESCRIPTION")); err != nil {
		t.Errorf("the rebuilt layer: %v", err)
	}
}

func TestCancelLeavesNothing(t *testing.T) {
	for _, at := range []string{"resolve", "download", "install"} {
		t.Run(at, func(t *testing.T) {
			b := newTestBuilder(t, nil, Config{StatusFile: fixture(t, "r")})
			work := t.TempDir()
			plan, err := b.Plan(context.Background(), rSpec)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b.dir = work
			_, err = b.Build(ctx, builder.BuildRequest{Spec: rSpec, CacheKey: plan.CacheKey}, func(p builder.Progress) {
				if p.Phase == at {
					cancel()
				}
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("want context.Canceled, got %v", err)
			}
			for _, d := range []string{"debian/tmp", "debian/layers"} {
				if entries, _ := os.ReadDir(filepath.Join(work, d)); len(entries) > 0 {
					t.Errorf("%s holds %s after a cancelled build", d, entries[0].Name())
				}
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	b := newTestBuilder(t, nil, Config{StatusFile: fixture(t, "r")})
	cases := []struct {
		name    string
		spec    builder.PlanRequest
		inPlan  bool
		says    string
		instead string
	}{
		{"unknown package", builder.PlanRequest{Language: "r", BaseImage: "mcp-forge/r:4.2", Packages: []builder.Package{{Name: "zzznotapackage"}}}, false, "r-cran-zzznotapackage is not in the host's Debian release", ""},
		{"missing version", builder.PlanRequest{Language: "r", BaseImage: "mcp-forge/r:4.2", Packages: []builder.Package{{Name: "R6", Version: "==9.9-9"}}}, false, "has no version 9.9-9", ""},
		{"range", builder.PlanRequest{Language: "r", BaseImage: "mcp-forge/r:4.2", Packages: []builder.Package{{Name: "R6", Version: ">=2"}}}, true, "pin an exact Debian version", ""},
		{"language", builder.PlanRequest{Language: "julia", BaseImage: "mcp-forge/r:4.2", Packages: []builder.Package{{Name: "x"}}}, true, "not \"julia\"", ""},
		{"twice", builder.PlanRequest{Language: "r", BaseImage: "mcp-forge/r:4.2", Packages: []builder.Package{{Name: "R6"}, {Name: "r-cran-r6"}}}, true, "requested twice", ""},
		{"extras", builder.PlanRequest{Language: "python", BaseImage: "mcp-forge/python:3.11", Packages: []builder.Package{{Name: "requests", Extras: []string{"socks"}}}}, true, "cannot install extras", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan, err := b.Plan(context.Background(), c.spec)
			if c.inPlan {
				if err == nil || !strings.Contains(err.Error(), c.says) {
					t.Fatalf("plan: want %q, got %v", c.says, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = b.Build(context.Background(), builder.BuildRequest{Spec: c.spec, CacheKey: plan.CacheKey}, nil)
			var he *host.Error
			if err == nil || !strings.Contains(err.Error(), c.says) || !errors.As(err, &he) || he.Kind != host.KindInvalid {
				t.Fatalf("build: want an invalid-request error saying %q, got %#v", c.says, err)
			}
		})
	}
}

// A package the image already has adds nothing and says so.
func TestAlreadyInImage(t *testing.T) {
	b := newTestBuilder(t, nil, Config{StatusFile: fixture(t, "r")})
	r := rSpec
	r.Packages = []builder.Package{{Name: "jsonlite"}}
	res, err := build(t, b, r, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Lock) != 0 || !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "r-cran-jsonlite is already in the base image") }) {
		t.Errorf("lock %+v warnings %q", res.Lock, res.Warnings)
	}
}

func TestNames(t *testing.T) {
	cases := []struct{ lang, in, want string }{
		{"r", "ggplot2", "r-cran-ggplot2"},
		{"r", "R6", "r-cran-r6"},
		{"r", "data.table", "r-cran-data.table"},
		{"r", "r-cran-jsonlite", "r-cran-jsonlite"},
		{"r", "r-bioc-biobase", "r-bioc-biobase"},
		{"python", "requests", "python3-requests"},
		{"python", "typing_extensions", "python3-typing-extensions"},
		{"python", "python3-six", "python3-six"},
	}
	for _, c := range cases {
		if got, err := debianName(c.lang, c.in); err != nil || got != c.want {
			t.Errorf("debianName(%s, %s) = %q, %v; want %q", c.lang, c.in, got, err, c.want)
		}
	}
	for in, want := range map[string]string{"": "", "==2.5.1-1": "2.5.1-1", "1:1.2.13.dfsg-1": "1:1.2.13.dfsg-1"} {
		if got, err := debianVersion("p", in); err != nil || got != want {
			t.Errorf("debianVersion(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{">=1", "==1,<2", "~=1.0"} {
		if _, err := debianVersion("p", bad); err == nil {
			t.Errorf("debianVersion(%q) accepted", bad)
		}
	}
	if got := debFile(inst{Name: "zlib1g-dev", Version: "1:1.2.13.dfsg-1", Arch: "amd64"}); got != "zlib1g-dev_1%3a1.2.13.dfsg-1_amd64.deb" {
		t.Errorf("debFile: %s", got)
	}
}

// End to end: the status comes from a real container of the base image
// through the core's host services, and the layer, copied onto / of a
// throw-away container of that image, makes the package load.
func TestE2ELayerLoads(t *testing.T) {
	testenv.Require(t)
	core := testenv.NewCore(t, nil)
	h, _, _ := core.PluginHost(t, "debian")
	b := newTestBuilder(t, h, Config{})
	cases := []struct {
		spec  builder.PlanRequest
		check string
		want  string
	}{
		{rSpec, `Rscript -e 'library(R6); cat(as.character(packageVersion("R6")))'`, "2.5.1"},
		{pySpec, `python3 -c 'import tabulate; print(tabulate.tabulate([[1, 2]]))'`, "-  -\n1  2\n-  -"},
	}
	for _, c := range cases {
		t.Run(c.spec.Language, func(t *testing.T) {
			id, err := exec.Command("podman", "image", "inspect", "--format", "{{.Id}}", c.spec.BaseImage).Output()
			if err != nil {
				t.Fatal(err)
			}
			spec := c.spec
			spec.BaseImageID = strings.TrimSpace(string(id))
			work := t.TempDir()
			res, err := build(t, b, spec, work, nil)
			if err != nil {
				t.Fatal(err)
			}
			rnd := make([]byte, 4)
			rand.Read(rnd)
			name := "forge-envplug-test-" + hex.EncodeToString(rnd)
			out, err := exec.Command("podman", "run", "--rm", "--name", name, "--network", "none", "--user", "0",
				"-v", filepath.Join(work, res.Dir)+":/l:ro", spec.BaseImage,
				"sh", "-c", "cp -a /l/. / && "+c.check).CombinedOutput()
			if err != nil || !strings.Contains(string(out), c.want) {
				t.Fatalf("the package does not load from the layer: %v\n%s", err, out)
			}
			// Without the layer it does not: the test can fail.
			out, err = exec.Command("podman", "run", "--rm", "--name", name+"-base", "--network", "none", spec.BaseImage, "sh", "-c", c.check).CombinedOutput()
			if err == nil {
				t.Fatalf("the base image already loads it: %s", out)
			}
		})
	}
}
