package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Two settings older than security.waive waive guarantees too; they stay as
// aliases so that existing configurations mean what they meant.
var aliases = []struct {
	key   string
	on    func(config.Config) bool
	waive []runtime.Guarantee
}{
	{"security.enforce_resource_limits = false", func(c config.Config) bool { return !c.Security.EnforceResourceLimits }, []runtime.Guarantee{runtime.Memory, runtime.CPU, runtime.Pids}},
	{"volumes.enforce_quota = false", func(c config.Config) bool { return !c.Volumes.EnforceQuota }, []runtime.Guarantee{runtime.WorkspaceQuota}},
}

// Two settings turn a guarantee off for every sandbox although the runtime
// could enforce it: the setting is both the gap and its waiver, so every
// result says what it means and doctor does not call it enforced.
var turnedOff = []struct {
	key string
	on  func(config.Config) bool
	gap runtime.Gap
}{
	{"security.allow_network = true", func(c config.Config) bool { return c.Security.AllowNetwork },
		runtime.Gap{Guarantee: runtime.NoNetwork, Why: "sandboxes are given a network by configuration", Fix: "set security.allow_network = false"}},
	{`security.userns = "host"`, func(c config.Config) bool { return c.Security.UserNS == "host" },
		runtime.Gap{Guarantee: runtime.UserNamespace, Why: "sandboxes share the host user namespace by configuration", Fix: `set security.userns = "private"`}},
}

// configGaps are the guarantees c turns off.
func configGaps(c config.Config) []runtime.Gap {
	var out []runtime.Gap
	for _, t := range turnedOff {
		if t.on(c) {
			out = append(out, t.gap)
		}
	}
	return out
}

// Waivers are the guarantees c waives, each with the setting that waives it
// (security.waive[N], or an alias), for notices, the audit log and doctor.
func Waivers(c config.Config) map[runtime.Guarantee]string {
	out := map[runtime.Guarantee]string{}
	for i, name := range c.Security.Waive {
		if g, ok := runtime.ParseGuarantee(name); ok {
			out[g] = fmt.Sprintf("security.waive[%d]", i)
		}
	}
	for _, a := range aliases {
		if !a.on(c) {
			continue
		}
		for _, g := range a.waive {
			if _, ok := out[g]; !ok {
				out[g] = a.key
			}
		}
	}
	for _, t := range turnedOff {
		if _, ok := out[t.gap.Guarantee]; !ok && t.on(c) {
			out[t.gap.Guarantee] = t.key
		}
	}
	return out
}

// LimitsWaived says whether c waives memory, cpu and pids, all three: what
// a rootless service on cgroups v1 lacks, and what gVisor's sandboxes go
// without under a rootless service (runsc --ignore-cgroups).
func LimitsWaived(c config.Config) bool {
	w := Waivers(c)
	for _, g := range []runtime.Guarantee{runtime.Memory, runtime.CPU, runtime.Pids} {
		if _, ok := w[g]; !ok {
			return false
		}
	}
	return true
}

// AliasNotes says, for each old setting c uses, its current form.
func AliasNotes(c config.Config) []string {
	var out []string
	for _, a := range aliases {
		if !a.on(c) {
			continue
		}
		names := make([]string, len(a.waive))
		for i, g := range a.waive {
			names[i] = fmt.Sprintf("%q", g)
		}
		out = append(out, fmt.Sprintf("%s is the old form of security.waive = [%s]: it still works; the current form is security.waive", a.key, strings.Join(names, ", ")))
	}
	return out
}

// checkWaive checks security.waive: known names, each once.
func checkWaive(names []string) config.Errors {
	var errs config.Errors
	for i, name := range names {
		p := fmt.Sprintf("security.waive[%d]", i)
		if _, ok := runtime.ParseGuarantee(name); !ok {
			errs = append(errs, config.FieldError{Path: p, Msg: fmt.Sprintf("%q is not a guarantee; use one of %s", name, runtime.GuaranteeNames())})
		} else if j := slices.Index(names, name); j < i {
			errs = append(errs, config.FieldError{Path: p, Msg: fmt.Sprintf("%q is already waived by security.waive[%d]; name it once", name, j)})
		}
	}
	return errs
}
