package policy

import (
	"fmt"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// RuleGuaranteeMissing names the refusal of a sandbox whose runtime cannot
// enforce a guarantee the operator did not waive, in errors and in the
// audit log (with details.guarantee naming which).
const RuleGuaranteeMissing = "guarantee-missing"

// GuaranteeError refuses a sandbox: the runtime does not enforce Missing on
// this host and none of them is waived (fail closed).
type GuaranteeError struct {
	Missing []runtime.Gap
}

func (e *GuaranteeError) Error() string {
	names := make([]string, len(e.Missing))
	parts := make([]string, len(e.Missing))
	for i, g := range e.Missing {
		names[i] = fmt.Sprintf("%q", g.Guarantee)
		parts[i] = fmt.Sprintf("%s: %s (to enforce it: %s)", g.Guarantee, g.Why, g.Fix)
	}
	return fmt.Sprintf("sandbox refused (rule %s): the runtime cannot enforce %s on this host. %s. "+
		"Or let sandboxes run without it: security.waive = [%s] in forge.toml (every result then says so; `mcp-forge doctor` says what each waiver gives up)",
		RuleGuaranteeMissing, pluralGuarantee(len(e.Missing)), strings.Join(parts, "; "), strings.Join(names, ", "))
}

// Unwrap makes the refusal a policy violation for callers that classify
// errors (a plugin sees a policy refusal, not an internal error).
func (e *GuaranteeError) Unwrap() error {
	return &Violation{Rule: RuleGuaranteeMissing, Detail: e.Error()}
}

func pluralGuarantee(n int) string {
	if n == 1 {
		return "a required guarantee"
	}
	return fmt.Sprintf("%d required guarantees", n)
}

// Guarantees decides what a sandbox gets on a runtime reporting rep: every
// guarantee is required but those waived. It returns the gaps the sandbox
// goes without (missing and waived), or a *GuaranteeError naming every
// missing guarantee that is not waived. An unknown guarantee in rep is
// refused too: read as enforced it would fail open.
func (p *Policy) Guarantees(rep runtime.Report) ([]runtime.Gap, error) {
	if err := rep.Check(); err != nil {
		return nil, err
	}
	rep = p.Effective(rep)
	var waived, missing []runtime.Gap
	for _, g := range rep.Gaps {
		if g.Guarantee == runtime.KernelIsolation && p.isolation() != runtime.IsolationGVisor {
			continue // asked for by security.isolation = "gvisor" only
		}
		if _, ok := p.s.Waived[g.Guarantee]; ok {
			waived = append(waived, g)
		} else {
			missing = append(missing, g)
		}
	}
	if len(missing) > 0 {
		return nil, &GuaranteeError{Missing: missing}
	}
	return waived, nil
}

// Effective is what sandboxes get on a runtime reporting rep: its gaps, and
// those the configuration turns off.
func (p *Policy) Effective(rep runtime.Report) runtime.Report {
	return rep.With(p.s.TurnedOff...)
}

// WaivedNotice is what every result of a run that goes without gaps (all
// waived) says: which guarantees, why they are missing, which setting
// waived them and what that gives up. "" for none.
func (p *Policy) WaivedNotice(gaps []runtime.Gap) string {
	if len(gaps) == 0 {
		return ""
	}
	parts := make([]string, len(gaps))
	for i, g := range gaps {
		parts[i] = fmt.Sprintf("%s (%s; waived by %s: %s)", g.Guarantee, g.Why, p.s.Waived[g.Guarantee], g.Guarantee.Waiving())
	}
	return "guarantees not enforced for this run: " + strings.Join(parts, "; ")
}
