// Package replicas is what a core with replicas in a cluster runs beside
// serving, from what its runtime declares (runtime.Capabilities): the
// reaper of gone replicas' sandboxes, each removal audited; the tenants'
// quotas counted across replicas (tenant.Shared); and the calls of
// sessions another replica serves, forwarded to it. A core alone runs none
// of them.
package replicas

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/forward"
	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
	"github.com/mcp-forge/mcp-forge/core/version"
)

// reapEvery is how often the replica holding the reaper's Lease looks for
// sandboxes of core pods that are gone.
const reapEvery = 10 * time.Second

// StartReaper runs the runtime's reaper of the sandboxes of the core's
// replicas that are gone (a core in the cluster: each replica reconciles
// only its own sandboxes; the Lease holder removes those of replicas that
// are gone), each removal audited. nil: no reaper (Podman, or a core
// outside the cluster).
func StartReaper(r runtime.Reaper, al audit.Recorder) (stop func()) {
	if r == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.RunReaper(ctx, reapEvery, func(x runtime.Reaped) {
			al.Record(audit.Entry{Event: audit.ContainerReap, SessionID: x.Session, Success: x.Err == nil,
				Details: map[string]any{"container_id": x.Container, "image": x.Image, "left_by": x.LeftBy}, Error: audit.ErrText(x.Err)})
		})
	}()
	return func() { cancel(); <-done }
}

// Sessions is what the sharing counts of the engine (its session
// registry): its live sessions per client, and when they change.
type Sessions interface {
	PerClient() map[string]int
	OnChange(func())
}

// Quotas shares what this replica holds of the tenants' quotas with the
// other replicas of a core in the cluster, and counts theirs
// (tenant.Shared): runs from the tenants' registry (once the HTTP
// transport has one), live sessions from the engine.
type Quotas struct {
	q       runtime.SharedQuotas
	eng     Sessions
	tenants atomic.Pointer[tenant.Registry]
	stop    func()
}

var _ tenant.Shared = (*Quotas)(nil)

// ShareQuotas starts sharing for a core with replicas (the runtime's
// QuotaSharer); nil otherwise.
func ShareQuotas(sh runtime.QuotaSharer, eng Sessions) *Quotas {
	if sh == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Quotas{eng: eng}
	s.q = sh.ShareQuotas(ctx, s.local)
	s.stop = func() { cancel(); s.q.Wait() }
	eng.OnChange(s.q.Changed)
	return s
}

// Stop ends the sharing once the last usage is published.
func (s *Quotas) Stop() { s.stop() }

// UseTenants counts reg's runs, and has reg count the other replicas'.
func (s *Quotas) UseTenants(reg *tenant.Registry) {
	s.tenants.Store(reg)
	reg.Share(s)
}

// Known reports whether every other replica's usage is known yet, and how
// many replicas publish theirs.
func (s *Quotas) Known() (bool, int) { return s.q.Known() }

func (s *Quotas) local() map[string]runtime.Usage {
	out := map[string]runtime.Usage{}
	for client, n := range s.eng.PerClient() {
		out[client] = runtime.Usage{Sessions: n}
	}
	if reg := s.tenants.Load(); reg != nil {
		for name, n := range reg.RunningAll() {
			u := out[name]
			u.Runs = n
			out[name] = u
		}
	}
	return out
}

func (s *Quotas) Elsewhere(name string) (tenant.Usage, error) {
	u, err := s.q.Elsewhere(name)
	return tenant.Usage{Sessions: u.Sessions, Runs: u.Runs}, err
}

func (s *Quotas) Changed() { s.q.Changed() }

// Holder says which other live replica serves a client's session ("":
// none, or this one).
type Holder interface {
	HeldElsewhere(ctx context.Context, client, session string) string
}

// Forwarder sends the calls of sessions another replica of a core in the
// cluster (rs) serves to that replica on port (core/forward), the session
// named by the call's session_id and the caller by reg; nil for a core
// alone, or one serving TLS (tls: a replica's certificate does not name
// its pod address: such calls keep their refusal, and a client kept on one
// replica by the Service's sessionAffinity does not meet them).
func Forwarder(rs runtime.Replicas, tls bool, port int, reg *tenant.Registry, eng Holder, rec audit.Recorder, log hclog.Logger) *forward.Forwarder {
	if rs == nil || tls {
		return nil
	}
	route := func(ctx context.Context, call *mcp.CallToolRequest) string {
		session := toolcall.SessionID(call)
		if session == "" {
			return ""
		}
		client, err := reg.Identify(call)
		// An execution its tenant's rate refuses asks the cluster nothing:
		// the tenants' middleware refuses it at once.
		if err != nil || strings.HasPrefix(call.Params.Name, "execute_") && !reg.RateLeft(client) {
			return ""
		}
		return eng.HeldElsewhere(ctx, client, session)
	}
	return forward.New(route, rs.ReplicaAddress, port, httpserver.Path, rs.Self(), version.Version, rec, log)
}
