package sandbox

import "errors"

// LimitsNotice is what every result must say when its limits were not
// enforced: the runtime cannot enforce them (rootless Podman on cgroups v1)
// and security.enforce_resource_limits = false let the run go ahead anyway.
// It is "" when limits are enforced, or before the runtime was asked.
func (m *Manager) LimitsNotice() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.checked || !m.unenforced || m.enforce {
		return ""
	}
	return LimitsNotEnforced
}

// LimitsNotEnforced is the notice of a run whose memory, CPU and pids limits
// were not enforced.
const LimitsNotEnforced = "resource limits not enforced: rootless Podman on cgroups v1 cannot enforce memory, CPU or pids limits, and security.enforce_resource_limits = false let this run go ahead unconfined by them (move the host to cgroups v2 with systemd delegation of the memory, pids and cpu controllers, or run as root)"

// RuleLimitsUnenforceable names the refusal of a run whose limits cannot be
// enforced, in errors and in the audit log.
const RuleLimitsUnenforceable = "enforce_resource_limits"

// ErrLimitsUnenforceable refuses every run while the runtime cannot enforce
// limits and security.enforce_resource_limits is true (fail closed).
var ErrLimitsUnenforceable = errors.New("resource limits cannot be enforced (rule " + RuleLimitsUnenforceable + "): rootless Podman on cgroups v1 ignores memory, CPU and pids limits. " +
	"Enable them with cgroups v2 and systemd delegation of the cpu, memory and pids controllers to your user " +
	"(boot with systemd.unified_cgroup_hierarchy=1; `systemctl edit user@.service` with [Service] Delegate=cpu cpuset io memory pids), " +
	"or run as root, or set security.enforce_resource_limits = false to run without them (every result then says so)")

// refusalDetails tags an audited refusal with the rule that made it.
func refusalDetails(err error) map[string]any {
	if errors.Is(err, ErrLimitsUnenforceable) {
		return map[string]any{"rule": RuleLimitsUnenforceable}
	}
	return nil
}
