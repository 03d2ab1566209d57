package hostsvc

import (
	"context"
	"net"
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// podSockets is a remote runtime's way to a sandbox's sockets: each dial
// is one end of a pipe, its path noted.
type podSockets struct {
	runtime.RemoteWorkspace
	dialled []string
}

func (p *podSockets) DialSocket(_ context.Context, id, path string) (net.Conn, error) {
	p.dialled = append(p.dialled, id+":"+path)
	a, b := net.Pipe()
	go b.Close()
	return a, nil
}

// A session container one core created is another core's once it adopts
// it: that core's instance of the plugin reaches the endpoints the
// container declared, and only that plugin; released, it is forgotten
// and left running.
func TestAdoptRelease(t *testing.T) {
	ctx := context.Background()
	first := newRig(t, 0)
	sockets := &podSockets{}
	// The core that opened the session, on a runtime whose sandboxes keep
	// their workspace (the rig's fake runtime, reached like a pod's).
	opener := New("python", sandbox.New(first.rt, first.m.Policy(), first.rec, hclog.NewNullLogger(), sandbox.Options{Instance: "t", Remote: sockets}), first.rec, first.ws)
	in := intent("sleep", "1000")
	in.SessionID = "s1"
	in.Endpoints = []host.Endpoint{{Name: "shell", Path: "/forge/work/k/shell"}}
	c, err := opener.Create(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := opener.Start(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	ws, eps, ok := opener.Endpoints(c.ID)
	if !ok || ws != "s1" || !slices.Equal(eps, []runtime.SessionEndpoint{{Name: "shell", Path: "/forge/work/k/shell"}}) {
		t.Fatalf("endpoints %q %v %v", ws, eps, ok)
	}

	// The core that takes it over: its own manager and workspaces.
	m := sandbox.New(first.rt, first.m.Policy(), first.rec, hclog.NewNullLogger(), sandbox.Options{Instance: "t", Remote: sockets})
	t.Cleanup(func() { m.Shutdown(ctx) })
	wsB := workspace.New(t.TempDir(), m.ServerTag(), 0, nil)
	taker, other := New("python", m, first.rec, wsB), New("r", m, first.rec, wsB)
	if _, err := taker.Dial(ctx, c.ID, "shell"); kindOf(err) != host.KindPolicy && kindOf(err) != host.KindNotFound {
		t.Fatalf("dial before the takeover: %v", err)
	}
	if err := taker.Adopt(c.ID, ws, eps); err != nil {
		t.Fatal(err)
	}
	conn, err := taker.Dial(ctx, c.ID, "shell")
	if err != nil {
		t.Fatalf("dial after the takeover: %v", err)
	}
	conn.Close()
	if want := []string{c.ID + ":/forge/work/k/shell"}; !slices.Equal(sockets.dialled, want) {
		t.Fatalf("dialled %v, want %v", sockets.dialled, want)
	}
	if st, err := taker.State(ctx, c.ID); err != nil || !st.Running {
		t.Fatalf("state after the takeover: %+v %v", st, err)
	}
	if _, err := other.State(ctx, c.ID); kindOf(err) != host.KindPolicy {
		t.Fatalf("another plugin reached the adopted container: %v", err)
	}
	if id, ok := taker.SessionContainer("s1"); !ok || id != c.ID {
		t.Fatalf("session container %q %v", id, ok)
	}

	taker.Release(c.ID)
	if _, err := taker.Dial(ctx, c.ID, "shell"); err == nil {
		t.Fatal("dial after the release")
	}
	// The plugin closing its side on the way out finds it gone, quietly,
	// and the container runs on for the core that serves it now.
	if err := taker.Remove(ctx, c.ID); err != nil {
		t.Fatalf("the plugin's remove after the release: %v", err)
	}
	if running, _, err := first.rt.State(ctx, c.ID); err != nil || !running {
		t.Fatalf("the released container: running %v, %v", running, err)
	}
}
