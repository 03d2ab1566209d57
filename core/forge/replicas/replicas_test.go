package replicas

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/audit/audittest"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// reaper reports one removal, then runs until its context ends.
type reaper struct{ stopped atomic.Bool }

func (r *reaper) RunReaper(ctx context.Context, _ time.Duration, record func(runtime.Reaped)) {
	record(runtime.Reaped{Container: "forge-1", Image: "mcp-forge/python:3.11", Session: "s1", LeftBy: "ns/core-b/uid-b", Err: errors.New("gone already")})
	<-ctx.Done()
	r.stopped.Store(true)
}

// Every removal the reaper makes is audited, and stop ends it.
func TestStartReaper(t *testing.T) {
	if StartReaper(nil, &audittest.Recorder{}) != nil {
		t.Fatal("a core without a reaper runs one")
	}
	r, rec := &reaper{}, &audittest.Recorder{}
	stop := StartReaper(r, rec)
	for end := time.Now().Add(5 * time.Second); len(rec.Entries()) == 0 && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
	}
	stop()
	if !r.stopped.Load() {
		t.Error("the reaper runs on after stop")
	}
	got := rec.Entries()
	if len(got) != 1 || got[0].Event != audit.ContainerReap || got[0].SessionID != "s1" || got[0].Success || got[0].Details["left_by"] != "ns/core-b/uid-b" {
		t.Errorf("audited %+v; want the one removal, failed", got)
	}
}

// sessions is the engine's count of live sessions per client.
type sessions struct {
	per      map[string]int
	onChange func()
}

func (s *sessions) PerClient() map[string]int { return maps.Clone(s.per) }
func (s *sessions) OnChange(f func())         { s.onChange = f }

// shared records what the replica publishes.
type shared struct {
	local   func() map[string]runtime.Usage
	changed atomic.Int32
	waited  atomic.Bool
}

func (s *shared) ShareQuotas(_ context.Context, local func() map[string]runtime.Usage) runtime.SharedQuotas {
	s.local = local
	return s
}
func (s *shared) Changed() { s.changed.Add(1) }
func (s *shared) Elsewhere(string) (runtime.Usage, error) {
	return runtime.Usage{Sessions: 2, Runs: 1}, nil
}
func (s *shared) Known() (bool, int) { return true, 1 }
func (s *shared) Wait()              { s.waited.Store(true) }

// A core alone shares nothing; one with replicas publishes its live
// sessions, hears of every change, and counts the others'.
func TestShareQuotas(t *testing.T) {
	if ShareQuotas(nil, &sessions{}) != nil {
		t.Fatal("a core alone shares its quotas")
	}
	eng, sh := &sessions{per: map[string]int{"acme": 3}}, &shared{}
	q := ShareQuotas(sh, eng)
	if got := sh.local(); got["acme"].Sessions != 3 || len(got) != 1 {
		t.Errorf("published %v; want acme's 3 sessions", got)
	}
	eng.onChange()
	q.Changed()
	if sh.changed.Load() != 2 {
		t.Errorf("%d changes heard; want the engine's and the tenants'", sh.changed.Load())
	}
	if u, err := q.Elsewhere("acme"); err != nil || u.Sessions != 2 || u.Runs != 1 {
		t.Errorf("elsewhere %+v, %v", u, err)
	}
	if known, n := q.Known(); !known || n != 1 {
		t.Errorf("known %v, %d", known, n)
	}
	q.Stop()
	if !sh.waited.Load() {
		t.Error("Stop did not wait for the last publication")
	}
}

// A core alone, or one serving TLS, forwards nothing.
func TestNoForwarder(t *testing.T) {
	if Forwarder(nil, false, 8080, nil, nil, &audittest.Recorder{}, hclog.NewNullLogger()) != nil {
		t.Error("a core alone forwards")
	}
}
