package sandbox

import (
	"context"
	"errors"
	"slices"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// checkGuarantees asks the runtime, once, what it enforces and lets the
// policy decide: the gaps a sandbox goes without (all waived), or the
// refusal of every create while a required guarantee is missing (fail
// closed). A refusal is audited before it is returned, one entry per
// missing guarantee, each with the rule's name and the guarantee's.
func (m *Manager) checkGuarantees(ctx context.Context, plugin, session string) ([]runtime.Gap, error) {
	m.gmu.Lock()
	defer m.gmu.Unlock()
	if !m.checked {
		rep, err := m.rt.Guarantees(ctx)
		if err != nil {
			return nil, err // not cached: the service may come up later
		}
		m.checked = true
		m.waived, m.refusal = m.pol.Guarantees(rep)
	}
	if m.refusal == nil {
		return m.waived, nil
	}
	var ge *policy.GuaranteeError
	if !errors.As(m.refusal, &ge) {
		m.audit.Record(audit.Entry{Event: audit.ContainerCreate, Severity: audit.Error, SessionID: session, Error: m.refusal.Error(),
			Details: map[string]any{"plugin": plugin, "rule": policy.RuleGuaranteeMissing}})
		return nil, m.refusal
	}
	for _, g := range ge.Missing {
		m.audit.Record(audit.Entry{Event: audit.ContainerCreate, Severity: audit.Error, SessionID: session, Error: m.refusal.Error(),
			Details: map[string]any{"plugin": plugin, "rule": policy.RuleGuaranteeMissing, "guarantee": string(g.Guarantee), "why": g.Why}})
	}
	return nil, m.refusal
}

// GuaranteeNotice is what every result must say while sandboxes run
// without waived guarantees (policy.WaivedNotice); "" when none is missing,
// or before the runtime was asked.
func (m *Manager) GuaranteeNotice() string {
	m.gmu.Lock()
	defer m.gmu.Unlock()
	if !m.checked || m.refusal != nil {
		return ""
	}
	return m.pol.WaivedNotice(m.waived)
}

// Isolation is what sandboxes run under: the configured isolation, or
// container where kernel-isolation is waived and missing ("" before the
// runtime was asked, or while it refuses).
func (m *Manager) Isolation() string {
	m.gmu.Lock()
	defer m.gmu.Unlock()
	if !m.checked || m.refusal != nil {
		return ""
	}
	if slices.ContainsFunc(m.waived, func(g runtime.Gap) bool { return g.Guarantee == runtime.KernelIsolation }) {
		return runtime.IsolationContainer
	}
	return m.pol.Isolation()
}

// Waived are the gaps sandboxes go without (nil before the runtime was
// asked).
func (m *Manager) Waived() []runtime.Gap {
	m.gmu.Lock()
	defer m.gmu.Unlock()
	return m.waived
}

func gapNames(gaps []runtime.Gap) []string {
	out := make([]string, len(gaps))
	for i, g := range gaps {
		out[i] = string(g.Guarantee)
	}
	return out
}
