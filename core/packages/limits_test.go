package packages

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestLimiter(t *testing.T, perHour, perDay, concurrent int) (*Limiter, *fakeClock) {
	t.Helper()
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l, err := NewLimiter(builderConfig(func(c *config.EnvironmentBuilder) {
		c.BuildRateLimit.MaxBuildsPerHour = perHour
		c.BuildRateLimit.MaxBuildsPerDay = perDay
		c.MaxConcurrentBuilds = concurrent
	}), clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

func wantLimit(t *testing.T, err error, rule, field string, retry time.Duration) {
	t.Helper()
	var le *LimitError
	if !errors.As(err, &le) {
		t.Fatalf("want a %s refusal, got %v", rule, err)
	}
	if le.Refusal.Rule != rule || le.RetryAfter != retry || !strings.Contains(err.Error(), field) {
		t.Fatalf("got %s retry %s (%v); want %s retry %s naming %s", le.Refusal.Rule, le.RetryAfter, err, rule, retry, field)
	}
	if rs := Refusals(err); len(rs) != 1 || rs[0].Rule != rule {
		t.Fatalf("Refusals = %+v", rs)
	}
}

func TestLimiterPerHourSlidingWindow(t *testing.T) {
	l, clock := newTestLimiter(t, 3, 100, 100)
	// Starts at 0, 10 and 20 minutes fill the hour.
	for i := 0; i < 3; i++ {
		rel, err := l.Acquire("alice")
		if err != nil {
			t.Fatalf("build %d: %v", i, err)
		}
		rel()
		clock.Advance(10 * time.Minute)
	}
	// At 30 minutes: the start at 0 leaves the window at 60.
	_, err := l.Acquire("alice")
	wantLimit(t, err, RuleRatePerHour, FieldPerHour, 30*time.Minute)
	if !strings.Contains(err.Error(), `user "alice" started 3 builds in the last hour`) || !strings.Contains(err.Error(), "in 30m0s") {
		t.Fatalf("message: %v", err)
	}
	// Another user has their own window.
	if rel, err := l.Acquire("bob"); err != nil {
		t.Fatalf("bob: %v", err)
	} else {
		rel()
	}
	// One second before the oldest start expires: still refused.
	clock.Advance(30*time.Minute - time.Second)
	_, err = l.Acquire("alice")
	wantLimit(t, err, RuleRatePerHour, FieldPerHour, time.Second)
	// Exactly an hour after it: admitted; the refused attempts counted nothing.
	clock.Advance(time.Second)
	if rel, err := l.Acquire("alice"); err != nil {
		t.Fatalf("after the window: %v", err)
	} else {
		rel()
	}
	// Now starts at 10, 20, 60 minutes: full until 70.
	_, err = l.Acquire("alice")
	wantLimit(t, err, RuleRatePerHour, FieldPerHour, 10*time.Minute)
}

func TestLimiterPerDay(t *testing.T) {
	l, clock := newTestLimiter(t, 2, 5, 100)
	// 2 per hour, 5 per day: five builds over three hours fill the day.
	for i := 0; i < 5; i++ {
		rel, err := l.Acquire("alice")
		if err != nil {
			t.Fatalf("build %d at %s: %v", i, clock.Now(), err)
		}
		rel()
		clock.Advance(31 * time.Minute)
	}
	// 155 minutes in; the hour holds only the fifth start, the day all five.
	_, err := l.Acquire("alice")
	wantLimit(t, err, RuleRatePerDay, FieldPerDay, 24*time.Hour-155*time.Minute)
	if !strings.Contains(err.Error(), "in the last 24 hours") {
		t.Fatalf("message: %v", err)
	}
	clock.Advance(24*time.Hour - 155*time.Minute)
	if _, err := l.Acquire("alice"); err != nil {
		t.Fatalf("a day after the first build: %v", err)
	}
}

func TestLimiterConcurrency(t *testing.T) {
	l, _ := newTestLimiter(t, 100, 100, 2)
	r1, err1 := l.Acquire("alice")
	r2, err2 := l.Acquire("bob")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	_, err := l.Acquire("carol")
	wantLimit(t, err, RuleConcurrent, FieldConcurrent, 0)
	if !strings.Contains(err.Error(), "2 builds are already running") {
		t.Fatalf("message: %v", err)
	}
	r1()
	r1() // a second release must not free another slot
	if l.Running() != 1 {
		t.Fatalf("running = %d after one release twice", l.Running())
	}
	r3, err := l.Acquire("carol")
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	_, err = l.Acquire("dave")
	wantLimit(t, err, RuleConcurrent, FieldConcurrent, 0)
	r2()
	r3()
	if l.Running() != 0 {
		t.Fatalf("running = %d", l.Running())
	}
}

// Concurrent Acquires never admit more than the limit.
func TestLimiterConcurrentAcquire(t *testing.T) {
	l, _ := newTestLimiter(t, 1000, 1000, 3)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted int
		releases []func()
	)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rel, err := l.Acquire("u"); err == nil {
				mu.Lock()
				admitted++
				releases = append(releases, rel)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admitted != 3 || l.Running() != 3 {
		t.Fatalf("admitted %d, running %d; want 3", admitted, l.Running())
	}
	for _, r := range releases {
		r()
	}
}

func TestLimiterRefusesWhatItCannotEnforce(t *testing.T) {
	l, _ := newTestLimiter(t, 1, 1, 1)
	_, err := l.Acquire("")
	wantLimit(t, err, RuleUser, "no user identity", 0)

	for _, tc := range []struct {
		mod   func(*config.EnvironmentBuilder)
		field string
	}{
		{func(c *config.EnvironmentBuilder) { c.BuildRateLimit.MaxBuildsPerHour = 0 }, FieldPerHour},
		{func(c *config.EnvironmentBuilder) { c.BuildRateLimit.MaxBuildsPerDay = -1 }, FieldPerDay},
		{func(c *config.EnvironmentBuilder) { c.MaxConcurrentBuilds = 0 }, FieldConcurrent},
	} {
		if _, err := NewLimiter(builderConfig(tc.mod), nil); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("want an error naming %s, got %v", tc.field, err)
		}
	}
}

func TestLimiterForgetsIdleUsers(t *testing.T) {
	l, clock := newTestLimiter(t, 10, 10, 10)
	for _, u := range []string{"a", "b", "c"} {
		rel, _ := l.Acquire(u)
		rel()
	}
	clock.Advance(windowDay)
	rel, _ := l.Acquire("d")
	rel()
	l.mu.Lock()
	n := len(l.starts)
	l.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d users remembered a day later, want 1", n)
	}
}
