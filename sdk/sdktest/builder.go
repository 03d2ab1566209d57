package sdktest

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/builder"
)

// BuilderCases are the specs the builder conformance suite uses.
type BuilderCases struct {
	// Spec is a valid spec with at least one package that the builder can
	// build in the host it was configured with.
	Spec builder.PlanRequest
	// Other differs from Spec in its packages only; nil Packages: Spec with
	// an extra package "forge-conformance-extra" (Plan only, never built).
	Other *builder.PlanRequest
	// Invalid are specs a core would never send; nil: InvalidSpecs(Spec).
	Invalid []builder.PlanRequest
	// Timeout bounds one build (0: 5 minutes).
	Timeout time.Duration
}

// InvalidSpecs are variations of a valid spec that a builder must refuse
// even though the core validates first: each would put an option, a path,
// a URL or a second command on an installer's command line.
func InvalidSpecs(valid builder.PlanRequest) []builder.PlanRequest {
	with := func(f func(*builder.PlanRequest)) builder.PlanRequest {
		r := valid
		r.Packages = slices.Clone(valid.Packages)
		r.Index.ExtraURLs = slices.Clone(valid.Index.ExtraURLs)
		f(&r)
		return r
	}
	pkg := func(name, version string) builder.PlanRequest {
		return with(func(r *builder.PlanRequest) {
			r.Packages = append(r.Packages, builder.Package{Name: name, Version: version})
		})
	}
	return []builder.PlanRequest{
		pkg("numpy; rm -rf /", ""),
		pkg("--index-url=https://evil.example/simple", ""),
		pkg("-e", ""),
		pkg("../../etc/passwd", ""),
		pkg("https://evil.example/x.whl", ""),
		pkg("git+https://evil.example/x", ""),
		pkg("ok\nevil", ""),
		pkg("ok", "1.0; echo pwned"),
		pkg("ok", "$(id)"),
		pkg("", ""),
		with(func(r *builder.PlanRequest) { r.Language = "" }),
		with(func(r *builder.PlanRequest) { r.Language = "python; id" }),
		with(func(r *builder.PlanRequest) { r.BaseImage = "" }),
		with(func(r *builder.PlanRequest) { r.BaseImage = "img --privileged" }),
		with(func(r *builder.PlanRequest) { r.Index.URL = "http://plain.example/simple" }),
		with(func(r *builder.PlanRequest) { r.Index.URL = "file:///etc" }),
	}
}

