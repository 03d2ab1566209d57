package policy

import (
	"maps"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Intent is what a caller may choose about a container. Everything else is
// fixed by Harden: there is no way to ask for privileges, capabilities,
// devices, host namespaces or arbitrary host paths.
type Intent struct {
	Name      string
	Image     string
	Command   []string
	Env       map[string]string
	WorkDir   string
	Labels    map[string]string // keys get the io.mcp-forge. prefix if missing
	Mounts    []runtime.Mount   // host sources inside volumes.base_path
	Limits    runtime.Limits    // already resolved by ResolveLimits
	SessionID string
	Workspace string // the workspace directory's name; SessionID if empty
	// WorkspacePath is the workspace's host directory (runtime.Spec's).
	WorkspacePath string
	Plugin        string
	Instance      string
	// WarmUp: a CPU allowance until the plugin clamps the container
	// (host.Intent.WarmUp); the manager grants it, not Harden.
	WarmUp bool
	// Isolation the container runs under at least (a tenant's, from its
	// run's sandbox grant); "": the configuration's. It only raises.
	Isolation string
	// Endpoints: as runtime.Spec's.
	Endpoints int
}

// Harden turns an intent into a full spec with every required setting, then
// checks it: a bug here is caught by CheckCreate rather than run.
func (p *Policy) Harden(in Intent) (runtime.Spec, error) {
	labels := map[string]string{}
	for k, v := range in.Labels {
		if !strings.HasPrefix(k, "io.mcp-forge.") {
			k = "io.mcp-forge." + k
		}
		labels[k] = v
	}
	labels[runtime.LabelManaged] = "true"
	labels[runtime.LabelInstance] = in.Instance
	labels[runtime.LabelPlugin] = in.Plugin
	if in.SessionID != "" {
		labels[runtime.LabelSession] = in.SessionID
	}
	network := "none"
	userns := p.s.UserNS
	if userns == "host" {
		userns = ""
	}
	s := runtime.Spec{
		Name:            in.Name,
		Image:           in.Image,
		Command:         in.Command,
		Env:             maps.Clone(in.Env),
		WorkDir:         in.WorkDir,
		Labels:          labels,
		User:            p.s.User,
		Network:         network,
		ReadOnlyRoot:    true,
		TmpfsSize:       p.s.TmpfsMax,
		NoNewPrivileges: true,
		SeccompProfile:  p.s.Seccomp,
		Isolation:       p.isolation(),
		CapDrop:         []string{"ALL"},
		UserNS:          userns,
		UserNSStart:     p.s.UserNSStart,
		Mounts:          in.Mounts,
		Init:            true,
		Limits:          in.Limits,
		SessionID:       in.SessionID,
		Workspace:       in.Workspace,
		WorkspacePath:   in.WorkspacePath,
		Plugin:          in.Plugin,
		Endpoints:       in.Endpoints,
	}
	switch in.Isolation {
	case "", runtime.IsolationContainer:
	case runtime.IsolationGVisor:
		s.Isolation = in.Isolation // a tenant's requirement raises the configuration's
	default:
		return s, violation(RuleIsolation, "unknown isolation %q", in.Isolation)
	}
	if s.Isolation == runtime.IsolationGVisor {
		s.SeccompProfile = p.s.SeccompGVisor
	}
	return s, p.CheckCreate(s)
}

// Isolation is what the configuration runs every sandbox under.
func (p *Policy) Isolation() string { return p.isolation() }

func (p *Policy) isolation() string {
	if p.s.Isolation == "" {
		return runtime.IsolationContainer
	}
	return p.s.Isolation
}

// RuleIsolation names the refusal of a sandbox under a weaker isolation than
// the configuration's.
const RuleIsolation = "isolation"

// checkIsolation refuses a spec whose isolation is weaker than the
// configuration's: a container where gVisor is required (a bug, or a
// waiver that was not applied) never runs. gVisor is never too weak.
func (p *Policy) checkIsolation(s runtime.Spec) error {
	if s.Isolation == p.isolation() || s.Isolation == runtime.IsolationGVisor {
		return nil
	}
	if s.Isolation == runtime.IsolationContainer && p.s.Waived[runtime.KernelIsolation] != "" {
		return nil // the runtime cannot run gVisor here, and the operator waived it
	}
	return violation(RuleIsolation, "the sandbox would run under isolation %q; security.isolation is %q", s.Isolation, p.isolation())
}

// Downgrade is s under container isolation: for a runtime that lacks
// kernel-isolation when the operator waived it.
func (p *Policy) Downgrade(s runtime.Spec) runtime.Spec {
	s.Isolation = runtime.IsolationContainer
	s.SeccompProfile = p.s.Seccomp
	return s
}
