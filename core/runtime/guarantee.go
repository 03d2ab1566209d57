package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Guarantee is one property of a sandbox that a runtime may or may not be
// able to enforce on a given host. The policy requires every one of them
// unless the operator waives it by name (security.waive).
type Guarantee string

// The guarantees, by the names the configuration, the audit log and doctor
// use.
const (
	NoNetwork      Guarantee = "no-network"      // a sandbox has no network unless security.allow_network
	ReadOnlyRoot   Guarantee = "read-only-root"  // the image's filesystem cannot be written
	Seccomp        Guarantee = "seccomp"         // MCP-Forge's seccomp profile filters system calls
	UserNamespace  Guarantee = "user-namespace"  // container ids are not host ids
	Memory         Guarantee = "memory"          // the memory limit is enforced (OOM kill past it)
	CPU            Guarantee = "cpu"             // the CPU quota is enforced
	Pids           Guarantee = "pids"            // the process count is bounded (no fork bomb)
	OpenFiles      Guarantee = "open-files"      // the open-files rlimit is set
	WorkspaceQuota Guarantee = "workspace-quota" // writes past the workspace quota fail with ENOSPC
	OOMDetection   Guarantee = "oom-detection"   // an OOM kill is told apart from another SIGKILL
	LifetimeBound  Guarantee = "lifetime-bound"  // the sandbox dies if the core dies
	// KernelIsolation: sandboxed code talks to a second kernel (gVisor's
	// Sentry), not the host's. Required only where isolation is "gvisor".
	KernelIsolation Guarantee = "kernel-isolation"
)

// Guarantees lists every guarantee, in the order doctor reports them.
var Guarantees = []Guarantee{NoNetwork, ReadOnlyRoot, Seccomp, UserNamespace, Memory, CPU, Pids, OpenFiles, WorkspaceQuota, OOMDetection, LifetimeBound, KernelIsolation}

// ParseGuarantee reads a guarantee's name.
func ParseGuarantee(name string) (Guarantee, bool) {
	g := Guarantee(name)
	return g, slices.Contains(Guarantees, g)
}

// GuaranteeNames is every name, for messages that list the valid ones.
func GuaranteeNames() string {
	names := make([]string, len(Guarantees))
	for i, g := range Guarantees {
		names[i] = string(g)
	}
	return strings.Join(names, ", ")
}

// Waiving says what a run gives up when g is waived and missing: what the
// notice of every such result and doctor say.
func (g Guarantee) Waiving() string {
	switch g {
	case NoNetwork:
		return "sandboxed code may reach the network"
	case ReadOnlyRoot:
		return "sandboxed code may modify the image's files for the container's life"
	case Seccomp:
		return "system calls are not filtered: the kernel's whole surface is reachable"
	case UserNamespace:
		return "container ids are host ids: an escape runs as a host account"
	case Memory:
		return "a run can use all the host's memory"
	case CPU:
		return "a run can use every CPU of the host"
	case Pids:
		return "a run can fork without bound (a fork bomb reaches the host)"
	case OpenFiles:
		return "a run can open files up to the host's limits"
	case WorkspaceQuota:
		return "a workspace is bounded only by a periodic walk of its visible files, not by ENOSPC"
	case OOMDetection:
		return "an out-of-memory kill is reported as a plain SIGKILL"
	case LifetimeBound:
		return "sandboxes may outlive a core that dies"
	case KernelIsolation:
		return "sandboxed code runs on the host's kernel (a container), not gVisor's: one kernel bug away from the host"
	}
	return "unknown guarantee"
}

// Gap is a guarantee a runtime cannot enforce on this host: why, measured,
// and what would give it.
type Gap struct {
	Guarantee Guarantee
	Why       string
	Fix       string
}

// Report is what a runtime enforces on this host: every guarantee but its
// gaps.
type Report struct {
	Gaps []Gap
}

// Gap returns the gap of g, if g is not enforced.
func (r Report) Gap(g Guarantee) (Gap, bool) {
	for _, x := range r.Gaps {
		if x.Guarantee == g {
			return x, true
		}
	}
	return Gap{}, false
}

// Enforces reports whether g is enforced.
func (r Report) Enforces(g Guarantee) bool { _, ok := r.Gap(g); return !ok }

// With is r with gaps added; a gap of a guarantee already missing replaces
// it (the later measure is the more specific one).
func (r Report) With(gaps ...Gap) Report {
	out := Report{Gaps: slices.Clone(r.Gaps)}
	for _, g := range gaps {
		out.Gaps = slices.DeleteFunc(out.Gaps, func(x Gap) bool { return x.Guarantee == g.Guarantee })
		out.Gaps = append(out.Gaps, g)
	}
	slices.SortFunc(out.Gaps, func(a, b Gap) int {
		return slices.Index(Guarantees, a.Guarantee) - slices.Index(Guarantees, b.Guarantee)
	})
	return out
}

// Check refuses a report naming an unknown guarantee (a runtime bug the
// policy must not read as "enforced").
func (r Report) Check() error {
	for _, g := range r.Gaps {
		if _, ok := ParseGuarantee(string(g.Guarantee)); !ok {
			return fmt.Errorf("the runtime reports a gap in unknown guarantee %q (known: %s)", g.Guarantee, GuaranteeNames())
		}
	}
	return nil
}

// Guarantor reports the guarantees a runtime enforces on this host,
// measured where it can be.
type Guarantor interface {
	Guarantees(ctx context.Context) (Report, error)
}
