package environments

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/packages"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// fakeImages is an in-memory image store: unit tests of the policy only;
// the layering itself is tested against real Podman (test/environments).
type fakeImages struct {
	mu      sync.Mutex
	images  map[string]*runtime.ImageInfo // by id
	tags    map[string]string             // ref → id
	next    int
	size    int64 // size of every built image
	removed []string
	// removeErr, when set, is asked before an image is removed (a container
	// that still uses it).
	removeErr func(id string) error
}

func newFakeImages() *fakeImages {
	f := &fakeImages{images: map[string]*runtime.ImageInfo{}, tags: map[string]string{}, size: 1000}
	f.images["base-id"] = &runtime.ImageInfo{ID: "base-id", Size: 500, Labels: map[string]string{"io.mcp-forge.image": "python"}, Names: []string{"localhost/mcp-forge/python:3.11"}}
	f.tags["mcp-forge/python:3.11"] = "base-id"
	return f
}

func (f *fakeImages) BuildLayer(ctx context.Context, b runtime.LayerBuild) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	id := fmt.Sprintf("img%d", f.next)
	l := map[string]string{}
	for k, v := range b.Labels {
		l[k] = v
	}
	f.images[id] = &runtime.ImageInfo{ID: id, Size: f.size, Labels: l, Created: time.Now()}
	return id, nil
}

func (f *fakeImages) Tag(_ context.Context, id, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.tags[ref]; ok {
		im := f.images[old]
		im.Names = nil
	}
	f.tags[ref] = id
	f.images[id].Names = append(f.images[id].Names, "localhost/"+ref)
	return nil
}

func (f *fakeImages) Images(_ context.Context, labels map[string]string) ([]runtime.ImageInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []runtime.ImageInfo
	for _, im := range f.images {
		if hasAll(im.Labels, labels) {
			out = append(out, *im)
		}
	}
	return out, nil
}

func hasAll(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func (f *fakeImages) RemoveImage(_ context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := ref
	if t, ok := f.tags[ref]; ok {
		id = t
	}
	if f.removeErr != nil {
		if err := f.removeErr(id); err != nil {
			return err
		}
	}
	for r, t := range f.tags {
		if t == id {
			delete(f.tags, r)
		}
	}
	delete(f.images, id)
	f.removed = append(f.removed, id)
	return nil
}

func (f *fakeImages) Image(_ context.Context, name string) (runtime.ImageInfo, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := name
	if t, ok := f.tags[strings.TrimPrefix(name, "localhost/")]; ok {
		id = t
	}
	im, ok := f.images[id]
	if !ok {
		return runtime.ImageInfo{}, false, nil
	}
	return *im, true, nil
}

func (f *fakeImages) tagged() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for r := range f.tags {
		if strings.HasPrefix(r, Repository) {
			out = append(out, r)
		}
	}
	return out
}

// fakeBuilder writes a one-file layer; block, when set, holds Build until
// it is closed or the context ends.
type fakeBuilder struct {
	mu      sync.Mutex
	plans   int
	builds  int
	block   chan struct{}
	entered chan struct{}
	dir     func(work string) string // the result Dir; default writes layer-<key>
	work    string                   // where it works: the directory the core would start it in
	fail    error
	// dropExtras plans like a builder of an older SDK: without extras.
	dropExtras bool
	last       builder.BuildRequest
}

func (b *fakeBuilder) Plan(_ context.Context, r builder.PlanRequest) (builder.Plan, error) {
	b.mu.Lock()
	b.plans++
	b.mu.Unlock()
	if err := r.Validate(); err != nil {
		return builder.Plan{}, err
	}
	key := r.BaseImageID
	for _, p := range r.Packages {
		key += "|" + p.Name + p.Version
	}
	pkgs := r.Packages
	if b.dropExtras {
		pkgs = nil
		for _, p := range r.Packages {
			pkgs = append(pkgs, builder.Package{Name: p.Name, Version: p.Version})
		}
	}
	return builder.Plan{CacheKey: fmt.Sprintf("%x", key), Packages: pkgs, Steps: []string{"fetch"}}, nil
}