// RunBuilder is the conformance suite of a builder: Plan is deterministic
// and keyed on what determines the result, refuses specs no core sends,
// and Build streams ordered progress, ends with a result consistent with
// its plan, and stops when cancelled. Run it against the builder itself
// and against the client sdktest.ServeBuilder or LaunchBuilder returns.
// The builder works in its own work directory (builder.WorkDir:
// LaunchBuilder starts the plugin in a fresh one; a builder run in-process
// needs one of its own, not the test's directory).
func RunBuilder(t *testing.T, b builder.Builder, c BuilderCases) {
	ctx := context.Background()
	if len(c.Spec.Packages) == 0 {
		t.Fatal("BuilderCases.Spec needs at least one package")
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	other := c.Spec
	if c.Other != nil {
		other = *c.Other
	} else {
		other.Packages = append(slices.Clone(c.Spec.Packages), builder.Package{Name: "forge-conformance-extra"})
	}
	invalid := c.Invalid
	if invalid == nil {
		invalid = InvalidSpecs(c.Spec)
	}

	var plan builder.Plan
	t.Run("plan-deterministic", func(t *testing.T) {
		p1, err := b.Plan(ctx, c.Spec)
		if err != nil {
			t.Fatalf("plan of a valid spec: %v", err)
		}
		// A copy, so that a key taken from the slices' identity differs.
		again := c.Spec
		again.Packages = slices.Clone(c.Spec.Packages)
		p2, err := b.Plan(ctx, again)
		if err != nil {
			t.Fatalf("second plan: %v", err)
		}
		if p1.CacheKey == "" {
			t.Fatal("the plan has no cache key")
		}
		if p1.CacheKey != p2.CacheKey {
			t.Fatalf("the same spec gave two cache keys: %q and %q", p1.CacheKey, p2.CacheKey)
		}
		po, err := b.Plan(ctx, other)
		if err != nil {
			t.Fatalf("plan of the other spec: %v", err)
		}
		if po.CacheKey == p1.CacheKey {
			t.Fatalf("specs with different packages share the cache key %q", p1.CacheKey)
		}
		plan = p1
	})

	t.Run("plan-refuses-invalid", func(t *testing.T) {
		for _, r := range invalid {
			if p, err := b.Plan(ctx, r); err == nil {
				t.Errorf("plan accepted an invalid spec (language %q, image %q, packages %+v, index %+v): key %q", r.Language, r.BaseImage, r.Packages, r.Index, p.CacheKey)
			}
		}
	})

	t.Run("build", func(t *testing.T) {
		if plan.CacheKey == "" {
			t.Skip("no plan (see plan-deterministic)")
		}
		bctx, cancel := context.WithTimeout(ctx, c.Timeout)
		defer cancel()
		rec := &progressLog{}
		res, err := b.Build(bctx, builder.BuildRequest{Spec: c.Spec, CacheKey: plan.CacheKey, BuildID: "conformance-build"}, rec.add)
		rec.close()
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		rec.check(t)
		if len(rec.events) == 0 {
			t.Error("the build reported no progress")
		}
		if res.CacheKey != plan.CacheKey {
			t.Errorf("the result's cache key %q is not the plan's %q", res.CacheKey, plan.CacheKey)
		}
		planned := plan.Packages
		if len(planned) == 0 {
			planned = c.Spec.Packages
		}
		for _, p := range planned {
			i := slices.IndexFunc(res.Lock, func(l builder.Locked) bool { return strings.EqualFold(l.Name, p.Name) })
			if i < 0 {
				t.Errorf("planned package %s is not in the lock %+v", p.Name, res.Lock)
				continue
			}
			l := res.Lock[i]
			if l.Version == "" {
				t.Errorf("locked package %s has no version", l.Name)
			}
			if len(l.Hashes) == 0 || slices.ContainsFunc(l.Hashes, func(h string) bool { return !strings.HasPrefix(h, "sha256:") || len(h) != len("sha256:")+64 }) {
				t.Errorf("locked package %s: hashes %q, want sha256:<64 hex> each", l.Name, l.Hashes)
			}
		}
		if d := filepath.Clean(res.Dir); res.Dir == "" || filepath.IsAbs(res.Dir) || d == ".." || strings.HasPrefix(d, "../") {
			t.Errorf("the result's directory %q is not a path inside the builder's work directory", res.Dir)
		}
		if res.SizeBytes < 0 {
			t.Errorf("negative size %d", res.SizeBytes)
		}
	})

	t.Run("build-refuses-foreign-key", func(t *testing.T) {
		po, err := b.Plan(ctx, other)
		if err != nil {
			t.Skipf("no plan of the other spec: %v", err)
		}
		bctx, cancel := context.WithTimeout(ctx, c.Timeout)
		defer cancel()
		res, err := b.Build(bctx, builder.BuildRequest{Spec: c.Spec, CacheKey: po.CacheKey, BuildID: "conformance-foreign"}, nil)
		if err == nil {
			t.Fatalf("a build under another spec's cache key %q succeeded (result key %q): the cache would hold the wrong environment", po.CacheKey, res.CacheKey)
		}
	})

	t.Run("build-cancel", func(t *testing.T) {
		if plan.CacheKey == "" {
			t.Skip("no plan (see plan-deterministic)")
		}
		bctx, cancel := context.WithCancel(ctx)
		defer cancel()
		rec := &progressLog{}
		start := time.Now()
		type out struct {
			res builder.BuildResult
			err error
		}
		done := make(chan out, 1)
		go func() {
			res, err := b.Build(bctx, builder.BuildRequest{Spec: c.Spec, CacheKey: plan.CacheKey, BuildID: "conformance-cancel"},
				func(p builder.Progress) { rec.add(p); cancel() })
			rec.close()
			done <- out{res, err}
		}()
		select {
		case o := <-done:
			if o.err == nil {
				t.Fatalf("a build cancelled at its first progress report completed: %+v", o.res)
			}
			if !errors.Is(o.err, context.Canceled) {
				t.Logf("cancelled build ended with %v (not context.Canceled)", o.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("a cancelled build still runs %s after it was cancelled", time.Since(start).Round(time.Second))
		}
		rec.check(t)
	})
}

// progressLog records progress and what arrives after Build returned.
type progressLog struct {
	mu     sync.Mutex
	events []builder.Progress
	late   int
	closed bool
}

func (l *progressLog) add(p builder.Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.late++
		return
	}
	l.events = append(l.events, p)
}

func (l *progressLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// check: steps in order within their count, a phase named, nothing late.
func (l *progressLog) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.late > 0 {
		t.Errorf("%d progress reports arrived after Build returned", l.late)
	}
	prev := 0
	for i, p := range l.events {
		if p.Phase == "" {
			t.Errorf("progress %d has no phase: %+v", i+1, p)
		}
		if p.Steps <= 0 || p.Step < 1 || p.Step > p.Steps {
			t.Errorf("progress %d: step %d of %d is out of range", i+1, p.Step, p.Steps)
		}
		if p.Step < prev {
			t.Errorf("progress %d goes back from step %d to %d", i+1, prev, p.Step)
		}
		prev = p.Step
	}
}
