package policy

import "github.com/mcp-forge/mcp-forge/core/runtime"

// checkSeccomp requires MCP-Forge's own seccomp profile on every container.
// Without it Podman applies its default profile, which lets sandboxed code
// create user namespaces, ptrace and use the kernel keyring; a spec that
// lacks it (a bug, or a caller building specs by hand) is refused, not run.
func (p *Policy) checkSeccomp(s runtime.Spec) error {
	switch {
	case p.s.Seccomp == "":
		return violation("seccomp", "no seccomp profile is configured, so no container may run (the core installs MCP-Forge's profile at start; this is a bug)")
	case s.SeccompProfile == "" || s.SeccompProfile == "unconfined":
		return violation("seccomp", "the container has no seccomp profile; every sandbox runs under MCP-Forge's profile %s", p.s.Seccomp)
	case s.Isolation == runtime.IsolationGVisor && s.SeccompProfile != p.s.SeccompGVisor:
		return violation("seccomp", "seccomp profile %q is not MCP-Forge's profile for gVisor %s", s.SeccompProfile, p.s.SeccompGVisor)
	case s.Isolation != runtime.IsolationGVisor && s.SeccompProfile != p.s.Seccomp:
		return violation("seccomp", "seccomp profile %q is not MCP-Forge's profile %s", s.SeccompProfile, p.s.Seccomp)
	}
	return nil
}
