package forge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/runtimetest"
)

// slowRuntime answers `podman info` (Info, Guarantees) as a busy host
// does when slow is set: not before the round's deadline.
type slowRuntime struct {
	fakeRuntime
	slow atomic.Bool
}

func (r *slowRuntime) wait(ctx context.Context) error {
	if !r.slow.Load() {
		return nil
	}
	<-ctx.Done()
	return fmt.Errorf("podman info: %w", ctx.Err())
}

func (r *slowRuntime) Info(ctx context.Context) (runtime.Info, error) {
	if err := r.wait(ctx); err != nil {
		return runtime.Info{}, err
	}
	return r.fakeRuntime.Info(ctx)
}

func (r *slowRuntime) Guarantees(ctx context.Context) (runtime.Report, error) {
	if err := r.wait(ctx); err != nil {
		return runtime.Report{}, err
	}
	return r.fakeRuntime.Guarantees(ctx)
}

// A slow runtime does not flap /readyz: the guarantees are measured at the
// first round and when they can have changed, not every round; one slow
// answer keeps the server ready (the last good answer, saying the last
// one failed); slow answers that persist (failRounds in a row over
// failPeriod) make it not ready with the reason; a refused connection does
// at once; and it is ready again as soon as the runtime answers.
func TestReadinessToleratesASlowRuntime(t *testing.T) {
	t.Parallel()
	fake := runtimetest.New(runtime.ImageInfo{Names: []string{image}})
	rt := &slowRuntime{fakeRuntime: fakeRuntime{fake}}
	pol := policy.New(policy.Settings{}, nil)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock time.Duration
	p := &readyProbe{now: func() time.Time { return start.Add(clock) }}
	round := func() (bool, map[string]httpserver.Check) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		all, byName := true, map[string]httpserver.Check{}
		for _, c := range p.readiness(ctx, "podman", rt, pol, statuses()[:1]) {
			all = all && c.OK
			byName[c.Name] = c
		}
		return all, byName
	}
	steps := []struct {
		name     string
		at       time.Duration
		slow     bool
		ready    bool
		measured int    // Guarantees calls so far
		detail   string // in the runtime's line
		age      string // of the guarantees' line
	}{
		{"first round measures", 0, false, true, 1, "Podman 5.0.0", "0s"},
		{"a later round does not", 5 * time.Second, false, true, 1, "Podman 5.0.0", "5s"},
		{"one slow answer keeps ready", 6 * time.Second, true, true, 1, "its last answer failed (1 in a row", "6s"},
		{"answers again: measured again (it may have restarted)", 7 * time.Second, false, true, 2, "Podman 5.0.0", "0s"},
		{"three slow answers within seconds keep ready", 8 * time.Second, true, true, 2, "(1 in a row", "1s"},
		{"", 9 * time.Second, true, true, 2, "(2 in a row", "2s"},
		{"", 10 * time.Second, true, true, 2, "(3 in a row, for 2s", "3s"},
		{"persistent over the period: not ready, with the reason", 38 * time.Second, true, false, 2, "podman info: context deadline exceeded (failing for 30s, 4 rounds in a row)", ""},
		{"recovers at once", 39 * time.Second, false, true, 3, "Podman 5.0.0", "0s"},
		{"a refused connection is down at once", 40 * time.Second, false, false, 3, "connection refused", ""},
		{"", 41 * time.Second, false, true, 4, "Podman 5.0.0", "0s"},
		{"an old measurement is taken again", 41*time.Second + remeasureAfter, false, true, 5, "Podman 5.0.0", "0s"},
	}
	for _, s := range steps {
		clock = s.at
		rt.slow.Store(s.slow)
		if strings.Contains(s.detail, "refused") {
			fake.FailNext("Info", fmt.Errorf("podman info: cannot connect to Podman: %w", syscall.ECONNREFUSED))
		}
		ready, lines := round()
		name := s.name + " @" + s.at.String()
		if ready != s.ready {
			t.Fatalf("%s: ready %v, want %v: %+v", name, ready, s.ready, lines)
		}
		if n := fake.Count("Guarantees"); n != s.measured {
			t.Errorf("%s: guarantees measured %d times, want %d", name, n, s.measured)
		}
		if d := lines["podman"].Detail; !strings.Contains(d, s.detail) {
			t.Errorf("%s: the runtime's line %q, want it to say %q", name, d, s.detail)
		}
		if g, ok := lines["guarantees"]; ok != (s.age != "") || g.Age != s.age {
			t.Errorf("%s: guarantees line %+v (shown %v), want age %q", name, g, ok, s.age)
		}
	}
	// The age is in /readyz's body.
	clock += 3 * time.Second
	_, lines := round()
	if b, _ := json.Marshal(lines["guarantees"]); !strings.Contains(string(b), `"age":"3s"`) {
		t.Errorf("the guarantees' line in /readyz: %s", b)
	}
}
