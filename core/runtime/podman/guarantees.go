package podman

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containers/podman/v5/pkg/bindings/system"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// hostFacts are what the guarantees of a Podman service depend on, read
// from the service (podman info) and, for a local one, from this host.
type hostFacts struct {
	rootless    bool
	cgroupsV2   bool
	controllers []string // cgroup controllers the service can use ([] rootless on cgroups v1)
	seccomp     bool     // the service applies seccomp profiles
	local       bool     // the service runs on this host (a unix socket)
	kmsg        bool     // this process can read the kernel log (OOM kills on cgroups v1)
	userns      bool     // user namespaces can be created (max_user_namespaces > 0)
}

// delegate is how to give a rootless service its cgroup controllers.
const delegate = "boot with systemd.unified_cgroup_hierarchy=1 (cgroups v2), then as root `systemctl edit user@.service` with [Service] Delegate=cpu cpuset io memory pids and log in again; or run the server as root"

// gaps are the guarantees a service with facts f cannot enforce. Network,
// read-only root and the open-files rlimit are set on every container by
// the spec Podman is given, rootless or not; the lifetime bound is the
// core's watchdog (serve refuses to start without it), which removes the
// containers of a core that died.
func (f hostFacts) gaps() []runtime.Gap {
	var out []runtime.Gap
	for _, c := range []struct {
		g          runtime.Guarantee
		controller string
	}{{runtime.Memory, "memory"}, {runtime.CPU, "cpu"}, {runtime.Pids, "pids"}} {
		if slices.Contains(f.controllers, c.controller) {
			continue
		}
		why := "the Podman service cannot use the " + c.controller + " cgroup controller"
		if f.rootless && !f.cgroupsV2 {
			why = "rootless Podman on cgroups v1 cannot enforce " + c.controller + " limits"
		} else if f.rootless {
			why = "the " + c.controller + " cgroup controller is not delegated to the user running rootless Podman"
		}
		out = append(out, runtime.Gap{Guarantee: c.g, Why: why, Fix: delegate})
	}
	if !f.seccomp {
		out = append(out, runtime.Gap{Guarantee: runtime.Seccomp, Why: "the Podman service reports seccomp disabled (a kernel without CONFIG_SECCOMP, or Podman built without it)",
			Fix: "run on a kernel with seccomp and a Podman built with it (`podman info --format {{.Host.Security.SECCOMPEnabled}}` says true)"})
	}
	if !f.userns {
		out = append(out, runtime.Gap{Guarantee: runtime.UserNamespace, Why: "user namespaces cannot be created on this host (user.max_user_namespaces = 0)",
			Fix: "as root: `sysctl -w user.max_user_namespaces=15000` (and in /etc/sysctl.d/)"})
	}
	// On cgroups v2 Podman reads OOM kills from the container's cgroup; on
	// v1 only the kernel log tells (oom.go), which needs a local service and
	// a process allowed to read it.
	if !f.cgroupsV2 && !(f.local && f.kmsg) {
		why := "cgroups v1 and the kernel log (/dev/kmsg) cannot be read by this process (kernel.dmesg_restrict, or not root)"
		if !f.local {
			why = "cgroups v1 and a remote Podman service: its kernel log is out of reach"
		}
		out = append(out, runtime.Gap{Guarantee: runtime.OOMDetection, Why: why,
			Fix: "move the host to cgroups v2, or run the server as root on the Podman host"})
	}
	return out
}

// Guarantees reports what this service enforces on this host, measured:
// podman info for the cgroup controllers and seccomp, this host for the
// kernel log and user namespaces. The workspace quota is not Podman's: the
// core's workspaces carry it (core/fsquota), and the core adds its gap.
func (c *Client) Guarantees(ctx context.Context) (runtime.Report, error) {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return runtime.Report{}, err
	}
	info, err := system.Info(cx, nil)
	if err != nil {
		return runtime.Report{}, c.fail("", "podman info", err)
	}
	c.mu.Lock()
	local := strings.HasPrefix(c.socket, "unix://")
	c.mu.Unlock()
	f := hostFacts{
		rootless: info.Host.Security.Rootless, cgroupsV2: info.Host.CgroupsVersion == "v2",
		controllers: info.Host.CgroupControllers, seccomp: info.Host.Security.SECCOMPEnabled,
		local: local, kmsg: local && canRead("/dev/kmsg"), userns: !local || info.Host.Security.Rootless || usernsAllowed(),
	}
	return c.report(f), nil
}

// report is what a service with facts f enforces for this client: its
// gaps, and gVisor's.
func (c *Client) report(f hostFacts) runtime.Report {
	rep := runtime.Report{}.With(f.gaps()...)
	st := rootlessState{known: true, rootless: f.rootless, controllers: f.controllers}
	if gap, ok := c.gvisorGap(st); ok {
		return rep.With(gap)
	}
	// The limits gVisor's sandboxes go without (waived, or gVisor would
	// be refused): declared for the service, runc's sandboxes included,
	// rather than claimed for gVisor's.
	lost, _ := c.gvisor.decide(st)
	return rep.With(lost...)
}

// canRead reports whether path opens for reading (without blocking on it).
func canRead(path string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// usernsAllowed reads user.max_user_namespaces; a kernel without the knob
// predates the limit and allows them.
func usernsAllowed() bool {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil {
		return os.IsNotExist(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err != nil || n > 0
}
