package podman

import (
	"context"
	"fmt"

	"github.com/containers/podman/v5/pkg/bindings/system"
	"github.com/containers/podman/v5/pkg/specgen"
	"go.podman.io/storage/pkg/idtools"
	storagetypes "go.podman.io/storage/types"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// A rootless Podman service lives in the user's own user namespace: id 0
// there is the user, ids 1..N are the user's sub-ids (/etc/subuid), and an
// ID map in a container spec is read in that namespace, not the host's. The
// policy's fixed map at security.userns_start (a host id far above any
// account) cannot exist there, so for a rootless service a "private" user
// namespace maps container ids 0..UserNSSize-1 onto namespace ids
// 1..UserNSSize: the user's sub-ids. Container root and the sandbox user
// are then sub-ids, never the user's own uid (0 in that namespace).
const rootlessMapStart = 1

// RootlessUmask is the umask of rootless sandboxes. The server is then an
// ordinary user that is neither the sandbox's uid nor root, so what the
// sandbox creates in its workspace (the kernels' ipc sockets above all: a
// connect needs write permission on the socket) must be open to it. The
// workspace base directory is 0700 and the user's own, so no other host
// user can reach those files.
const RootlessUmask = "0000"

// rootlessState caches whether the service is rootless, and the cgroup
// controllers it can use (gVisor's decision, rootlessGVisor): neither
// changes while the connection lives.
type rootlessState struct {
	known, rootless bool
	controllers     []string
}

// serviceState asks the service once.
func (c *Client) serviceState(ctx context.Context) (rootlessState, error) {
	c.mu.Lock()
	st := c.rl
	c.mu.Unlock()
	if st.known {
		return st, nil
	}
	info, err := system.Info(ctx, nil)
	if err != nil {
		return rootlessState{}, fmt.Errorf("podman info: %w", err)
	}
	st = rootlessState{known: true, rootless: info.Host.Security.Rootless, controllers: info.Host.CgroupControllers}
	c.mu.Lock()
	c.rl = st
	c.mu.Unlock()
	return st, nil
}

// adaptRootless rewrites what a rootless service reads differently.
func adaptRootless(g *specgen.SpecGenerator, s runtime.Spec) {
	if s.UserNS == "private" {
		m := []idtools.IDMap{{ContainerID: 0, HostID: rootlessMapStart, Size: runtime.UserNSSize}}
		g.IDMappings = &storagetypes.IDMappingOptions{UIDMap: m, GIDMap: m}
	}
	g.Umask = RootlessUmask
}
