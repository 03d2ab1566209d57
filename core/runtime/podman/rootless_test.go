package podman

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// A rootless service reads maps in the user's namespace: the private map
// must start at the first sub-id (1), never at 0 (the user) or at the
// rootful host id (which does not exist there).
func TestAdaptRootless(t *testing.T) {
	for _, c := range []struct {
		userns   string
		wantHost int // -1: no explicit map
	}{
		{"private", rootlessMapStart},
		{"auto", -1},
		{"", -1},
	} {
		t.Run(c.userns, func(t *testing.T) {
			s := runtime.Spec{Image: "i", UserNS: c.userns, UserNSStart: 2147483647}
			g := toSpecgen(s)
			adaptRootless(g, s)
			if g.Umask != RootlessUmask {
				t.Fatalf("umask %q", g.Umask)
			}
			if c.wantHost < 0 {
				if g.IDMappings != nil && len(g.IDMappings.UIDMap) > 0 {
					t.Fatalf("unexpected map %+v", g.IDMappings.UIDMap)
				}
				return
			}
			u, gm := g.IDMappings.UIDMap, g.IDMappings.GIDMap
			if len(u) != 1 || u[0].ContainerID != 0 || u[0].HostID != c.wantHost || u[0].Size != runtime.UserNSSize {
				t.Fatalf("uid map %+v", u)
			}
			if len(gm) != 1 || gm[0].HostID != c.wantHost {
				t.Fatalf("gid map %+v", gm)
			}
		})
	}
}
