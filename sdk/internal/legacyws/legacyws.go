// Package legacyws carries the host path of a container's workspace to the
// one SDK component that still opens files there, sdk/oneshot's resident
// runner (its FIFOs), until that runner dials an endpoint instead; the
// `runner` branch deletes this package. No message of plugin API v2 holds
// the path: the core's shim sends it as a response header of Create, and
// the v1 compatibility path puts it in v1's CreateResponse.workspace.
package legacyws

import "github.com/mcp-forge/mcp-forge/sdk/host"

// Header is the gRPC response header of SandboxService.Create holding the
// path.
const Header = "forge-legacy-workspace"

// Provider is a host.Sandbox that knows its containers' workspace paths
// (the core's host services, the shim's client of them, sdktest.LocalHost).
type Provider interface {
	LegacyWorkspace(containerID string) string
}

// Of is the host path of container id's workspace, "" if sb cannot say.
func Of(sb host.Sandbox, id string) string {
	if p, ok := sb.(Provider); ok {
		return p.LegacyWorkspace(id)
	}
	return ""
}
