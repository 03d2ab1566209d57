package sandbox

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

func lastViolation(rec *recorder) (rule string, ok bool) {
	for i := len(rec.entries) - 1; i >= 0; i-- {
		if e := rec.entries[i]; e.Event == audit.SecurityViolation {
			r, _ := e.Details["rule"].(string)
			return r, true
		}
	}
	return "", false
}

// The container is created from the image ID the name resolved to, and the
// audit entry records both.
func TestCreateFromResolvedImageID(t *testing.T) {
	rt := &fakeRuntime{image: &runtime.ImageInfo{ID: "f371ca1655e0", Names: []string{"localhost/mcp-forge/python:3.11"}}}
	m, rec := newTestManager(t, rt)
	if _, err := m.Create(context.Background(), intent(m)); err != nil {
		t.Fatal(err)
	}
	if rt.spec.ImageID != "f371ca1655e0" || rt.spec.Image != "mcp-forge/python:3.11" {
		t.Fatalf("created from %q (image %q), want the resolved ID", rt.spec.ImageID, rt.spec.Image)
	}
	if rt.spec.SeccompProfile == "" {
		t.Fatal("no seccomp profile on the spec")
	}
	last := rec.entries[len(rec.entries)-1]
	if last.Event != audit.ContainerCreate || last.Details["image"] != "mcp-forge/python:3.11" || last.Details["image_id"] != "f371ca1655e0" {
		t.Fatalf("audit entry lacks name and ID: %+v", last)
	}
}

// Podman resolving an allowed-looking name to another image is refused
// before create and audited.
func TestResolvedToAnotherImageRefused(t *testing.T) {
	for name, img := range map[string]runtime.ImageInfo{
		"other registry": {ID: "aa", Names: []string{"docker.io/mcp-forge/python:3.11"}},
		"other image":    {ID: "bb", Names: []string{"localhost/mcp-forge/r:4.2"}},
		"untagged":       {ID: "cc"},
	} {
		t.Run(name, func(t *testing.T) {
			rt := &fakeRuntime{image: &img}
			m, rec := newTestManager(t, rt)
			_, err := m.Create(context.Background(), intent(m))
			var v *policy.Violation
			if !errors.As(err, &v) || v.Rule != "image-not-allowed" || rt.created != 0 {
				t.Fatalf("want image-not-allowed before create, got %v (created %d)", err, rt.created)
			}
			if rule, ok := lastViolation(rec); !ok || rule != "image-not-allowed" {
				t.Fatalf("refusal not audited: %+v", rec.entries)
			}
		})
	}
}

// A profile file that was removed or edited is never handed to Podman.
func TestTamperedSeccompProfileRefused(t *testing.T) {
	for name, tamper := range map[string]func(string) error{
		"edited":  func(p string) error { return os.WriteFile(p, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o644) },
		"removed": os.Remove,
	} {
		t.Run(name, func(t *testing.T) {
			rt := &fakeRuntime{}
			m, rec := newTestManager(t, rt)
			if err := tamper(m.Policy().Settings().Seccomp); err != nil {
				t.Fatal(err)
			}
			_, err := m.Create(context.Background(), intent(m))
			var v *policy.Violation
			if !errors.As(err, &v) || v.Rule != "seccomp" || rt.created != 0 {
				t.Fatalf("want seccomp refusal before create, got %v (created %d)", err, rt.created)
			}
			if rule, _ := lastViolation(rec); rule != "seccomp" {
				t.Fatalf("refusal not audited with rule seccomp: %+v", rec.entries)
			}
		})
	}
}
