package sandbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// numberedRuntime gives every container its own id.
type numberedRuntime struct {
	fakeRuntime
	n int
}

func (r *numberedRuntime) Create(context.Context, runtime.Spec) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	return fmt.Sprintf("c%011d", r.n), nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A run is gone once every container created for it (runtime.LabelRun) or bound to
// it (a warm one) is removed; a removal that failed keeps it until the
// retrier succeeds. A container serves one run, and only its owner binds it.
func TestRunGone(t *testing.T) {
	rt := &numberedRuntime{}
	m, _ := newTestManager(t, rt)
	defer m.Shutdown(context.Background())
	ctx := context.Background()
	create := func(labels map[string]string) string {
		t.Helper()
		in := intent(m)
		in.Labels = labels
		id, err := m.Create(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	if !isClosed(m.RunGone("never")) {
		t.Fatal("a run without containers must be gone")
	}
	own := create(map[string]string{runtime.LabelRun: "r1"})
	warm := create(map[string]string{"io.mcp-forge.x-warm": "true"})
	other := create(nil)
	if isClosed(m.RunGone("r1")) {
		t.Fatal("r1 is gone while its container exists")
	}
	if err := m.BindRun("p", warm, "r1"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, owner, id, run string
	}{
		{"another plugin's container", "q", other, "r2"},
		{"a container that served another run", "p", warm, "r2"},
		{"no run id", "p", other, ""},
		{"a container that is not ours", "p", "c99999999999", "r2"},
	} {
		if err := m.BindRun(c.owner, c.id, c.run); err == nil {
			t.Errorf("%s: bound", c.name)
		}
	}
	if err := m.Remove(ctx, "p", own); err != nil {
		t.Fatal(err)
	}
	if isClosed(m.RunGone("r1")) {
		t.Fatal("r1 is gone while the warm container it took exists")
	}
	rt.setRemoveErr(errors.New("cannot connect to Podman"))
	gone := m.RunGone("r1")
	_ = m.Remove(ctx, "p", warm)
	if isClosed(gone) {
		t.Fatal("r1 is gone while its container's removal failed")
	}
	rt.setRemoveErr(nil)
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("r1 not gone after the retried removal")
	}
	var v *policy.Violation
	if err := m.BindRun("q", other, "r3"); !errors.As(err, &v) || v.Rule != "not-owner" {
		t.Fatalf("binding another plugin's container: %v", err)
	}
}
