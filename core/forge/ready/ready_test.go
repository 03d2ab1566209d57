package ready

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/runtimetest"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

const image = "mcp-forge/python:3.11"

// statuses are plugins as an inspection reports them: a Python backend
// with sessions, an R backend whose image is not built, a builder, and a
// plugin that did not load.
func statuses() []plugins.Status {
	return []plugins.Status{
		{Identity: plugins.Identity{Name: "python", Type: plugin.TypeBackend, Version: "1.0", APIVersion: 1, Checksum: "verified"},
			Capabilities: backend.Capabilities{Languages: []string{"python"}, Stateful: true, Image: image}},
		{Identity: plugins.Identity{Name: "r", Type: plugin.TypeBackend, Version: "1.0", APIVersion: 1, Checksum: "verified"},
			Capabilities: backend.Capabilities{Languages: []string{"r"}, Image: "mcp-forge/r:4.2"}, Restarts: 2},
		{Identity: plugins.Identity{Name: "podman-builder", Type: plugin.TypeBuilder, Version: "0.1", APIVersion: 1}},
		{Identity: plugins.Identity{Name: "broken"}, Error: "checksum MISMATCH"},
	}
}

// slowRuntime answers as a busy host does when slow is set: not before
// the round's deadline.
type slowRuntime struct {
	*runtimetest.Runtime
	slow              atomic.Bool
	infos, guarantees atomic.Int32 // calls, slow ones too
	caps              runtime.Capabilities
}

func (r *slowRuntime) Capabilities() runtime.Capabilities { return r.caps }

func (r *slowRuntime) wait(ctx context.Context, call string) error {
	if !r.slow.Load() {
		return nil
	}
	<-ctx.Done()
	return fmt.Errorf("%s: %w", call, ctx.Err())
}

func (r *slowRuntime) Info(ctx context.Context) (runtime.Info, error) {
	r.infos.Add(1)
	if err := r.wait(ctx, "podman info"); err != nil {
		return runtime.Info{}, err
	}
	return r.Runtime.Info(ctx)
}

func (r *slowRuntime) Guarantees(ctx context.Context) (runtime.Report, error) {
	r.guarantees.Add(1)
	if err := r.wait(ctx, "podman info"); err != nil {
		return runtime.Report{}, err
	}
	return r.Runtime.Guarantees(ctx)
}

func (r *slowRuntime) Image(ctx context.Context, name string) (runtime.ImageInfo, bool, error) {
	if err := r.wait(ctx, "podman image inspect"); err != nil {
		return runtime.ImageInfo{}, false, err
	}
	return r.Runtime.Image(ctx, name)
}

