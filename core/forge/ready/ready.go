// Package ready is the runtime's and the plugins' lines of the core's
// /readyz: the runtime answers, its sandboxes get every guarantee they
// require (or its waiver), a plugin is loaded, and the backends' images
// exist; the runtime's answers are settled across rounds, so that a busy
// runtime's slow answer does not take a working server out of its load
// balancer.
package ready

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/forge/pluginset"
	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
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

// Probe holds what the runtime last answered, across rounds; its zero
// value is ready for the first.
type Probe struct {
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

func (p *Probe) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// Checks are this round's lines. The first is named after the runtime
// (kind, "podman" or "kubernetes"), up or down, so that an alert keyed on
// it holds. The runtime's answers are settled across rounds.
func (p *Probe) Checks(ctx context.Context, kind string, rt runtime.Runtime, pol *policy.Policy, sts []plugins.Status) []httpserver.Check {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock()
	var checks []httpserver.Check
	name := cmp.Or(kind, "podman")
	images := slices.Sorted(maps.Keys(pluginset.Images(sts)))
	var line httpserver.Check
	var podmanOK, answered bool
	var info runtime.Info
	// Podman's image lookups are calls to the service, cheaper than its
	// info; a Kubernetes image lookup may ask nothing (the nodes pull),
	// and its Info (the API server's version) is cheap.
	lookups := len(images) > 0 && !runtime.CapabilitiesOf(rt).ImagesElsewhere
	if p.askInfo(now, lookups) {
		var err error
		info, err = rt.Info(ctx)
		fresh := httpserver.Check{Name: name}
		if err == nil {
			fresh.OK, fresh.Detail = true, cmp.Or(info.Engine, "Podman")+" "+info.Version+" at "+info.Socket
			p.info, p.infoAt = info, now
		} else {
			p.wasDown = true
		}
		line, podmanOK = p.runtime.settle(now, fresh, err)
		answered = err == nil
	} else {
		// The image lookups below tell whether it answers, cheaply.
		line, podmanOK, answered, info = p.runtime.good, true, true, p.info
		line.Age = now.Sub(p.infoAt).Round(time.Second).String()
	}
	checks = append(checks, line)
	if podmanOK {
		checks = append(checks, p.guaranteeLine(ctx, now, answered, info, rt, pol))
	}
	var loaded, failed []string
	for _, st := range sts {
		if st.Error == "" {
			loaded = append(loaded, st.Name)
		} else {
			failed = append(failed, st.Name+": "+st.Error)
		}
	}
	sort.Strings(loaded)
	pc := httpserver.Check{Name: "plugins", OK: len(loaded) > 0, Detail: "loaded: " + strings.Join(loaded, ", ")}
	if len(failed) > 0 {
		pc.Detail += "; failed: " + strings.Join(failed, "; ")
	}
	checks = append(checks, pc)
	if p.images == nil {
		p.images = map[string]*tolerant{}
	}
	p.imageFailed = false
	for _, img := range images {
		ch := httpserver.Check{Name: "image " + img}
		if !podmanOK {
			ch.Detail = "not checked: Podman unreachable"
			checks = append(checks, ch)
			continue
		}
		t := p.images[img]
		if t == nil {
			t = &tolerant{}
			p.images[img] = t
		}
		_, ok, err := rt.Image(ctx, img)
		if err != nil {
			p.imageFailed, p.wasDown = true, true
		}
		if err == nil && !ok {
			ch.Detail = "missing: run `make images`"
		} else if err == nil {
			ch.OK, ch.Detail = true, "present"
		}
		ch, _ = t.settle(now, ch, err)
		checks = append(checks, ch)
	}
	return checks
}

// guaranteeLine is the guarantees' line: measured when it must be
// (remeasure), else as last measured, with its age. answered: the runtime
// answered this round (info is its answer).
func (p *Probe) guaranteeLine(ctx context.Context, now time.Time, answered bool, info runtime.Info, rt runtime.Runtime, pol *policy.Policy) httpserver.Check {
	if answered && p.remeasure(now, info) || p.measuredAt.IsZero() {
		rep, err := rt.Guarantees(ctx)
		if err != nil {
			line, _ := p.guarantees.settle(now, httpserver.Check{Name: "guarantees"}, err)
			return line
		}
		line := guaranteeCheck(rep, pol)
		p.guarantees.settle(now, line, nil)
		p.gLine, p.measuredAt, p.measuredOf, p.wasDown = line, now, info, !answered
		line.Age = "0s"
		return line
	}
	line := p.gLine
	line.Age = now.Sub(p.measuredAt).Round(time.Second).String()
	return line
}

// guaranteeCheck: while a required guarantee is missing every sandbox is
// refused, so the server is not ready; a waived one is ready, and says so.
func guaranteeCheck(rep runtime.Report, pol *policy.Policy) httpserver.Check {
	ch := httpserver.Check{Name: "guarantees"}
	without, err := pol.Guarantees(rep)
	switch {
	case err != nil:
		ch.Detail = err.Error()
	case len(without) > 0:
		names := make([]string, len(without))
		for i, g := range without {
			names[i] = string(g.Guarantee)
		}
		ch.OK, ch.Detail = true, "waived, not enforced: "+strings.Join(names, ", ")
	default:
		ch.OK, ch.Detail = true, "every guarantee enforced"
	}
	return ch
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
func (p *Probe) remeasure(now time.Time, info runtime.Info) bool {
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
func (p *Probe) askInfo(now time.Time, lookups bool) bool {
	return !lookups || p.infoAt.IsZero() || p.runtime.fails > 0 || p.imageFailed || now.Sub(p.infoAt) >= remeasureAfter
}
