package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Every guarantee × {enforced, missing, missing and waived, enforced and
// waived}: only a missing guarantee nobody waived refuses; a waived gap is
// what the sandbox goes without; a waiver of what is enforced gives
// nothing up.
func TestGuaranteeDecisions(t *testing.T) {
	for _, g := range runtime.Guarantees {
		for _, c := range []struct {
			name            string
			missing, waived bool
			refused         bool
			without         int
		}{
			{"enforced", false, false, false, 0},
			{"missing", true, false, true, 0},
			{"missing, waived", true, true, false, 1},
			{"enforced, waived", false, true, false, 0},
		} {
			t.Run(string(g)+"/"+c.name, func(t *testing.T) {
				// Under gVisor isolation every guarantee applies.
				s := Settings{Waived: map[runtime.Guarantee]string{}, Isolation: runtime.IsolationGVisor}
				if c.waived {
					s.Waived[g] = "security.waive[0]"
				}
				var rep runtime.Report
				if c.missing {
					rep = rep.With(runtime.Gap{Guarantee: g, Why: "why", Fix: "fix"})
				}
				without, err := New(s, nil).Guarantees(rep)
				var ge *GuaranteeError
				if c.refused != errors.As(err, &ge) {
					t.Fatalf("refused = %v (%v), want %v", err != nil, err, c.refused)
				}
				if c.refused && (len(ge.Missing) != 1 || ge.Missing[0].Guarantee != g) {
					t.Fatalf("refusal names %+v, want %s", ge.Missing, g)
				}
				if len(without) != c.without {
					t.Fatalf("goes without %+v, want %d gaps", without, c.without)
				}
			})
		}
	}
}

// kernel-isolation is asked for by security.isolation = "gvisor" only: a
// runtime that cannot run gVisor refuses nothing under container isolation
// and shows no waiver in its results.
func TestKernelIsolationOnlyForGVisor(t *testing.T) {
	rep := runtime.Report{}.With(runtime.Gap{Guarantee: runtime.KernelIsolation, Why: "no runsc", Fix: "make setup"})
	for _, iso := range []string{"", runtime.IsolationContainer} {
		without, err := New(Settings{Isolation: iso}, nil).Guarantees(rep)
		if err != nil || len(without) != 0 {
			t.Errorf("isolation %q: refused %v, goes without %+v; want neither", iso, err, without)
		}
	}
	if _, err := New(Settings{Isolation: runtime.IsolationGVisor}, nil).Guarantees(rep); err == nil || !strings.Contains(err.Error(), "kernel-isolation") {
		t.Errorf("isolation gvisor without runsc: want a refusal naming kernel-isolation, got %v", err)
	}
}

// A runtime reporting a guarantee the core does not know is refused: read
// as nothing missing it would fail open.
func TestUnknownGuaranteeRefused(t *testing.T) {
	rep := runtime.Report{Gaps: []runtime.Gap{{Guarantee: "gpu-isolation", Why: "w", Fix: "f"}}}
	if _, err := New(Settings{}, nil).Guarantees(rep); err == nil || !strings.Contains(err.Error(), "gpu-isolation") {
		t.Fatalf("want a refusal naming the unknown guarantee, got %v", err)
	}
}

// The refusal names the rule, each missing guarantee with why and how to
// enforce it, and the waiver that would let sandboxes run; the notice names
// each waived gap, why, the setting that waived it and what it gives up.
func TestGuaranteeTexts(t *testing.T) {
	gaps := []runtime.Gap{
		{Guarantee: runtime.Memory, Why: "rootless Podman on cgroups v1 cannot enforce memory limits", Fix: "use cgroups v2"},
		{Guarantee: runtime.WorkspaceQuota, Why: "no loop devices", Fix: "run as root"},
	}
	err := (&GuaranteeError{Missing: gaps}).Error()
	for _, want := range []string{"rule guarantee-missing", "2 required guarantees",
		"memory: rootless Podman on cgroups v1 cannot enforce memory limits (to enforce it: use cgroups v2)",
		"workspace-quota: no loop devices (to enforce it: run as root)", `security.waive = ["memory", "workspace-quota"]`} {
		if !strings.Contains(err, want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	p := New(Settings{Waived: map[runtime.Guarantee]string{runtime.Memory: "security.enforce_resource_limits = false", runtime.WorkspaceQuota: "security.waive[0]"}}, nil)
	n := p.WaivedNotice(gaps)
	want := "guarantees not enforced for this run: memory (rootless Podman on cgroups v1 cannot enforce memory limits; waived by security.enforce_resource_limits = false: a run can use all the host's memory); " +
		"workspace-quota (no loop devices; waived by security.waive[0]: a workspace is bounded only by a periodic walk of its visible files, not by ENOSPC)"
	if n != want {
		t.Fatalf("notice\n%q\nwant\n%q", n, want)
	}
	if p.WaivedNotice(nil) != "" {
		t.Fatal("a notice with nothing waived")
	}
}
