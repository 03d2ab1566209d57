// Package legacyws carries the host path of a container's workspace to the
// one place that still needs it: the v1 compatibility path, which puts it
// in v1's CreateResponse.workspace for plugins built against API v1. No
// message of plugin API v2 holds the path, and no v2 component reads it
// (sdk/oneshot's resident runner dials its endpoint).
package legacyws

import "github.com/mcp-forge/mcp-forge/sdk/host"

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
