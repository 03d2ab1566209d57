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

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/metrics"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/tenant"
)

// httpCore is the core as the HTTP transport sees it (httpserver.Core).
type httpCore struct{ f *Forge }

var _ httpserver.Core = httpCore{}

func (c httpCore) MCPServer(*http.Request) *mcp.Server { return c.f.MCP.MCP() }

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
	checks := readiness(ctx, c.f.Config.Runtime.Kind, c.f.runtime, c.f.Sandbox.Policy(), c.f.Plugins.Statuses())
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
// or "kubernetes"), up or down, so that an alert keyed on it holds.
func readiness(ctx context.Context, kind string, rt Runtime, pol *policy.Policy, sts []plugins.Status) []httpserver.Check {
	var checks []httpserver.Check
	podmanOK := false
	name := cmp.Or(kind, "podman")
	if info, err := rt.Info(ctx); err != nil {
		checks = append(checks, httpserver.Check{Name: name, Detail: err.Error()})
	} else {
		podmanOK = true
		checks = append(checks, httpserver.Check{Name: name, OK: true, Detail: cmp.Or(info.Engine, "Podman") + " " + info.Version + " at " + info.Socket})
		checks = append(checks, guaranteeCheck(ctx, rt, pol))
	}
	var loaded, failed []string
	for _, p := range sts {
		if p.Error == "" {
			loaded = append(loaded, p.Name)
		} else {
			failed = append(failed, p.Name+": "+p.Error)
		}
	}
	sort.Strings(loaded)
	pc := httpserver.Check{Name: "plugins", OK: len(loaded) > 0, Detail: "loaded: " + strings.Join(loaded, ", ")}
	if len(failed) > 0 {
		pc.Detail += "; failed: " + strings.Join(failed, "; ")
	}
	checks = append(checks, pc)
	for _, img := range slices.Sorted(maps.Keys(Images(sts))) {
		ch := httpserver.Check{Name: "image " + img}
		if !podmanOK {
			ch.Detail = "not checked: Podman unreachable"
		} else if _, ok, err := rt.Image(ctx, img); err != nil {
			ch.Detail = err.Error()
		} else if !ok {
			ch.Detail = "missing: run `make images`"
		} else {
			ch.OK, ch.Detail = true, "present"
		}
		checks = append(checks, ch)
	}
	return checks
}

// guaranteeCheck: while a required guarantee is missing every sandbox is
// refused, so the server is not ready; a waived one is ready, and says so.
func guaranteeCheck(ctx context.Context, rt Runtime, pol *policy.Policy) httpserver.Check {
	ch := httpserver.Check{Name: "guarantees"}
	rep, err := rt.Guarantees(ctx)
	if err != nil {
		ch.Detail = err.Error()
		return ch
	}
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