// A slow runtime does not flap /readyz. `podman info` (Info, Guarantees)
// is not asked every round: Info at the first round, after a lookup that
// did not answer, and when old; the guarantees at the first round and when
// they can have changed. One slow answer keeps the server ready (the last
// good answer, saying the last one failed); slow answers that persist
// (failRounds in a row over failPeriod) make it not ready with the reason;
// a refused connection does at once; and it is ready again as soon as the
// runtime answers.
func TestReadinessToleratesASlowRuntime(t *testing.T) {
	t.Parallel()
	fake := runtimetest.New(runtime.ImageInfo{Names: []string{image}})
	rt := &slowRuntime{Runtime: fake}
	pol := policy.New(policy.Settings{}, nil)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock time.Duration
	p := &Probe{now: func() time.Time { return start.Add(clock) }}
	round := func() (bool, []httpserver.Check) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		checks := p.Checks(ctx, "podman", rt, pol, statuses()[:1])
		all := true
		for _, c := range checks {
			all = all && c.OK
		}
		return all, checks
	}
	const refused = "refused"
	steps := []struct {
		name     string
		at       time.Duration
		slow     string // "slow", refused or ""
		ready    bool
		infos    int    // Info calls so far
		measured int    // Guarantees calls so far
		detail   string // in a line's detail
		age      string // of the guarantees' line
	}{
		{"first round asks both", 0, "", true, 1, 1, "Podman 5.0.0", "0s"},
		{"a quiet round asks neither", 5 * time.Second, "", true, 1, 1, "present", "5s"},
		{"one slow answer keeps ready", 6 * time.Second, "slow", true, 1, 1, "its last answer failed (1 in a row", "6s"},
		{"answers again: Info and the guarantees asked again", 7 * time.Second, "", true, 2, 2, "present", "0s"},
		{"slow answers within seconds keep ready", 8 * time.Second, "slow", true, 2, 2, "(1 in a row", "1s"},
		{"", 9 * time.Second, "slow", true, 3, 2, "(2 in a row", "2s"},
		{"", 10 * time.Second, "slow", true, 4, 2, "(3 in a row, for 2s", "3s"},
		{"persistent over the period: not ready, with the reason", 38 * time.Second, "slow", false, 5, 2, "podman image inspect: context deadline exceeded (failing for 30s, 4 rounds in a row)", "31s"},
		{"recovers at once", 39 * time.Second, "", true, 6, 3, "present", "0s"},
		{"a refused connection is not ready at once", 40 * time.Second, refused, false, 6, 3, "connection refused", "1s"},
		{"", 41 * time.Second, "", true, 7, 4, "present", "0s"},
		{"old answers are asked again", 41*time.Second + remeasureAfter, "", true, 8, 5, "Podman 5.0.0", "0s"},
	}
	for _, s := range steps {
		clock = s.at
		rt.slow.Store(s.slow == "slow")
		if s.slow == refused {
			fake.FailNext("Image", fmt.Errorf("podman image inspect: cannot connect to Podman: %w", syscall.ECONNREFUSED))
		}
		ready, checks := round()
		name := s.name + " @" + s.at.String()
		if ready != s.ready {
			t.Fatalf("%s: ready %v, want %v: %+v", name, ready, s.ready, checks)
		}
		if n, m := int(rt.infos.Load()), int(rt.guarantees.Load()); n != s.infos || m != s.measured {
			t.Errorf("%s: Info asked %d times, guarantees %d, want %d and %d", name, n, m, s.infos, s.measured)
		}
		var said bool
		var g httpserver.Check
		for _, c := range checks {
			said = said || strings.Contains(c.Detail, s.detail)
			if c.Name == "guarantees" {
				g = c
			}
		}
		if !said {
			t.Errorf("%s: no line says %q: %+v", name, s.detail, checks)
		}
		if g.Age != s.age {
			t.Errorf("%s: guarantees line %+v, want age %q", name, g, s.age)
		}
	}
	// The age is in /readyz's body.
	clock += 3 * time.Second
	_, checks := round()
	if b, _ := json.Marshal(checks); !strings.Contains(string(b), `"name":"guarantees","ok":true,"detail":"every guarantee enforced","age":"3s"`) {
		t.Errorf("/readyz's checks: %s", b)
	}
}

