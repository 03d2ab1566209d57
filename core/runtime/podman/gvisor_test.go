package podman

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containers/podman/v5/pkg/specgen"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	spec "github.com/opencontainers/runtime-spec/specs-go"
)

// Only the states of containers Podman says are gone are swept; a failure
// to ask keeps a state, and a file of another shape is left alone.
func TestSweepStates(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{"aa_sandbox:aa.state", "aa_sandbox:aa.lock", "bb_sandbox:cc.state", "dd_sandbox:dd.state", "ee_sandbox:ee.state", "null-netns", "odd.state"} {
		if err := os.WriteFile(filepath.Join(root, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	known := map[string]bool{"aa": true}
	var removed []string
	gone := sweepStates(root, func(id string) (bool, error) {
		if id == "ee" {
			return false, errors.New("the service did not answer")
		}
		return known[id], nil
	}, func(id string) error {
		removed = append(removed, id)
		if id == "dd" {
			return errors.New("runsc delete failed")
		}
		return nil
	})
	if strings.Join(gone, ",") != "cc" || strings.Join(removed, ",") != "cc,dd" {
		t.Fatalf("swept %v (removal asked for %v); want cc (and cc, dd asked)", gone, removed)
	}
}

// gVisor under a rootless service runs with --ignore-cgroups: allowed where
// that gives up no limit the service enforces (rootless on cgroups v1, or
// v2 without delegation: those limits are already the service's gaps),
// refused where it would (delegated controllers) unless the operator
// waived the limits, and then every limit gVisor's sandboxes lose is a gap.
// A server whose own kind (root or not) differs from the service's would
// start its gVisor service on another storage: refused.
func TestGVisorRootlessReport(t *testing.T) {
	all := []string{"cpuset", "cpu", "io", "memory", "pids"}
	v1Rootless := hostFacts{rootless: true, seccomp: true, local: true, userns: true}
	v2Delegated := hostFacts{rootless: true, cgroupsV2: true, controllers: all, seccomp: true, local: true, userns: true}
	v2NoDelegation := hostFacts{rootless: true, cgroupsV2: true, controllers: []string{}, seccomp: true, local: true, userns: true}
	v2PidsOnly := hostFacts{rootless: true, cgroupsV2: true, controllers: []string{"pids"}, seccomp: true, local: true, userns: true}
	rootful := hostFacts{controllers: all, seccomp: true, local: true, kmsg: true, userns: true}
	type gap struct {
		g   runtime.Guarantee
		why string // a part of its Why
	}
	for _, c := range []struct {
		name           string
		f              hostFacts
		coreRootless   bool
		limitsWaived   bool
		want           []gap
		wantIgnoreCgrp bool
	}{
		{"rootful service, root core", rootful, false, false, nil, false},
		{"rootless v1: the limits are the service's gaps already", v1Rootless, true, false,
			[]gap{{runtime.Memory, "cgroups v1"}, {runtime.CPU, "cgroups v1"}, {runtime.Pids, "cgroups v1"}, {runtime.OOMDetection, "kernel log"}}, true},
		{"rootless v1, limits waived: the same", v1Rootless, true, true,
			[]gap{{runtime.Memory, "cgroups v1"}, {runtime.CPU, "cgroups v1"}, {runtime.Pids, "cgroups v1"}, {runtime.OOMDetection, "kernel log"}}, true},
		{"rootless v2 without delegation", v2NoDelegation, true, false,
			[]gap{{runtime.Memory, "not delegated"}, {runtime.CPU, "not delegated"}, {runtime.Pids, "not delegated"}}, true},
		{"rootless v2 delegated: gVisor would lose enforced limits", v2Delegated, true, false,
			[]gap{{runtime.KernelIsolation, "would give up the memory, cpu, pids limits"}}, true},
		{"rootless v2 delegated, limits waived: gVisor runs without them", v2Delegated, true, true,
			[]gap{{runtime.Memory, "--ignore-cgroups"}, {runtime.CPU, "--ignore-cgroups"}, {runtime.Pids, "--ignore-cgroups"}}, true},
		{"rootless v2, pids delegated only", v2PidsOnly, true, false,
			[]gap{{runtime.Memory, "not delegated"}, {runtime.CPU, "not delegated"}, {runtime.KernelIsolation, "give up the pids limits"}}, true},
		{"rootless v2, pids delegated only, waived", v2PidsOnly, true, true,
			[]gap{{runtime.Memory, "not delegated"}, {runtime.CPU, "not delegated"}, {runtime.Pids, "--ignore-cgroups"}}, true},
		{"rootless service, root core", v1Rootless, false, true,
			[]gap{{runtime.Memory, "cgroups v1"}, {runtime.CPU, "cgroups v1"}, {runtime.Pids, "cgroups v1"}, {runtime.OOMDetection, "kernel log"}, {runtime.KernelIsolation, "this server runs as root"}}, false},
		{"root's service, rootless core", rootful, true, false, []gap{{runtime.KernelIsolation, "does not run as root"}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := New("")
			cl.socket = "unix:///run/podman/podman.sock"
			cl.gvisor = &gvisor{rootless: c.coreRootless, limitsWaived: c.limitsWaived}
			rep := cl.report(c.f)
			if len(rep.Gaps) != len(c.want) {
				t.Fatalf("gaps %+v, want %+v", rep.Gaps, c.want)
			}
			for i, g := range rep.Gaps {
				if g.Guarantee != c.want[i].g || !strings.Contains(g.Why, c.want[i].why) || g.Fix == "" {
					t.Errorf("gap %d: %+v, want %s with %q in its why, and a fix", i, g, c.want[i].g, c.want[i].why)
				}
			}
			if got := slices.Contains(RunscFlags("/r", "none", c.coreRootless), "--ignore-cgroups"); got != c.wantIgnoreCgrp {
				t.Errorf("--ignore-cgroups in runsc's flags: %v, want %v", got, c.wantIgnoreCgrp)
			}
		})
	}
}

// Create refuses what the report calls a gap: the same decision, from the
// service's cached state.
func TestGVisorGapFollowsState(t *testing.T) {
	cl := New("")
	cl.socket = "unix:///run/podman/podman.sock"
	cl.gvisor = &gvisor{rootless: true}
	for _, c := range []struct {
		st     rootlessState
		refuse bool
	}{
		{rootlessState{known: true, rootless: true}, false},
		{rootlessState{known: true, rootless: true, controllers: []string{"memory"}}, true},
		{rootlessState{known: true, rootless: false, controllers: []string{"memory", "cpu", "pids"}}, true},
	} {
		if _, got := cl.gvisorGap(c.st); got != c.refuse {
			t.Errorf("state %+v: refused %v, want %v", c.st, got, c.refuse)
		}
	}
	cl.socket = "tcp://podman.example:8080"
	if gap, ok := cl.gvisorGap(rootlessState{known: true, rootless: true}); !ok || !strings.Contains(gap.Why, "not on this host") {
		t.Errorf("a remote service: %+v %v", gap, ok)
	}
}

// A gVisor sandbox's RLIMIT_NPROC and pids cgroup are raised by its
// endpoints' relays; nofile is left alone.
func TestGVisorNproc(t *testing.T) {
	for _, tc := range []struct {
		endpoints  int
		nproc      uint64
		pidsCgroup int64
	}{{0, 128, 320}, {1, 133, 325}, {5, 153, 345}, {16, 158, 350}} {
		g := &specgen.SpecGenerator{}
		g.Rlimits = []spec.POSIXRlimit{{Type: "nofile", Soft: 100, Hard: 100}, {Type: "nproc", Soft: 128, Hard: 128}}
		gvisorNproc(g, tc.endpoints)
		if g.Rlimits[0].Soft != 100 || g.Rlimits[1].Soft != tc.nproc || g.Rlimits[1].Hard != tc.nproc {
			t.Errorf("%d endpoints: rlimits %+v, want nproc %d", tc.endpoints, g.Rlimits, tc.nproc)
		}
		if got := gvisorPids(128, tc.endpoints); got != tc.pidsCgroup {
			t.Errorf("%d endpoints: pids cgroup %d, want %d", tc.endpoints, got, tc.pidsCgroup)
		}
	}
}
