package forge

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/metrics"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/tenant"
)

// httpCore is the core as the HTTP transport sees it (httpserver.Core).
type httpCore struct{ f *Forge }

var _ httpserver.Core = httpCore{}

func (c httpCore) MCPServer(*http.Request) *mcp.Server { return c.f.MCP.MCP() }

func (c httpCore) Tasks(next http.Handler, identify func(*http.Request) (string, error), maxBody int64) http.Handler {
	return c.f.MCP.Tasks().Handler(next, identify, maxBody)
}

// UseTenants: the MCP server names each request's tenant and applies its
// run and rate quotas to tool calls; the engine admits every live session
// a tenant gets, whichever tool creates it (execute_*, restore_session),
// so its session quota is asked there.
func (c httpCore) UseTenants(reg *tenant.Registry, obs tenant.Observer) {
	f := c.f
	f.MCP.SetIdentity(reg.Identify)
	f.MCP.NoSubscriptions("resources/subscribe is not available over this server's HTTP transport (stateless: no connection outlives a request to carry notifications); " +
		"read the resource again, or call wait_job, which answers when the job ends")
	f.MCP.MCP().AddReceivingMiddleware(reg.Middleware(f.Audit, obs))
	f.Engine.SessionQuota = reg.SessionQuota(f.Audit, obs)
	if f.quotas != nil {
		f.quotas.tenants.Store(reg)
		reg.Share(f.quotas)
	}
	// Outside the tenants' middleware (added later: it wraps it).
	if fw := forwarder(f, reg); fw != nil {
		f.MCP.MCP().AddReceivingMiddleware(fw.Middleware)
		f.undo.push("forwarding", func(context.Context) error { fw.Close(); return nil })
	}
}

func (c httpCore) Record(e audit.Entry)              { c.f.Audit.Record(e) }
func (c httpCore) AddAuditHook(h func(*audit.Entry)) { c.f.Audit.AddHook(h) }
func (c httpCore) SessionCount(t string) int         { return len(c.f.Engine.Sessions(t, false)) }

func (c httpCore) PluginStatuses() []httpserver.PluginStatus {
	var out []httpserver.PluginStatus
	for _, p := range c.f.Plugins.Statuses() {
		st := httpserver.PluginStatus{Name: p.Name, Languages: p.Capabilities.Languages, Restarts: p.Restarts}
		if w := c.f.Engine.WarmPool(context.Background(), p); w != nil {
			st.WarmPool = &metrics.Pool{Ready: w.Warm, Starting: w.Starting, InUse: w.InUse, Hits: w.Hits, Misses: w.Misses, Grown: w.Grown, Shrunk: w.Shrunk}
			for _, n := range w.Target {
				st.WarmPool.Target += n
			}
		}
		out = append(out, st)
	}
	return out
}

// Ready: Podman answers, sandboxes get every guarantee they require (or
// its waiver), a plugin is loaded, and the images of the loaded backends
// (as they report them) exist.
func (c httpCore) Ready(ctx context.Context) []httpserver.Check {
	checks := c.f.ready.readiness(ctx, c.f.Config.Runtime.Kind, c.f.runtime, c.f.Sandbox.Policy(), c.f.Plugins.Statuses())
	if q := c.f.quotas; q != nil {
		// Until the other replicas' usage is known, runs and sessions of
		// tenants are refused: send no calls here yet.
		known, n := q.q.Known()
		ch := httpserver.Check{Name: "quotas", OK: known, Detail: fmt.Sprintf("counted across replicas: %d other replica(s) publish their usage", n)}
		if !known {
			ch.Detail = "the other replicas' usage of the tenants' quotas is not known yet (their Leases are being read; `mcp-forge doctor` checks the permissions)"
		}
		checks = append(checks, ch)
	}
	return checks
}

// readiness: the first check is named after the runtime (kind, "podman"
// or "kubernetes"), up or down, so that an alert keyed on it holds. The
// runtime's answers are settled across rounds (ready.go).
func (p *readyProbe) readiness(ctx context.Context, kind string, rt Runtime, pol *policy.Policy, sts []plugins.Status) []httpserver.Check {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock()
	var checks []httpserver.Check
	name := cmp.Or(kind, "podman")
	images := slices.Sorted(maps.Keys(Images(sts)))
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
func (p *readyProbe) guaranteeLine(ctx context.Context, now time.Time, answered bool, info runtime.Info, rt Runtime, pol *policy.Policy) httpserver.Check {
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