func (b *fakeBuilder) Build(ctx context.Context, r builder.BuildRequest, progress func(builder.Progress)) (builder.BuildResult, error) {
	b.mu.Lock()
	b.builds++
	b.last = r
	b.mu.Unlock()
	if b.entered != nil {
		b.entered <- struct{}{}
	}
	if b.block != nil {
		select {
		case <-b.block:
		case <-ctx.Done():
			return builder.BuildResult{}, ctx.Err()
		}
	}
	if b.fail != nil {
		return builder.BuildResult{}, b.fail
	}
	progress(builder.Progress{Phase: "fetch", Step: 1, Message: "1 of 1"})
	rel := "layer-" + r.CacheKey[:8]
	if b.dir != nil {
		rel = b.dir(b.work)
	} else {
		p := filepath.Join(b.work, rel, "usr/local/lib/python3.11/dist-packages/forgedemo")
		if err := os.MkdirAll(p, 0o755); err != nil {
			return builder.BuildResult{}, err
		}
		if err := os.WriteFile(filepath.Join(p, "__init__.py"), []byte("X = 1\n"), 0o644); err != nil {
			return builder.BuildResult{}, err
		}
	}
	var lock []builder.Locked
	for _, p := range r.Spec.Packages {
		lock = append(lock, builder.Locked{Name: p.Name, Version: "1.0", Hashes: []string{"sha256:00"}})
	}
	return builder.BuildResult{CacheKey: r.CacheKey, Lock: lock, Dir: rel}, nil
}

type builders map[string]builder.Builder

func (b builders) Builder(_ context.Context, name string) (builder.Builder, error) {
	if x, ok := b[name]; ok {
		return x, nil
	}
	return nil, fmt.Errorf("no plugin named %q is loaded", name)
}

type rec struct {
	mu sync.Mutex
	e  []audit.Entry
}

func (r *rec) Record(e audit.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.e = append(r.e, e)
}

// rules are the rule names of the audited refusals.
func (r *rec) rules() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.e {
		if e.Event == EventRefused || e.Event == EventViolation {
			out = append(out, fmt.Sprint(e.Details["rule"]))
		}
	}
	return out
}

func (r *rec) events(name string) []audit.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Entry
	for _, e := range r.e {
		if e.Event == name {
			out = append(out, e)
		}
	}
	return out
}

type rig struct {
	svc *Service
	im  *fakeImages
	b   *fakeBuilder
	rec *rec
}

func newRig(t *testing.T, mod func(*config.EnvironmentBuilder)) *rig {
	t.Helper()
	cfg := config.DefaultFor(0, nil).EnvironmentBuilder
	cfg.Builder = "fake"
	cfg.PackageValidation.UseAllowlist = false
	cfg.SecurityScan = "off"
	if mod != nil {
		mod(&cfg)
	}
	state := t.TempDir()
	r := &rig{im: newFakeImages(), b: &fakeBuilder{work: WorkDir(state, "fake")}, rec: &rec{}}
	svc, err := New(Options{Config: cfg, Instance: "inst1", StateDir: state, Images: r.im, Builders: builders{"fake": r.b},
		DefaultBase: map[string]string{"python": "mcp-forge/python:3.11"}, Audit: r.rec,
		BuilderVersion: func(string) string { return "0.1.0" }})
	if err != nil {
		t.Fatal(err)
	}
	r.svc = svc
	return r
}

