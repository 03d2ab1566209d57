package podman

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/runtimetest"
	"github.com/mcp-forge/mcp-forge/core/seccomp"
)

// The Podman runtime passes the same contract as the fake the unit tests
// use (runtimetest), against the real service.
func TestPodmanPassesTheContract(t *testing.T) {
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("end-to-end test: set FORGE_E2E=1 (needs Podman and the mcp-forge/python:3.11 image)")
	}
	c := New("")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const image = "mcp-forge/python:3.11"
	profile, err := seccomp.Install(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	im, ok, err := c.Image(ctx, image)
	if err != nil || !ok {
		t.Fatalf("image %s: %v (make setup builds it)", image, err)
	}
	runtimetest.RunContract(t, runtimetest.Subject{
		Runtime: c,
		Spec: func(labels map[string]string, cmd ...string) runtime.Spec {
			return runtime.Spec{
				Image: image, ImageID: im.ID, SeccompProfile: profile, Command: cmd, Labels: labels, User: "1000:1000", Network: "none",
				ReadOnlyRoot: true, TmpfsSize: 1 << 20, NoNewPrivileges: true, CapDrop: []string{"ALL"}, Init: true,
				Limits: runtime.Limits{MemoryBytes: 64 << 20, CPUQuota: 50000, Pids: 64, NoFile: 256, Timeout: time.Minute},
			}
		},
		MissingImage: "localhost/mcp-forge/no-such-image:0",
	})
}
