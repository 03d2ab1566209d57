package forge

import (
	"cmp"
	"context"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/forge/replicas"
	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/metrics"
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
		f.quotas.UseTenants(reg)
	}
	// Outside the tenants' middleware (added later: it wraps it).
	fw := replicas.Forwarder(f.caps.Replicas, f.Config.Server.TLSCert != "", cmp.Or(f.httpPort, f.Config.Server.Port), reg, f.Engine, f.Audit, f.Log.Named("forward"))
	if fw != nil {
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
	checks := c.f.probe.Checks(ctx, c.f.Config.Runtime.Kind, c.f.runtime, c.f.Sandbox.Policy(), c.f.Plugins.Statuses())
	if q := c.f.quotas; q != nil {
		// Until the other replicas' usage is known, runs and sessions of
		// tenants are refused: send no calls here yet.
		known, n := q.Known()
		ch := httpserver.Check{Name: "quotas", OK: known, Detail: fmt.Sprintf("counted across replicas: %d other replica(s) publish their usage", n)}
		if !known {
			ch.Detail = "the other replicas' usage of the tenants' quotas is not known yet (their Leases are being read; `mcp-forge doctor` checks the permissions)"
		}
		checks = append(checks, ch)
	}
	return checks
}