func refusedBy(t *testing.T, err error) string {
	t.Helper()
	var r *refusal.Error
	if !errors.As(err, &r) {
		t.Fatalf("want a refusal, got %v", err)
	}
	return r.Rule
}

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"stats", true}, {"Stats-2024", true}, {"a", true}, {strings.Repeat("a", 63), true},
		{"", false}, {"-x", false}, {"a_b", false}, {"a.b", false}, {"a/b", false}, {"a:b", false},
		{"a b", false}, {strings.Repeat("a", 64), false}, {"ü", false}, {"a\n", false},
	} {
		if err := CheckName(tc.name); (err == nil) != tc.ok {
			t.Errorf("CheckName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestBuildLabelsAndCacheHit(t *testing.T) {
	r := newRig(t, nil)
	var steps []builder.Progress
	res, err := r.svc.Build(context.Background(), Request{Name: "demo", Packages: []string{"Forge_Demo>=1.0", "rich"}, Client: "alice",
		Description: "a demo", Progress: func(p builder.Progress) { steps = append(steps, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Image != "mcp-forge/custom:demo" || res.CacheHit || len(res.Packages) != 2 || res.Builder != "fake" || res.BuilderVersion != "0.1.0" {
		t.Fatalf("%+v", res)
	}
	if len(steps) != 3 || steps[0].Phase != "fetch" || steps[2].Phase != "check" || steps[2].Step != steps[2].Steps {
		t.Fatalf("progress %+v", steps)
	}
	im, ok, _ := r.im.Image(context.Background(), "mcp-forge/custom:demo")
	if !ok {
		t.Fatal("not tagged")
	}
	l := im.Labels
	for k, want := range map[string]string{LabelInstance: "inst1", LabelName: "demo", LabelClient: "alice", LabelBuilder: "fake",
		LabelBuilderVersion: "0.1.0", LabelBaseImage: "mcp-forge/python:3.11", LabelBaseID: "base-id", LabelLanguage: "python",
		LabelPackages: `["forge-demo>=1.0","rich"]`, LabelDescription: "a demo"} {
		if l[k] != want {
			t.Errorf("label %s = %q, want %q", k, l[k], want)
		}
	}
	if !strings.Contains(l[LabelLock], `"hashes":["sha256:00"]`) || l[LabelCreated] == "" || l[LabelCacheKey] == "" {
		t.Errorf("lock/created/key labels: %v", l)
	}

	res2, err := r.svc.Build(context.Background(), Request{Name: "demo", Packages: []string{"rich", "forge-demo>=1.0"}[:0], Client: "alice"})
	if err == nil || refusedBy(t, err) != packages.RuleSpec {
		t.Fatalf("no packages: %v %+v", err, res2)
	}
	res2, err = r.svc.Build(context.Background(), Request{Name: "demo", Packages: []string{"forge_demo>=1.0", "Rich"}, Client: "alice"})
	if err != nil || !res2.CacheHit || r.b.builds != 1 || res2.Image != res.Image {
		t.Fatalf("second identical build: %v %+v (builds %d)", err, res2, r.b.builds)
	}
	// Another user cannot take the name.
	if _, err := r.svc.Build(context.Background(), Request{Name: "demo", Packages: []string{"rich"}, Client: "bob"}); refusedBy(t, err) != RuleOwner {
		t.Fatal(err)
	}
	// A different spec under the same name replaces the image.
	res3, err := r.svc.Build(context.Background(), Request{Name: "demo", Packages: []string{"rich"}, Client: "alice"})
	if err != nil || res3.CacheHit {
		t.Fatal(err, res3)
	}
	if _, ok, _ := r.im.Image(context.Background(), im.ID); ok {
		t.Fatal("the replaced image was kept")
	}
	if n := len(r.rec.events(audit.BuildComplete)); n != 3 {
		t.Fatalf("%d build.complete events", n)
	}
}

func TestRefusedBeforeTheBuilder(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*config.EnvironmentBuilder)
		req  Request
		rule string
		want []string
	}{
		{"bad name", nil, Request{Name: "a_b", Packages: []string{"rich"}}, RuleName, []string{"letters, digits and hyphens"}},
		{"blocklisted", nil, Request{Name: "x", Packages: []string{"rich", "Colourama"}}, packages.RuleBlocklist, []string{"colourama", "blocked by the pattern"}},
		{"option", nil, Request{Name: "x", Packages: []string{"--index-url=http://evil"}}, packages.RuleSpec, []string{"--index-url"}},
		{"url", nil, Request{Name: "x", Packages: []string{"pkg @ https://evil/x.whl"}}, packages.RuleSpec, []string{"pkg @"}},
		{"approval without elicitation", nil, Request{Name: "x", Packages: []string{"thing-dev"}}, packages.RuleApproval,
			[]string{"thing-dev", `"*-dev"`, "approved_packages", "does not support MCP elicitation"}},
		{"too many", func(c *config.EnvironmentBuilder) { c.MaxPackagesPerBuild = 1 }, Request{Name: "x", Packages: []string{"a", "b"}}, packages.RuleMaxPackages, []string{"max_packages_per_build"}},
		{"allowlist", func(c *config.EnvironmentBuilder) { c.PackageValidation.UseAllowlist = true }, Request{Name: "x", Packages: []string{"zzz-not-listed"}}, packages.RuleAllowlist, []string{"zzz-not-listed"}},
		{"template", nil, Request{Name: "x", Template: "nope"}, RuleTemplate, []string{"nope"}},
		{"language", nil, Request{Name: "x", Language: "julia", Packages: []string{"a"}}, RuleLanguage, []string{"julia"}},
		{"base image", nil, Request{Name: "x", Language: "r", Packages: []string{"a"}}, RuleBaseImage, []string{"base image"}},
		{"disabled", func(c *config.EnvironmentBuilder) { c.Enabled = false }, Request{Name: "x", Packages: []string{"a"}}, RuleDisabled, []string{"enabled = false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.mod)
			tc.req.Client = "alice"
			_, err := r.svc.Build(context.Background(), tc.req)
			if got := refusedBy(t, err); got != tc.rule {
				t.Fatalf("rule %s, want %s: %v", got, tc.rule, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			// The message says "refused (<rule>): " once.
			if n := strings.Count(err.Error(), "refused ("); n != 1 || !strings.HasPrefix(err.Error(), "refused ("+tc.rule+"): ") {
				t.Errorf("the message names the rule %d times, want once at its start: %v", n, err)
			}
			if r.b.plans+r.b.builds != 0 {
				t.Fatalf("the builder was called (%d plans, %d builds)", r.b.plans, r.b.builds)
			}
			if rules := r.rec.rules(); len(rules) == 0 || rules[0] != tc.rule {
				t.Fatalf("audited rules %v, want %s", rules, tc.rule)
			}
			if len(r.rec.events(audit.BuildRequest)) != 0 {
				t.Fatal("a refused request was audited as a build")
			}
		})
	}
}

func TestApprovalAsksTheUser(t *testing.T) {
	r := newRig(t, nil)
	req := Request{Name: "x", Packages: []string{"thing-dev", "rich"}, Client: "alice", CanAsk: true}
	_, err := r.svc.Build(context.Background(), req)
	var need *ApprovalNeeded
	if !errors.As(err, &need) || len(need.Packages) != 1 || need.Packages[0] != "thing-dev" || !strings.Contains(need.Why[0], `"*-dev"`) {
		t.Fatalf("%v", err)
	}
	if r.b.plans != 0 || len(r.rec.rules()) != 0 {
		t.Fatal("asking is neither a build nor a refusal")
	}
	req.UserDeclined = true
	if _, err := r.svc.Build(context.Background(), req); refusedBy(t, err) != packages.RuleApproval || r.b.builds != 0 {
		t.Fatalf("declined: %v", err)
	}
	req.UserDeclined, req.UserApproved = false, true
	if _, err := r.svc.Build(context.Background(), req); err != nil || r.b.builds != 1 {
		t.Fatalf("approved: %v", err)
	}
	if ev := r.rec.events(EventApproved); len(ev) != 1 || fmt.Sprint(ev[0].Details["approved_by_user"]) != "[thing-dev]" {
		t.Fatalf("%+v", ev)
	}
}

func TestTemplateExpansion(t *testing.T) {
	r := newRig(t, func(c *config.EnvironmentBuilder) {
		c.Templates = map[string]config.Template{"ds": {Description: "data", Packages: []string{"numpy>=1.20", "rich"}}}
	})
	if _, err := r.svc.Build(context.Background(), Request{Name: "x", Template: "ds", Packages: []string{"NumPy==1.24.2", "attrs"}, Client: "a"}); err != nil {
		t.Fatal(err)
	}
	im, _, _ := r.im.Image(context.Background(), Ref("x"))
	if got := im.Labels[LabelPackages]; got != `["rich","numpy==1.24.2","attrs"]` || im.Labels[LabelTemplate] != "ds" {
		t.Fatalf("packages %s template %s", got, im.Labels[LabelTemplate])
	}
}

func TestRateAndConcurrencyLimits(t *testing.T) {
	r := newRig(t, func(c *config.EnvironmentBuilder) {
		c.BuildRateLimit.MaxBuildsPerHour, c.BuildRateLimit.MaxBuildsPerDay, c.MaxConcurrentBuilds = 2, 2, 1
	})
	r.b.block, r.b.entered = make(chan struct{}), make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := r.svc.Build(context.Background(), Request{Name: "one", Packages: []string{"rich"}, Client: "alice"})
		done <- err
	}()
	<-r.b.entered
	_, err := r.svc.Build(context.Background(), Request{Name: "two", Packages: []string{"rich"}, Client: "bob"})
	if refusedBy(t, err) != packages.RuleConcurrent {
		t.Fatal(err)
	}
	close(r.b.block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.b.entered = nil
	if _, err := r.svc.Build(context.Background(), Request{Name: "three", Packages: []string{"rich"}, Client: "alice"}); err != nil {
		t.Fatal(err)
	}
	_, err = r.svc.Build(context.Background(), Request{Name: "four", Packages: []string{"rich"}, Client: "alice"})
	if refusedBy(t, err) != packages.RuleRatePerHour || !strings.Contains(err.Error(), "max_builds_per_hour") {
		t.Fatal(err)
	}
	// Bob's budget is his own.
	if _, err := r.svc.Build(context.Background(), Request{Name: "five", Packages: []string{"rich"}, Client: "bob"}); err != nil {
		t.Fatal(err)
	}
}

func TestOversizeImageRemoved(t *testing.T) {
	r := newRig(t, func(c *config.EnvironmentBuilder) { c.MaxImageSize = 1 << 10 })
	r.im.size = 4096
	_, err := r.svc.Build(context.Background(), Request{Name: "big", Packages: []string{"rich"}, Client: "a"})
	if refusedBy(t, err) != RuleImageSize || !strings.Contains(err.Error(), "removed") {
		t.Fatal(err)
	}
	if len(r.im.tagged()) != 0 || len(r.im.removed) != 1 {
		t.Fatalf("tagged %v removed %v", r.im.tagged(), r.im.removed)
	}
	if ev := r.rec.events(audit.BuildComplete); len(ev) != 1 || ev[0].Success || ev[0].Details["rule"] != RuleImageSize {
		t.Fatalf("%+v", ev)
	}
}

func TestTimeoutAndCancel(t *testing.T) {
	r := newRig(t, func(c *config.EnvironmentBuilder) { c.MaxBuildTime = 1 })
	r.b.block = make(chan struct{})
	start := time.Now()
	_, err := r.svc.Build(context.Background(), Request{Name: "slow", Packages: []string{"rich"}, Client: "a"})
	if refusedBy(t, err) != RuleTimeout || time.Since(start) > 10*time.Second {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.b.entered = make(chan struct{}, 1)
	go func() { <-r.b.entered; cancel() }()
	_, err = r.svc.Build(ctx, Request{Name: "cut", Packages: []string{"rich"}, Client: "a"})
	if refusedBy(t, err) != RuleCancelled {
		t.Fatal(err)
	}
	if len(r.im.tagged()) != 0 {
		t.Fatal(r.im.tagged())
	}
}

func TestBuilderMissing(t *testing.T) {
	r := newRig(t, func(c *config.EnvironmentBuilder) { c.Builder = "uv" })
	_, err := r.svc.Build(context.Background(), Request{Name: "x", Packages: []string{"rich"}, Client: "a"})
	if refusedBy(t, err) != RuleBuilder || !strings.Contains(err.Error(), "mcp-forge-plugin-uv") {
		t.Fatal(err)
	}
}

func TestLayerOutsideWorkDirRefused(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600)
	for _, tc := range []struct {
		name string
		dir  func(work string) string
	}{
		{"absolute", func(string) string { return outside }},
		{"dotdot", func(string) string { return "../../" + filepath.Base(outside) }},
		{"link", func(w string) string { os.Symlink(outside, filepath.Join(w, "ln")); return "ln" }},
		{"link on the way", func(w string) string { os.Symlink(outside, filepath.Join(w, "ln2")); return "ln2/sub" }},
		{"file", func(w string) string { os.WriteFile(filepath.Join(w, "f"), nil, 0o600); return "f" }},
		{"empty", func(string) string { return "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.b.dir = tc.dir
			_, err := r.svc.Build(context.Background(), Request{Name: "x", Packages: []string{"rich"}, Client: "a"})
			if refusedBy(t, err) != RuleLayer {
				t.Fatal(err)
			}
			if r.im.next != 0 {
				t.Fatal("an image was built")
			}
		})
	}
}

func TestCheckLayer(t *testing.T) {
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, "a"), make([]byte, 100), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(d, "ln")) // resolves in the image, fine
	if n, err := checkLayer(d, 1000); err != nil || n != 100 {
		t.Fatal(n, err)
	}
	if _, err := checkLayer(d, 50); err == nil || err.(*refusal.Error).Rule != RuleImageSize {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(d, "suid"), nil, 0o755)
	os.Chmod(filepath.Join(d, "suid"), 0o755|os.ModeSetuid)
	if _, err := checkLayer(d, 1000); err == nil || !strings.Contains(err.Error(), "set-user") {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(d, "suid"))
	if err := syscall.Mkfifo(filepath.Join(d, "fifo"), 0o644); err != nil {
		t.Skip(err)
	}
	if _, err := checkLayer(d, 1000); err == nil || !strings.Contains(err.Error(), "fifo") {
		t.Fatal(err)
	}
}

func TestDeleteOnlyOwn(t *testing.T) {
	r := newRig(t, nil)
	if _, err := r.svc.Build(context.Background(), Request{Name: "mine", Packages: []string{"rich"}, Client: "alice"}); err != nil {
		t.Fatal(err)
	}
	// An image of that name another forge built is no environment of ours.
	r.im.images["foreign"] = &runtime.ImageInfo{ID: "foreign", Labels: map[string]string{LabelInstance: "other", LabelName: "theirs", LabelClient: "alice"}}
	r.im.Tag(context.Background(), "foreign", Ref("theirs"))
	for _, tc := range []struct{ owner, name, rule string }{{"bob", "mine", RuleNotFound}, {"alice", "theirs", RuleNotFound}, {"alice", "a/b", RuleName}} {
		if err := r.svc.Delete(context.Background(), tc.owner, tc.name); refusedBy(t, err) != tc.rule {
			t.Fatalf("%+v: %v", tc, err)
		}
	}
	if l, _ := r.svc.List(context.Background(), "bob"); len(l) != 0 {
		t.Fatal(l)
	}
	if l, _ := r.svc.List(context.Background(), "alice"); len(l) != 1 || l[0].Name != "mine" || len(l[0].Packages) != 1 {
		t.Fatalf("%+v", l)
	}
	if err := r.svc.CheckUse(context.Background(), "bob", "mcp-forge/custom:mine"); refusedBy(t, err) != RuleOwner {
		t.Fatal(err)
	}
	if err := r.svc.CheckUse(context.Background(), "alice", "mcp-forge/custom:mine"); err != nil {
		t.Fatal(err)
	}
	if err := r.svc.Delete(context.Background(), "alice", "mine"); err != nil {
		t.Fatal(err)
	}
	if len(r.im.tagged()) != 1 || len(r.rec.events(EventDelete)) != 1 {
		t.Fatal(r.im.tagged())
	}
}

// Every place a request names an image meets one ownership check, by what
// the reference resolves to: a tag in either spelling or the image ID.
func TestCustomImagesOnlyForTheirOwner(t *testing.T) {
	r := newRig(t, nil)
	if _, err := r.svc.Build(context.Background(), Request{Name: "alices", Packages: []string{"rich"}, Client: "alice"}); err != nil {
		t.Fatal(err)
	}
	im, _, _ := r.im.Image(context.Background(), Ref("alices"))
	for _, ref := range []string{"mcp-forge/custom:alices", "localhost/mcp-forge/custom:alices", im.ID} {
		for _, tc := range []struct {
			owner string
			ok    bool
		}{{"bob", false}, {"alice", true}} {
			t.Run(tc.owner+" "+ref, func(t *testing.T) {
				builds := r.b.builds
				_, err := r.svc.Build(context.Background(), Request{Name: tc.owner + "-on-alices", BaseImage: ref, Packages: []string{"numpy"}, Client: tc.owner})
				if tc.ok != (err == nil) || (!tc.ok && refusedBy(t, err) != RuleOwner) {
					t.Fatalf("build on %s by %s: %v", ref, tc.owner, err)
				}
				if !tc.ok && r.b.builds != builds {
					t.Fatal("the builder heard of a refused build")
				}
				err = r.svc.CheckUse(context.Background(), tc.owner, ref)
				if tc.ok != (err == nil) || (!tc.ok && refusedBy(t, err) != RuleOwner) {
					t.Fatalf("custom_image %s by %s: %v", ref, tc.owner, err)
				}
			})
		}
	}
	n := 0
	for _, e := range r.rec.events(EventViolation) {
		if e.Details["rule"] == RuleOwner && e.UserID == "bob" {
			n++
		}
	}
	if n != 6 {
		t.Fatalf("%d ownership refusals audited, want 6", n)
	}
	// An image that is no environment of this forge is the image policy's.
	if err := r.svc.CheckUse(context.Background(), "bob", "mcp-forge/python:3.11"); err != nil {
		t.Fatal(err)
	}
}

// An environment another MCP-Forge server on this host built (another
// instance label) is nobody's here: not even a tenant of the same name may
// run in it or build on it (it was usable by anyone who knew its name).
func TestOtherInstancesEnvironmentsRefused(t *testing.T) {
	r := newRig(t, nil)
	if _, err := r.svc.Build(context.Background(), Request{Name: "alices", Packages: []string{"rich"}, Client: "alice"}); err != nil {
		t.Fatal(err)
	}
	im, _, _ := r.im.Image(context.Background(), Ref("alices"))
	r.im.mu.Lock()
	r.im.images[im.ID].Labels[LabelInstance] = "another-forge"
	r.im.mu.Unlock()
	for _, owner := range []string{"alice", "mallory"} {
		if err := r.svc.CheckUse(context.Background(), owner, Ref("alices")); err == nil || refusedBy(t, err) != RuleOwner {
			t.Errorf("custom_image of another forge's environment by %s: %v", owner, err)
		}
		_, err := r.svc.Build(context.Background(), Request{Name: owner + "-on-it", BaseImage: Ref("alices"), Packages: []string{"numpy"}, Client: owner})
		if err == nil || refusedBy(t, err) != RuleOwner {
			t.Errorf("base_image of another forge's environment by %s: %v", owner, err)
		}
	}
}

// Extras reach the builder; a builder whose plan drops them is refused
// before it builds (issue 20, item 9: they were dropped with a warning).
func TestBuildExtras(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop bool
		rule string
	}{{"passed", false, ""}, {"dropped by the builder", true, packages.RuleSpec}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.b.dropExtras = tc.drop
			res, err := r.svc.Build(context.Background(), Request{Name: "x", Packages: []string{"Forge_Extras[Fancy,b]>=1"}, Client: "alice"})
			if tc.rule != "" {
				if refusedBy(t, err) != tc.rule || !strings.Contains(err.Error(), "[b]") || r.b.builds != 0 {
					t.Fatalf("%v (builds %d)", err, r.b.builds)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := r.b.last.Spec.Packages; len(got) != 1 || strings.Join(got[0].Extras, ",") != "b,fancy" {
				t.Fatalf("the builder got %+v", got)
			}
			for _, w := range res.Warnings {
				if strings.Contains(w, "extras") {
					t.Fatalf("warning %q", w)
				}
			}
		})
	}
}

// The builder gets the layer's share of max_image_size and the storage
// bounds; its size refusal is max_image_size's.
func TestBuildLimitsReachTheBuilder(t *testing.T) {
	r := newRig(t, func(c *config.EnvironmentBuilder) {
		c.MaxImageSize = 10 << 10
		c.Storage = config.BuildStorage{MaxAgeDays: 2, MaxSize: 1 << 20}
	})
	if _, err := r.svc.Build(context.Background(), Request{Name: "x", Packages: []string{"rich"}, Client: "alice"}); err != nil {
		t.Fatal(err)
	}
	if l := r.b.last; l.MaxBytes != 10*1024-500 || l.Prune != (builder.Prune{MaxAge: 48 * time.Hour, MaxBytes: 1 << 20}) {
		t.Fatalf("%+v", l)
	}
	r.b.fail = host.Errorf(host.KindTooLarge, "uv wrote 20000 bytes")
	_, err := r.svc.Build(context.Background(), Request{Name: "y", Packages: []string{"numpy"}, Client: "alice"})
	if refusedBy(t, err) != RuleImageSize || !strings.Contains(err.Error(), "max_image_size (10k") || !strings.Contains(err.Error(), "uv wrote 20000 bytes") {
		t.Fatal(err)
	}
}

func TestCleanupPlan(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	envs := []Environment{
		{Name: "old", ID: "1", LastUsed: now.Add(-40 * day)},
		{Name: "fresh", ID: "2", LastUsed: now.Add(-1 * day)},
		{Name: "fresher", ID: "3", LastUsed: now.Add(-time.Hour)},
		{Name: "mid", ID: "4", LastUsed: now.Add(-10 * day)},
	}
	got := cleanupPlan(envs, now, 30*day, 2)
	if len(got) != 2 || got[0].Name != "mid" || !strings.Contains(got[0].Reason, "max_images") || got[1].Name != "old" || !strings.Contains(got[1].Reason, "max_age_days") {
		t.Fatalf("%+v", got)
	}
}

func TestCleanupRemovesAndAudits(t *testing.T) {
	r := newRig(t, func(c *config.EnvironmentBuilder) { c.AutoCleanup.MaxImages = 1 })
	for _, n := range []string{"a", "b"} {
		if _, err := r.svc.Build(context.Background(), Request{Name: n, Packages: []string{"rich"}, Client: "o"}); err != nil {
			t.Fatal(err)
		}
	}
	r.svc.usage.last[Ref("b")] = time.Now().Add(time.Hour) // b used last
	done, err := r.svc.Cleanup(context.Background())
	if err != nil || len(done) != 1 || done[0].Name != "a" {
		t.Fatalf("%+v %v", done, err)
	}
	if ev := r.rec.events(EventCleanup); len(ev) != 1 || ev[0].Details["env_name"] != "a" {
		t.Fatalf("%+v", ev)
	}
}

func TestRedactURL(t *testing.T) {
	if got := redactURL("https://user:s3cret@pkgs.example/simple?token=abc"); strings.Contains(got, "s3cret") || strings.Contains(got, "abc") {
		t.Fatal(got)
	}
}

func TestIndexCredentialsNotAudited(t *testing.T) {
	r := newRig(t, func(c *config.EnvironmentBuilder) { c.IndexURL = "https://user:s3cret@pkgs.example/simple" })
	if _, err := r.svc.Build(context.Background(), Request{Name: "x", Packages: []string{"rich"}, Client: "o"}); err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprint(r.rec.e); strings.Contains(s, "s3cret") {
		t.Fatal(s)
	}
}

// A package refusal is a security violation (counted by rule in the
// metrics); a bad name or a limit is an ordinary refused request.
func TestRefusalEvents(t *testing.T) {
	r := newRig(t, nil)
	r.svc.Build(context.Background(), Request{Name: "x", Packages: []string{"colourama"}, Client: "o"})
	r.svc.Build(context.Background(), Request{Name: "x_y", Packages: []string{"rich"}, Client: "o"})
	v, q := r.rec.events(audit.SecurityViolation), r.rec.events("request.refused")
	if len(v) != 1 || v[0].Details["rule"] != packages.RuleBlocklist || v[0].Details["package"] != "colourama" || v[0].UserID != "o" {
		t.Fatalf("violations %+v", v)
	}
	if len(q) != 1 || q[0].Details["rule"] != RuleName {
		t.Fatalf("refused %+v", q)
	}
}

// A build waiting for another build of the same name gives up with its
// context, instead of waiting the other out.
func TestWaitForNameHeedsCancel(t *testing.T) {
	r := newRig(t, func(c *config.EnvironmentBuilder) { c.MaxConcurrentBuilds = 4 })
	r.b.block, r.b.entered = make(chan struct{}), make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := r.svc.Build(context.Background(), Request{Name: "same", Packages: []string{"rich"}, Client: "a"})
		done <- err
	}()
	<-r.b.entered
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := r.svc.Build(ctx, Request{Name: "same", Packages: []string{"rich"}, Client: "a"})
	if refusedBy(t, err) != RuleCancelled || time.Since(start) > 5*time.Second {
		t.Fatalf("%v after %s", err, time.Since(start))
	}
	close(r.b.block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
