package hostsvc

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

// The core's host services pass the same contract as sdktest.LocalHost,
// over the fake runtime, with what only the core has declared: a policy,
// plugin identities, and unknown containers refused as violations.
func TestHostContract(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	sdktest.RunHost(t, sdktest.HostUnderTest{
		Host:        r.h,
		Image:       image,
		Other:       r.plugin("r"),
		Policy:      &sdktest.HostPolicy{DeniedImage: "docker.io/library/alpine:3", OverMemory: "100g"},
		UnknownKind: host.KindPolicy,
		WorkspaceOf: r.workspaceOf,
	})
}

// workspaceOf is the host directory of a container's workspace.
func (r *rig) workspaceOf(id string) string {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if t, ok := r.h.workspaces[id]; ok {
		return t.Path
	}
	return ""
}
