package sandbox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/runtimetest"
)

func waivers(gs ...runtime.Guarantee) map[runtime.Guarantee]string {
	out := map[runtime.Guarantee]string{}
	for i, g := range gs {
		out[g] = "security.waive[" + string(rune('0'+i)) + "]"
	}
	return out
}

// Every guarantee, missing, refuses the create unless waived; the refusal is
// audited with the rule's and the guarantee's names before it returns, and
// nothing is created. A waived one lets the create go ahead, recorded in its
// audit line and said by every result's notice. The scripted fake runtime
// (runtimetest) lacks each guarantee in turn.
func TestGuaranteesFailClosedUnlessWaived(t *testing.T) {
	for _, g := range runtime.Guarantees {
		for _, waived := range []bool{false, true} {
			name := string(g) + "/missing"
			if waived {
				name = string(g) + "/waived"
			}
			t.Run(name, func(t *testing.T) {
				rt := runtimetest.New(runtime.ImageInfo{Names: []string{"mcp-forge/python:3.11"}})
				rt.Lack(g, "scripted")
				var waive []runtime.Guarantee
				if waived {
					waive = append(waive, g)
				}
				iso := ""
				if g == runtime.KernelIsolation {
					iso = runtime.IsolationGVisor // asked for by this setting only
				}
				m, rec := newIsolatedManager(t, rt, iso, waive...)
				id, err := m.Create(context.Background(), intent(m))
				if !waived {
					var ge *policy.GuaranteeError
					if !errors.As(err, &ge) || !strings.Contains(err.Error(), string(g)) || !strings.Contains(err.Error(), `security.waive = ["`+string(g)+`"]`) {
						t.Fatalf("want a refusal naming %s and its waiver, got %v", g, err)
					}
					if n := rt.Count("Create"); n != 0 {
						t.Fatalf("refused, yet %d containers were created", n)
					}
					if !slices.ContainsFunc(rec.entries, func(e audit.Entry) bool {
						return e.Details["rule"] == policy.RuleGuaranteeMissing && e.Details["guarantee"] == string(g) && !e.Success
					}) {
						t.Fatalf("no audit entry names rule %s and guarantee %s: %+v", policy.RuleGuaranteeMissing, g, rec.entries)
					}
					if n := m.GuaranteeNotice(); n != "" {
						t.Fatalf("a refused runtime gives a notice: %q", n)
					}
					return
				}
				if err != nil {
					t.Fatalf("waived %s: %v", g, err)
				}
				var created audit.Entry
				for _, e := range rec.entries {
					if e.Event == audit.ContainerCreate && e.Success && e.Details["container_id"] == id {
						created = e
					}
				}
				if w, _ := created.Details["waived"].([]string); !slices.Equal(w, []string{string(g)}) {
					t.Fatalf("create audited with waived %v, want [%s]: %+v", created.Details["waived"], g, created)
				}
				if n := m.GuaranteeNotice(); !strings.Contains(n, string(g)+" (scripted; waived by security.waive[0]: "+g.Waiving()+")") {
					t.Fatalf("notice %q does not name %s, its reason, its waiver and what it gives up", n, g)
				}
				if g == runtime.KernelIsolation && (created.Details["isolation"] != runtime.IsolationContainer || m.Isolation() != runtime.IsolationContainer) {
					t.Fatalf("gVisor waived and missing: created under %v, results say %q; want container for both", created.Details["isolation"], m.Isolation())
				}
			})
		}
	}
}

// Nothing missing: no notice, no waived field, even when the operator
// waived something the runtime enforces anyway.
func TestNoNoticeWhenEverythingIsEnforced(t *testing.T) {
	rt := &fakeRuntime{}
	m, rec := newTestManager(t, rt, runtime.Memory)
	if n := m.GuaranteeNotice(); n != "" {
		t.Fatalf("notice before any run: %q", n)
	}
	if _, err := m.Create(context.Background(), intent(m)); err != nil {
		t.Fatal(err)
	}
	if n := m.GuaranteeNotice(); n != "" {
		t.Fatalf("notice %q with every guarantee enforced", n)
	}
	for _, e := range rec.entries {
		if _, ok := e.Details["waived"]; ok {
			t.Fatalf("audit line records a waiver that gave nothing up: %+v", e)
		}
	}
}

// Several missing, one waived: the refusal names the others, each audited.
func TestRefusalNamesEveryMissingGuarantee(t *testing.T) {
	rt := &fakeRuntime{gaps: runtime.Report{}.With(
		runtime.Gap{Guarantee: runtime.Memory, Why: "v1", Fix: "f"}, runtime.Gap{Guarantee: runtime.Pids, Why: "v1", Fix: "f"},
		runtime.Gap{Guarantee: runtime.CPU, Why: "v1", Fix: "f"})}
	m, rec := newTestManager(t, rt, runtime.CPU)
	_, err := m.Create(context.Background(), intent(m))
	if err == nil || !strings.Contains(err.Error(), `security.waive = ["memory", "pids"]`) || rt.created != 0 {
		t.Fatalf("want a refusal naming memory and pids, got %v (created %d)", err, rt.created)
	}
	var v *policy.Violation
	if !errors.As(err, &v) || v.Rule != policy.RuleGuaranteeMissing {
		t.Fatalf("the refusal is no policy violation of rule %s (a plugin would see an internal error): %#v", policy.RuleGuaranteeMissing, err)
	}
	var named []string
	for _, e := range rec.entries {
		if e.Details["rule"] == policy.RuleGuaranteeMissing {
			named = append(named, e.Details["guarantee"].(string))
		}
	}
	if !slices.Equal(named, []string{"memory", "pids"}) {
		t.Fatalf("audited guarantees %v, want [memory pids]", named)
	}
}
