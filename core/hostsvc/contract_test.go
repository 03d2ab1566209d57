package hostsvc

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

// The core's host services pass the same contract as sdktest.LocalHost,
// over the fake runtime, with what only the core has declared: a policy,
// plugin identities, and unknown containers refused as violations. They
// pass it called directly and as a plugin calls them, across the plugin
// connection, with Dial's connection relayed on its stream or handed over
// as a socket (the Podman runtime's endpoints are local sockets).
func TestHostContract(t *testing.T) {
	t.Parallel()
	for _, mode := range []sdktest.DialMode{"direct", sdktest.DialStream, sdktest.DialFD} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			r := newRig(t, 0)
			var h, other host.Host = r.h, r.plugin("r")
			if mode != "direct" {
				h, other = sdktest.OverWire(t, h, mode).Host, sdktest.OverWire(t, other, sdktest.DialStream).Host
			}
			sdktest.RunHost(t, sdktest.HostUnderTest{
				Host:        h,
				Image:       image,
				Other:       other,
				Policy:      &sdktest.HostPolicy{DeniedImage: "docker.io/library/alpine:3", OverMemory: "100g"},
				UnknownKind: host.KindPolicy,
				WorkspaceOf: r.workspaceOf,
			})
		})
	}
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
