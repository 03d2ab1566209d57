package doctor

import (
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// One line per guarantee: enforced (ok), waived (warn, what runs give up),
// missing (FAIL, with the fix and the waiver).
func TestGuaranteeLines(t *testing.T) {
	rep := runtime.Report{}.With(runtime.Gap{Guarantee: runtime.Memory, Why: "cgroups v1", Fix: "use cgroups v2"},
		runtime.Gap{Guarantee: runtime.Pids, Why: "cgroups v1", Fix: "use cgroups v2"})
	lines := guaranteeLines(rep, map[runtime.Guarantee]string{runtime.Pids: "security.waive[0]", runtime.Seccomp: "security.waive[1]"}, runtime.IsolationGVisor)
	if len(lines) != len(runtime.Guarantees) {
		t.Fatalf("%d lines for %d guarantees", len(lines), len(runtime.Guarantees))
	}
	byName := map[string]Result{}
	for _, l := range lines {
		byName[l.Name] = l
	}
	for _, c := range []struct {
		name   string
		status Status
		detail string
		fix    string
	}{
		{"guarantee memory", Fail, "missing: cgroups v1; every sandbox is refused", `use cgroups v2; or waive it: security.waive = ["memory"] (then a run can use all the host's memory)`},
		{"guarantee pids", Warn, "waived by security.waive[0]: cgroups v1; runs go without it (a run can fork without bound", "use cgroups v2"},
		{"guarantee seccomp", OK, "enforced (the waiver in security.waive[1] is not needed here)", ""},
		{"guarantee no-network", OK, "enforced", ""},
	} {
		l := byName[c.name]
		if l.Status != c.status || !strings.Contains(l.Detail, c.detail) || l.Fix != c.fix {
			t.Errorf("%s = %+v, want %s, detail containing %q, fix %q", c.name, l, c.status, c.detail, c.fix)
		}
	}
}
