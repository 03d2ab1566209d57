package podman

import (
	"slices"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// What a Podman service lacks follows from what it reports and what this
// host allows.
func TestPodmanGaps(t *testing.T) {
	all := []string{"cpuset", "cpu", "memory", "pids"}
	for _, c := range []struct {
		name string
		f    hostFacts
		want []runtime.Guarantee
	}{
		{"rootful v1, root", hostFacts{controllers: all, seccomp: true, local: true, kmsg: true, userns: true}, nil},
		{"rootful v2, kmsg unreadable", hostFacts{cgroupsV2: true, controllers: all, seccomp: true, local: true, userns: true}, nil},
		{"rootless v1", hostFacts{rootless: true, seccomp: true, local: true, userns: true},
			[]runtime.Guarantee{runtime.Memory, runtime.CPU, runtime.Pids, runtime.OOMDetection}},
		{"rootless v2, pids not delegated", hostFacts{rootless: true, cgroupsV2: true, controllers: []string{"cpu", "memory"}, seccomp: true, local: true, userns: true},
			[]runtime.Guarantee{runtime.Pids}},
		{"remote v1", hostFacts{controllers: all, seccomp: true, userns: true}, []runtime.Guarantee{runtime.OOMDetection}},
		{"no seccomp, no userns", hostFacts{controllers: all, seccomp: false, local: true, kmsg: true}, []runtime.Guarantee{runtime.Seccomp, runtime.UserNamespace}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := runtime.Report{}.With(c.f.gaps()...)
			var got []runtime.Guarantee
			for _, g := range rep.Gaps {
				if g.Why == "" || g.Fix == "" {
					t.Errorf("gap without why or fix: %+v", g)
				}
				got = append(got, g.Guarantee)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("gaps %v, want %v", got, c.want)
			}
		})
	}
}
