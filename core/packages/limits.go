package packages

import (
	"fmt"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// Rule names and fields of the build limits.
const (
	RuleRatePerHour = "build_rate_limit_hour"
	RuleRatePerDay  = "build_rate_limit_day"
	RuleConcurrent  = "max_concurrent_builds"
	RuleUser        = "build_user"
	FieldPerHour    = "environment_builder.build_rate_limit.max_builds_per_hour"
	FieldPerDay     = "environment_builder.build_rate_limit.max_builds_per_day"
	FieldConcurrent = "environment_builder.max_concurrent_builds"
	windowHour      = time.Hour
	windowDay       = 24 * time.Hour
)

// LimitError is a build refused by a rate or concurrency limit.
type LimitError struct {
	Refusal *refusal.Error
	// RetryAfter is when the same user could start a build again; zero when
	// it depends on other builds finishing.
	RetryAfter time.Duration
}

func (e *LimitError) Error() string { return e.Refusal.Error() }

func (e *LimitError) Unwrap() error { return e.Refusal }

// Limiter enforces, per user, at most max_builds_per_hour build starts in
// any trailing hour and max_builds_per_day in any trailing 24 hours, and at
// most max_concurrent_builds builds running at once over all users.
//
// It keeps a sliding log of start times rather than token buckets
// (golang.org/x/time/rate): the configuration promises "N builds per hour",
// and a bucket with burst N refilling at N/hour admits up to 2N in some
// hour-long window; two buckets per user would also be needed, and a bucket
// cannot tell the user when the oldest start leaves the window. The log is
// bounded by max_builds_per_day per user and pruned on every call.
type Limiter struct {
	now                            func() time.Time
	perHour, perDay, maxConcurrent int

	mu      sync.Mutex
	starts  map[string][]time.Time // per user, oldest first, within windowDay
	running int
}

// NewLimiter builds the limiter from the configuration; now is time.Now
// except in tests. Limits that are not positive are refused: a limit that
// cannot be enforced must not silently become "unlimited".
func NewLimiter(cfg config.EnvironmentBuilder, now func() time.Time) (*Limiter, error) {
	for _, f := range []struct {
		field string
		n     int
	}{{FieldPerHour, cfg.BuildRateLimit.MaxBuildsPerHour}, {FieldPerDay, cfg.BuildRateLimit.MaxBuildsPerDay}, {FieldConcurrent, cfg.MaxConcurrentBuilds}} {
		if f.n <= 0 {
			return nil, fmt.Errorf("%s: must be > 0 (got %d)", f.field, f.n)
		}
	}
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, perHour: cfg.BuildRateLimit.MaxBuildsPerHour, perDay: cfg.BuildRateLimit.MaxBuildsPerDay,
		maxConcurrent: cfg.MaxConcurrentBuilds, starts: map[string][]time.Time{}}, nil
}

// Acquire admits one build for user, counting it against the user's rate
// limits and taking a concurrency slot. The returned release frees the slot
// (call it when the build ends, however it ends; extra calls do nothing); the
// start keeps counting against the rate limits. A refused attempt counts
// against nothing.
func (l *Limiter) Acquire(user string) (release func(), err error) {
	if user == "" {
		return nil, &LimitError{Refusal: refused(RuleUser, "", "", "the build has no user identity, so its rate limit cannot be enforced")}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.prune(now)

	if l.running >= l.maxConcurrent {
		return nil, &LimitError{Refusal: refused(RuleConcurrent, "", "", fmt.Sprintf(
			"%d builds are already running, the limit set by %s (%d); try again when one finishes",
			l.running, FieldConcurrent, l.maxConcurrent))}
	}
	log := l.starts[user]
	if retry, n := window(log, now, windowHour, l.perHour); retry > 0 {
		return nil, l.rateError(RuleRatePerHour, FieldPerHour, user, n, "hour", l.perHour, retry)
	}
	if retry, n := window(log, now, windowDay, l.perDay); retry > 0 {
		return nil, l.rateError(RuleRatePerDay, FieldPerDay, user, n, "24 hours", l.perDay, retry)
	}
	l.starts[user] = append(log, now)
	l.running++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.running--
			l.mu.Unlock()
		})
	}, nil
}

// Running is the number of builds holding a slot.
func (l *Limiter) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running
}

func (l *Limiter) rateError(rule, field, user string, n int, span string, limit int, retry time.Duration) error {
	return &LimitError{RetryAfter: retry, Refusal: refused(rule, "", "", fmt.Sprintf(
		"user %q started %d builds in the last %s, the limit set by %s (%d); the next build can start in %s",
		user, n, span, field, limit, retry.Round(time.Second)))}
}

// window counts the starts within the trailing span; when there are limit
// or more it says how long until the one that must expire does.
func window(log []time.Time, now time.Time, span time.Duration, limit int) (time.Duration, int) {
	var in []time.Time
	for i, t := range log {
		if now.Sub(t) < span {
			in = log[i:]
			break
		}
	}
	if len(in) < limit {
		return 0, len(in)
	}
	// After the oldest len(in)-limit+1 starts leave the window, there is room.
	return in[len(in)-limit].Add(span).Sub(now), len(in)
}

// prune drops starts older than a day, and users with none left, so that
// memory is bounded by the users of the last day.
func (l *Limiter) prune(now time.Time) {
	for user, log := range l.starts {
		i := 0
		for i < len(log) && now.Sub(log[i]) >= windowDay {
			i++
		}
		if i == len(log) {
			delete(l.starts, user)
		} else if i > 0 {
			l.starts[user] = append([]time.Time(nil), log[i:]...)
		}
	}
}
