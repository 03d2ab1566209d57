package forge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// The runtime's lines of /readyz. A busy host answers `podman info` (what
// both the runtime's line and its guarantees ask) slowly, sometimes past a
// round's deadline, while every sandbox works: a probe that failed on one
// slow answer took a working server out of its load balancer. So Podman's
// Info is asked at the first round, after any lookup did not answer, with
// no image to look up, or when its answer is remeasureAfter old; in the
// other rounds the image lookups (cheap) tell that the service answers. The
// guarantees, which change only with the runtime service, are measured at
// the first round and again when they can have changed (the service
// answers with another identity, or again after it did not answer), or
// when their measurement is remeasureAfter old. And a runtime that does
// not answer fails readiness only once it persists: failRounds rounds in
// a row over at least failPeriod. Until then the last good answer stands, its
// detail saying the last one failed and its age shown. Only a slow answer
// is waited out so: a runtime that refuses the connection is down, and a
// verdict (a required guarantee or an image missing) is an answer; both
// fail readiness at once.
const (
	failRounds     = 3
	failPeriod     = 30 * time.Second
	remeasureAfter = 10 * time.Minute
)

// readyProbe holds what the runtime last answered, across rounds.
type readyProbe struct {
	now func() time.Time // nil: time.Now

	mu      sync.Mutex
	runtime tolerant             // the runtime's line
	images  map[string]*tolerant // each image's line
	// The guarantees' line as last measured (gLine), of which service
	// (measuredOf) and when (measuredAt, zero until a measurement answered).
	guarantees tolerant
	gLine      httpserver.Check
	measuredOf runtime.Info
	measuredAt time.Time
	wasDown    bool // the runtime did not answer since the last measurement
	// The runtime's last good Info and when; imageFailed: an image lookup
	// of the last round did not answer.
	info        runtime.Info
	infoAt      time.Time
	imageFailed bool
}

func (p *readyProbe) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// tolerant is one line whose answer may fail for a while before the line
// does.
type tolerant struct {
	good   httpserver.Check // the last OK answer (OK false: none yet)
	goodAt time.Time
	fails  int       // failed answers in a row
	since  time.Time // when the first of them failed
}

// settle is the line for this round: fresh when it answered (err nil),
// else the last good answer while the answers are only slow and not
// persistently, else the failure, saying for how long it has lasted.
func (t *tolerant) settle(now time.Time, fresh httpserver.Check, err error) (httpserver.Check, bool) {
	if err == nil {
		t.fails = 0
		if fresh.OK {
			t.good, t.goodAt = fresh, now
		}
		return fresh, fresh.OK
	}
	if t.fails == 0 {
		t.since = now
	}
	t.fails++
	lasted := now.Sub(t.since)
	if t.good.OK && slow(err) && (t.fails < failRounds || lasted < failPeriod) {
		c := t.good
		c.Detail += fmt.Sprintf("; its last answer failed (%d in a row, for %s; readiness fails after %d over %s): %v",
			t.fails, lasted.Round(time.Second), failRounds, failPeriod, err)
		c.Age = now.Sub(t.goodAt).Round(time.Second).String()
		return c, true
	}
	fresh.OK = false
	fresh.Detail = err.Error()
	if t.fails > 1 {
		fresh.Detail += fmt.Sprintf(" (failing for %s, %d rounds in a row)", lasted.Round(time.Second), t.fails)
	}
	return fresh, false
}

// sameService reports whether two answers of Info are of one service as
// it was configured: a restart with another engine, socket, cgroups mode
// or user changes what it enforces.
func sameService(a, b runtime.Info) bool {
	return a.Engine == b.Engine && a.Socket == b.Socket && a.Version == b.Version && a.OCIRuntime == b.OCIRuntime &&
		a.CgroupsMode == b.CgroupsMode && a.CgroupsV2 == b.CgroupsV2 && a.Rootless == b.Rootless
}

// remeasure reports whether the guarantees must be measured this round:
// never measured, last found wanting (it may have been fixed), the last
// measurement failed, the service changed or did not answer meanwhile (it
// may have restarted otherwise configured), or the measurement is old.
func (p *readyProbe) remeasure(now time.Time, info runtime.Info) bool {
	return p.measuredAt.IsZero() || !p.gLine.OK || p.guarantees.fails > 0 || p.wasDown ||
		!sameService(info, p.measuredOf) || now.Sub(p.measuredAt) >= remeasureAfter
}

// slow reports an answer that did not come in time: the runtime may be
// busy rather than down. A refused connection, a missing socket or an
// error the runtime answered is not slow, and fails its line at once.
func slow(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// askInfo reports whether this round asks the runtime's Info: none yet,
// the last did not answer or is old, an image lookup did not answer, or
// no image lookup will tell whether the runtime answers.
func (p *readyProbe) askInfo(now time.Time, lookups bool) bool {
	return !lookups || p.infoAt.IsZero() || p.runtime.fails > 0 || p.imageFailed || now.Sub(p.infoAt) >= remeasureAfter
}