// Which calls a quiet round makes: Podman's image lookups tell that it
// answers, so its info is not asked again; a Kubernetes image lookup may
// ask nothing, so the API server's version (cheap) is asked every round.
func TestReadinessAsksInfoWhenNothingElseAnswers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind  string
		infos int32
	}{{"podman", 1}, {"", 1}, {"kubernetes", 3}} {
		t.Run(c.kind, func(t *testing.T) {
			rt := &slowRuntime{Runtime: runtimetest.New(runtime.ImageInfo{Names: []string{image}})}
			rt.caps.ImagesElsewhere = c.kind == "kubernetes" // as the Kubernetes runtime declares
			p := &Probe{}
			for range 3 {
				p.Checks(context.Background(), c.kind, rt, policy.New(policy.Settings{}, nil), statuses()[:1])
			}
			if n := rt.infos.Load(); n != c.infos {
				t.Errorf("Info asked %d times in 3 rounds, want %d", n, c.infos)
			}
			if n := rt.guarantees.Load(); n != 1 {
				t.Errorf("guarantees measured %d times in 3 rounds, want 1", n)
			}
		})
	}
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	down := runtimetest.New()
	down.FailAlways("Info", errors.New("connection refused"))
	imageDown := runtimetest.New()
	imageDown.FailAlways("Image", errors.New("timeout"))
	up := runtimetest.New(runtime.ImageInfo{Names: []string{image}}, runtime.ImageInfo{Names: []string{"mcp-forge/r:4.2"}})
	loaded := statuses()[:2]
	lacking := runtimetest.New(runtime.ImageInfo{Names: []string{image}})
	lacking.Lack(runtime.Pids, "cgroups v1")
	lacking.Lack(runtime.Memory, "cgroups v1")
	cases := []struct {
		name string
		rt   *runtimetest.Runtime
		sts  []plugins.Status
		want []httpserver.Check
	}{
		{"ready", up, loaded, []httpserver.Check{
			{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
			{Name: "guarantees", OK: true, Detail: "every guarantee enforced", Age: "0s"},
			{Name: "plugins", OK: true, Detail: "loaded: python, r"},
			{Name: "image " + image, OK: true, Detail: "present"},
			{Name: "image mcp-forge/r:4.2", OK: true, Detail: "present"},
		}},
		{"podman down", down, statuses(), []httpserver.Check{
			{Name: "podman", Detail: "connection refused"},
			{Name: "plugins", OK: true, Detail: "loaded: podman-builder, python, r; failed: broken: checksum MISMATCH"},
			{Name: "image " + image, Detail: "not checked: Podman unreachable"},
			{Name: "image mcp-forge/r:4.2", Detail: "not checked: Podman unreachable"},
		}},
		{"image missing", runtimetest.New(runtime.ImageInfo{Names: []string{image}}), loaded[1:], []httpserver.Check{
			{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
			{Name: "guarantees", OK: true, Detail: "every guarantee enforced", Age: "0s"},
			{Name: "plugins", OK: true, Detail: "loaded: r"},
			{Name: "image mcp-forge/r:4.2", Detail: "missing: run `make images`"},
		}},
		{"image lookup fails", imageDown, loaded[:1], []httpserver.Check{
			{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
			{Name: "guarantees", OK: true, Detail: "every guarantee enforced", Age: "0s"},
			{Name: "plugins", OK: true, Detail: "loaded: python"},
			{Name: "image " + image, Detail: "timeout"},
		}},
		{"a guarantee missing, another waived", lacking, loaded[:1], []httpserver.Check{
			{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
			{Name: "guarantees", Detail: (&policy.GuaranteeError{Missing: []runtime.Gap{{Guarantee: runtime.Pids, Why: "cgroups v1", Fix: "(fake runtime: scripted by Lack)"}}}).Error(), Age: "0s"},
			{Name: "plugins", OK: true, Detail: "loaded: python"},
			{Name: "image " + image, OK: true, Detail: "present"},
		}},
		{"waived", lacking, nil, []httpserver.Check{
			{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
			{Name: "guarantees", OK: true, Detail: "waived, not enforced: memory, pids", Age: "0s"},
			{Name: "plugins", Detail: "loaded: "},
		}},
		{"no plugin", up, nil, []httpserver.Check{
			{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
			{Name: "guarantees", OK: true, Detail: "every guarantee enforced", Age: "0s"},
			{Name: "plugins", Detail: "loaded: "},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			waive := map[runtime.Guarantee]string{runtime.Memory: "security.waive[0]"}
			if c.name == "waived" {
				waive[runtime.Pids] = "security.waive[1]"
			}
			pol := policy.New(policy.Settings{Waived: waive}, nil)
			if d := cmp.Diff(c.want, (&Probe{}).Checks(context.Background(), "podman", c.rt, pol, c.sts)); d != "" {
				t.Errorf("checks (-want +got):\n%s", d)
			}
		})
	}
}
