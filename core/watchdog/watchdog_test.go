package watchdog

import (
	"context"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// fakeRuntime lists containers by the server label; a logic stand-in for
// Podman (the end-to-end test uses the real one).
type fakeRuntime struct {
	runtime.Runtime
	mu       sync.Mutex
	ctrs     map[string]map[string]string // id → labels
	lists    int
	appearAt int // after this many lists, a late container appears
}

func (f *fakeRuntime) List(_ context.Context, labels map[string]string) ([]runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.appearAt > 0 && f.lists == f.appearAt {
		f.ctrs["late"] = map[string]string{runtime.LabelServer: "1-1"}
	}
	var out []runtime.Container
	for id, l := range f.ctrs {
		if l[runtime.LabelServer] == labels[runtime.LabelServer] {
			out = append(out, runtime.Container{ID: id, Labels: l})
		}
	}
	return out, nil
}

func (f *fakeRuntime) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ctrs, id)
	return nil
}

type rec struct {
	mu      sync.Mutex
	entries []audit.Entry
	opened  int
}

func (r *rec) Record(e audit.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, e)
}

func opts(rt runtime.Runtime, r *rec) Options {
	return Options{ServerID: "1-1", Runtime: rt, Log: hclog.NewNullLogger(), Settle: 300 * time.Millisecond,
		Audit: func() (audit.Recorder, func(), error) { r.opened++; return r, func() {}, nil }}
}

// EOF without a clean-stop byte: every container of the dead server goes,
// including one that appears after the first sweep; others stay.
func TestSweepAfterDeath(t *testing.T) {
	rt := &fakeRuntime{appearAt: 2, ctrs: map[string]map[string]string{
		"a": {runtime.LabelServer: "1-1", runtime.LabelSession: "s"}, "b": {runtime.LabelServer: "1-1"}, "other": {runtime.LabelServer: "2-2"}}}
	r := &rec{}
	pr, pw := io.Pipe()
	done := make(chan int)
	released := make(chan int, 1)
	o := opts(rt, r)
	o.Release = func() (int, error) {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		released <- len(rt.ctrs) // containers still there when workspaces go
		return 1, nil
	}
	go func() {
		n, err := Run(pr, o)
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	select {
	case <-done:
		t.Fatal("the watchdog returned while its server lives")
	case <-time.After(100 * time.Millisecond):
	}
	pw.Close()
	var n int
	select {
	case n = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no sweep within 10 s of the server's end")
	}
	if n != 3 || len(rt.ctrs) != 1 || rt.ctrs["other"] == nil {
		t.Fatalf("removed %d, left %v", n, rt.ctrs)
	}
	reaps := 0
	for _, e := range r.entries {
		if e.Event == audit.ContainerReap && e.Success && e.Details["by"] == "watchdog" {
			reaps++
		}
	}
	if reaps != 3 || r.entries[len(r.entries)-1].Event != audit.WatchdogEvent {
		t.Fatalf("audit: %+v", r.entries)
	}
	select {
	case left := <-released:
		if left != 1 {
			t.Fatalf("workspaces released while %d of the server's containers remained", left-1)
		}
	default:
		t.Fatal("the dead server's workspaces were not released")
	}
}

// A clean stop: one sweep, nothing audited when nothing was left.
func TestCleanStop(t *testing.T) {
	rt := &fakeRuntime{ctrs: map[string]map[string]string{"other": {runtime.LabelServer: "2-2"}}}
	r := &rec{}
	pr, pw, _ := os.Pipe()
	pw.Write([]byte{cleanStop})
	pw.Close()
	o := opts(rt, r)
	o.Release = func() (int, error) { t.Error("a clean server's workspaces are its own to release"); return 0, nil }
	n, err := Run(pr, o)
	if err != nil || n != 0 || rt.lists != 1 || r.opened != 0 {
		t.Fatalf("removed %d (%v), %d lists, audit opened %d times", n, err, rt.lists, r.opened)
	}
}
