package podman

import "github.com/mcp-forge/mcp-forge/core/runtime"

// Capabilities implements runtime.Capable: Podman's are the zero value.
// Its sandboxes mount the host's workspaces, a watchdog on the host binds
// them, its images are built and looked up by the service itself, and a
// core on one host has no replicas to coordinate with.
func (c *Client) Capabilities() runtime.Capabilities { return runtime.Capabilities{} }
