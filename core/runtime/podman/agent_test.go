package podman

import (
	"slices"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
)

// Every sandbox has the agent at agent.Path, read-only and never chowned
// (no "U": a user namespace would take the core's own binary); without one,
// only a command that needs it is refused, with what to do.
func TestMountAgent(t *testing.T) {
	forward := []string{agent.Path, "forward", "/forge/net/egress.sock", "3128", "--", "python3"}
	for _, c := range []struct {
		name, agentPath string
		userns          string
		cmd             []string
		wantMount, err  bool
	}{
		{"mounted in every sandbox", "/usr/lib/mcp-forge/mcp-forge-agent", "private", []string{"python3"}, true, false},
		{"mounted for the forwarder", "/usr/lib/mcp-forge/mcp-forge-agent", "", forward, true, false},
		{"none, not needed", "", "private", []string{"python3"}, false, false},
		{"none, needed", "", "private", forward, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := runtime.Spec{Image: "img", UserNS: c.userns, Command: c.cmd, Mounts: []runtime.Mount{{Source: "/ws", Target: "/work"}}}
			g := toSpecgen(s)
			err := New("").WithAgent(c.agentPath).mountAgent(g, s)
			if c.err {
				if err == nil || !strings.Contains(err.Error(), "make build") {
					t.Fatalf("err %v; want a refusal that says what to do", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var found bool
			for _, m := range g.Mounts {
				if m.Destination != agent.Path {
					continue
				}
				found = true
				if m.Source != c.agentPath || !slices.Contains(m.Options, "ro") || slices.Contains(m.Options, "U") || slices.Contains(m.Options, "rw") {
					t.Fatalf("agent mount %+v: want %s read-only, never chowned", m, c.agentPath)
				}
			}
			if found != c.wantMount {
				t.Fatalf("agent mounted: %v, want %v (%+v)", found, c.wantMount, g.Mounts)
			}
		})
	}
}

// A host root is bound read-only without its submounts and never chowned
// (the user's files keep their owner); a workspace mount is chowned in a
// user namespace.
func TestHostRootMountOptions(t *testing.T) {
	s := runtime.Spec{Image: "img", UserNS: "private", Mounts: []runtime.Mount{{Source: "/ws", Target: "/work"}, {Source: "/home/me/Data", Target: "/mnt/data", ReadOnly: true, HostRoot: true}}}
	g := toSpecgen(s)
	opts := map[string][]string{}
	for _, m := range g.Mounts {
		opts[m.Destination] = m.Options
	}
	if o := opts["/mnt/data"]; !slices.Contains(o, "ro") || !slices.Contains(o, "bind") || slices.Contains(o, "rbind") || slices.Contains(o, "U") || slices.Contains(o, "rw") {
		t.Errorf("host root options %v: want a read-only non-recursive bind, never chowned", o)
	}
	if o := opts["/work"]; !slices.Contains(o, "U") || !slices.Contains(o, "rbind") {
		t.Errorf("workspace options %v", o)
	}
}
