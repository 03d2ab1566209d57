package forge

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/forge/replicas"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// capRuntime is the scripted runtime declaring caps.
type capRuntime struct {
	fakeRuntime
	caps runtime.Capabilities
}

func (r capRuntime) Capabilities() runtime.Capabilities { return r.caps }

// fakeStore is a session store that counts the hand-overs at start.
type fakeStore struct {
	runtime.SessionStore
	released atomic.Int32
}

func (s *fakeStore) ReleaseAll(context.Context) (int, error) { s.released.Add(1); return 0, nil }
func (s *fakeStore) Successors(context.Context) (int, error) { return 0, nil }

// fakeReaper says when it runs and when it stops.
type fakeReaper struct{ ran, stopped atomic.Bool }

func (r *fakeReaper) RunReaper(ctx context.Context, _ time.Duration, _ func(runtime.Reaped)) {
	r.ran.Store(true)
	<-ctx.Done()
	r.stopped.Store(true)
}

// The core asks the runtime what it can do: a runtime that stages its
// workspaces gets no host quota and no host gaps, one with a session
// store hands over its predecessor's sessions at start, one with a
// reaper has it run until the core closes.
func TestCapabilitiesAsked(t *testing.T) {
	tb := newTestbed(t)
	st, rp := &fakeStore{}, &fakeReaper{}
	tb.parts.runtime = func(config.Config, hclog.Logger) (Runtime, error) {
		return capRuntime{fakeRuntime{tb.rt}, runtime.Capabilities{StagedWorkspaces: true, Sessions: st, Reaper: rp}}, nil
	}
	quotaAsked := false
	tb.parts.quota = func(config.Config, hclog.Logger) (quota, error) { quotaAsked = true; return tb.quota, nil }
	tb.parts.bound = false // no watchdog: no gap either, the runtime bounds its sandboxes
	tb.quota.notEnforced = true
	f, err := build(context.Background(), tb.cfg, hclog.NewNullLogger(), tb.parts)
	if err != nil {
		t.Fatal(err)
	}
	if quotaAsked {
		t.Error("a runtime that stages workspaces got the host's filesystem quota")
	}
	if rep, err := f.runtime.Guarantees(context.Background()); err != nil || len(rep.Gaps) != 0 {
		t.Errorf("host gaps on a runtime that stages workspaces: %+v (%v)", rep.Gaps, err)
	}
	if st.released.Load() != 1 {
		t.Errorf("sessions handed over at start %d times, want 1", st.released.Load())
	}
	if f.caps.Replicas != nil || replicas.Forwarder(f.caps.Replicas, false, 0, nil, f.Engine, f.Audit, f.Log) != nil {
		t.Error("a forwarder without replicas")
	}
	for end := time.Now().Add(5 * time.Second); !rp.ran.Load() && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
	}
	if !rp.ran.Load() {
		t.Fatal("the declared reaper does not run")
	}
	f.Close()
	if !rp.stopped.Load() {
		t.Error("the reaper runs on after Close")
	}
}
