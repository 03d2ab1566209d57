package sdktest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// fakeBuilder plans and "builds" without any container; broken names one
// way to get the contract wrong, for tests that the suite notices.
type fakeBuilder struct{ broken string }

var fakeSteps = []string{"resolve", "download", "install"}

func (f fakeBuilder) Plan(_ context.Context, r builder.PlanRequest) (builder.Plan, error) {
	if f.broken != "no-validation" {
		if err := r.Validate(); err != nil {
			return builder.Plan{}, err
		}
	}
	ps := slices.Clone(r.Packages)
	slices.SortFunc(ps, func(a, b builder.Package) int {
		return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q %q %v\n", r.Language, r.BaseImage, r.Index.URL, r.Index.ExtraURLs, r.Index.Offline)
	switch f.broken {
	case "key-ignores-packages":
	case "random-key":
		h.Write([]byte(rand.Text()))
	default:
		for _, p := range ps {
			fmt.Fprintf(h, "%q %q\n", strings.ToLower(p.Name), p.Version)
		}
	}
	return builder.Plan{CacheKey: "sha256:" + hex.EncodeToString(h.Sum(nil)), Packages: ps, Steps: fakeSteps}, nil
}

func (f fakeBuilder) Build(ctx context.Context, r builder.BuildRequest, progress func(builder.Progress)) (builder.BuildResult, error) {
	p, err := f.Plan(ctx, r.Spec)
	if err != nil {
		return builder.BuildResult{}, err
	}
	if p.CacheKey != r.CacheKey && f.broken != "accepts-foreign-key" {
		return builder.BuildResult{}, host.Errorf(host.KindInvalid, "cache key %q is not this spec's (%q): plan again", r.CacheKey, p.CacheKey)
	}
	for i, phase := range fakeSteps {
		if ctx.Err() != nil && f.broken != "ignores-cancel" {
			return builder.BuildResult{}, ctx.Err()
		}
		step := i + 1
		if f.broken == "backwards-progress" {
			step = len(fakeSteps) - i
		}
		if progress != nil {
			progress(builder.Progress{Phase: phase, Step: step, Steps: len(fakeSteps), Message: phase + " " + fmt.Sprint(len(p.Packages)) + " packages"})
		}
	}
	res := builder.BuildResult{CacheKey: p.CacheKey, Dir: "envs/" + strings.TrimPrefix(p.CacheKey, "sha256:")[:12], SizeBytes: 1024}
	if f.broken == "wrong-result-key" {
		res.CacheKey = "sha256:0"
	}
	for _, pk := range p.Packages {
		v := strings.TrimLeft(pk.Version, "=<>!~")
		if v == "" {
			v = "1.0.0"
		}
		sum := sha256.Sum256([]byte(pk.Name + "==" + v))
		l := builder.Locked{Name: pk.Name, Version: v, Hashes: []string{"sha256:" + hex.EncodeToString(sum[:])}}
		if f.broken == "no-hashes" {
			l.Hashes = nil
		}
		res.Lock = append(res.Lock, l)
	}
	return res, nil
}

var fakeSpec = builder.PlanRequest{Language: "python", BaseImage: "mcp-forge/python:3.11",
	Packages: []builder.Package{{Name: "numpy", Version: "==1.24.2"}, {Name: "pandas"}}}

func TestBuilderConformanceFake(t *testing.T) {
	RunBuilder(t, fakeBuilder{}, BuilderCases{Spec: fakeSpec})
}

// The same builder through the real shims: plan, streamed progress, the
// lock and cancellation survive the wire.
func TestBuilderConformanceOverGRPC(t *testing.T) {
	b := ServeBuilder(t, plugin.Info{Name: "fakebuilder", Version: "0.1.0"},
		func(host.Host, backend.Config) (builder.Builder, error) { return fakeBuilder{}, nil }, NewLocalHost(t.TempDir()), nil)
	RunBuilder(t, b, BuilderCases{Spec: fakeSpec})
}

func TestHelperBrokenBuilder(t *testing.T) {
	broken := os.Getenv("SDKTEST_BROKEN_BUILDER")
	if broken == "" {
		t.Skip("run by TestBuilderSuiteFailsBrokenBuilders")
	}
	RunBuilder(t, fakeBuilder{broken: broken}, BuilderCases{Spec: fakeSpec})
}

// Each way of breaking the contract fails the subtest that guards it.
func TestBuilderSuiteFailsBrokenBuilders(t *testing.T) {
	cases := []struct{ broken, subtest, says string }{
		{"random-key", "plan-deterministic", "the same spec gave two cache keys"},
		{"key-ignores-packages", "plan-deterministic", "specs with different packages share the cache key"},
		{"no-validation", "plan-refuses-invalid", "plan accepted an invalid spec"},
		{"backwards-progress", "build", "goes back from step"},
		{"wrong-result-key", "build", "is not the plan's"},
		{"no-hashes", "build", "want sha256:<64 hex> each"},
		{"accepts-foreign-key", "build-refuses-foreign-key", "under another spec's cache key"},
		{"ignores-cancel", "build-cancel", "cancelled at its first progress report completed"},
	}
	for _, c := range cases {
		t.Run(c.broken, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBrokenBuilder$", "-test.v")
			cmd.Env = append(os.Environ(), "SDKTEST_BROKEN_BUILDER="+c.broken)
			out, err := cmd.CombinedOutput()
			s := string(out)
			if err == nil {
				t.Fatalf("the suite passed a builder with %s:\n%s", c.broken, s)
			}
			if !strings.Contains(s, "--- FAIL: TestHelperBrokenBuilder/"+c.subtest) || !strings.Contains(s, c.says) {
				t.Fatalf("want subtest %s to fail saying %q:\n%s", c.subtest, c.says, s)
			}
		})
	}
}
