package doctor

import (
	"context"
	"fmt"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Guarantees reports each runtime guarantee on this host: enforced, waived
// (and what runs give up), or missing (every sandbox is refused) with the
// fix and what waiving it would mean.
func Guarantees(rt runtime.Guarantor, cfg config.Config) Check {
	return func(ctx context.Context) []Result {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		rep, err := rt.Guarantees(ctx)
		if err == nil {
			err = rep.Check()
		}
		if err != nil {
			return []Result{{"guarantees", Fail, "cannot tell what the runtime enforces: " + err.Error(), "run `make setup` (installs Podman and starts its API service)"}}
		}
		pol := policy.New(policy.FromConfig(cfg), nil)
		return guaranteeLines(pol.Effective(rep), policy.Waivers(cfg), pol.Isolation())
	}
}

func guaranteeLines(rep runtime.Report, waived map[runtime.Guarantee]string, isolation string) []Result {
	var out []Result
	for _, g := range runtime.Guarantees {
		name := "guarantee " + string(g)
		gap, missing := rep.Gap(g)
		by, isWaived := waived[g]
		switch {
		case g == runtime.KernelIsolation && isolation != runtime.IsolationGVisor && missing:
			out = append(out, Result{name, OK, fmt.Sprintf("not required (security.isolation = %q); gVisor could not run here: %s", isolation, gap.Why), ""})
		case g == runtime.KernelIsolation && isolation != runtime.IsolationGVisor:
			out = append(out, Result{name, OK, fmt.Sprintf("not required (security.isolation = %q); gVisor can run here: set security.isolation = \"gvisor\" for a second kernel between the code and the host", isolation), ""})
		case !missing && isWaived:
			out = append(out, Result{name, OK, "enforced (the waiver in " + by + " is not needed here)", ""})
		case !missing:
			out = append(out, Result{name, OK, "enforced", ""})
		case isWaived:
			out = append(out, Result{name, Warn, fmt.Sprintf("waived by %s: %s; runs go without it (%s) and every result says so", by, gap.Why, g.Waiving()), gap.Fix})
		default:
			out = append(out, Result{name, Fail, "missing: " + gap.Why + "; every sandbox is refused",
				fmt.Sprintf("%s; or waive it: security.waive = [%q] (then %s)", gap.Fix, g, g.Waiving())})
		}
	}
	return out
}
