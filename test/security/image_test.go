package security

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/podman"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// localImage inspects one of the sandbox images through the runtime.
func localImage(t *testing.T, name string) runtime.ImageInfo {
	t.Helper()
	testenv.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	img, ok, err := podman.New("").Image(ctx, name)
	if err != nil || !ok {
		t.Fatalf("image %s: present=%v %v (run `make images`)", name, ok, err)
	}
	return img
}

// manifestDigest is the image's own digest ("sha256:…", no repository).
func manifestDigest(t *testing.T, img runtime.ImageInfo) string {
	t.Helper()
	for _, d := range img.Digests {
		if !strings.Contains(d, "@") {
			return d
		}
	}
	t.Fatalf("image %s has no digest: %v", img.ID, img.Digests)
	return ""
}

func auditEntries(t *testing.T, path string) []audit.Entry {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Entry
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e audit.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// TestImageDigestTrickRefused: "mcp-forge/python:3.11@sha256:<digest of
// another local image>" matched the glob "mcp-forge/python:*" and ran that
// other image, while the audit log showed the allowed-looking name. Through
// the real server and an MCP client it is now refused, names images.allowed,
// is audited with rule image-not-allowed, and creates no container.
func TestImageDigestTrickRefused(t *testing.T) {
	// The R image is a real local image outside this allowlist.
	other := manifestDigest(t, localImage(t, "mcp-forge/r:4.2"))
	// Pools off: a warm container made at start is no refused call's (one
	// raced the refusals in CI and was counted).
	s := testenv.StartServer(t, "[plugins.jupyter.config]\nwarm = 0\n[plugins.python.config]\nwarm = 0\n[images]\nallowed = [\"mcp-forge/python:*\"]\n[plugins.r]\nconfig = { image = \"mcp-forge/python:3.11\" }\n[plugins.irkernel]\nconfig = { image = \"mcp-forge/python:3.11\" }\n")
	tricks := []string{
		"mcp-forge/python:3.11@" + other,
		"mcp-forge/python@" + other,
		"localhost/mcp-forge/python:3.11@" + other,
		"docker.io/mcp-forge/python:3.11",
		"evil.com/mcp-forge/python:3.11",
		"MCP-Forge/python:3.11",
		"mcp-forge/python:3.11 ",
		"mcp-forge/../r:4.2",
	}
	for _, img := range tricks {
		res := s.Call(t, "execute_python", map[string]any{"code": "import os; print(os.path.exists('/usr/bin/Rscript'))", "custom_image": img}, nil)
		t.Logf("%q → %s", img, testenv.Text(res))
		if !res.IsError || !strings.Contains(testenv.Text(res), "images.allowed") {
			t.Errorf("custom_image %q: want a refusal naming images.allowed, got isError=%v %q", img, res.IsError, testenv.Text(res))
		}
	}
	audited := map[string]bool{}
	for _, e := range auditEntries(t, s.AuditLog) {
		switch e.Event {
		case audit.SecurityViolation:
			if e.Details["rule"] == "image-not-allowed" {
				audited[fmt.Sprint(e.Details["image"])] = true
			}
		case audit.ContainerCreate:
			t.Errorf("a container was created: %+v", e.Details)
		}
	}
	for _, img := range tricks {
		if !audited[img] {
			t.Errorf("%q not audited as image-not-allowed", img)
		}
	}
}

// TestPinnedDigestRuns: a digest the allowlist pins is allowed, Podman
// resolves it, and the container is created from (and audited with) that
// image's ID.
func TestPinnedDigestRuns(t *testing.T) {
	py := localImage(t, "mcp-forge/python:3.11")
	d := manifestDigest(t, py)
	s := testenv.StartServer(t, fmt.Sprintf("[images]\nallowed = [\"mcp-forge/python:*\", \"mcp-forge/r:*\", \"mcp-forge/python@%s\"]\n", d))
	img := "mcp-forge/python@" + d
	var o execOut
	res := s.Call(t, "execute_python", map[string]any{"code": "6 * 7", "custom_image": img}, &o)
	if res.IsError || o.Result != "42" {
		t.Fatalf("pinned digest: %s", testenv.Text(res))
	}
	found := false
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == audit.ContainerCreate && e.Details["image"] == img {
			found = true
			if e.Details["image_id"] != py.ID {
				t.Errorf("created from %v, want the pinned image %s", e.Details["image_id"], py.ID)
			}
		}
	}
	if !found {
		t.Error("no container.create entry with the requested image")
	}
}

// TestResolvedImageMustBeApproved: with a permissive allowlist ("*:*"), the
// name "<id prefix>" passes the name check as localhost/<prefix>:latest, but
// Podman resolves it as an image-ID prefix to an image of another name. The
// sandbox compares what Podman resolved with what was approved and refuses.
func TestResolvedImageMustBeApproved(t *testing.T) {
	r := localImage(t, "mcp-forge/r:4.2")
	c := testenv.NewCore(t, func(cfg *config.Config) { cfg.Images.Allowed = append(cfg.Images.Allowed, "*:*") })
	prefix := strings.TrimPrefix(r.ID, "sha256:")[:12]
	before, _ := c.Manager.Ours(context.Background())
	_, err := c.Manager.Create(context.Background(), policy.Intent{Image: prefix, Command: []string{"true"},
		Limits: c.Manager.Policy().Settings().Defaults, Plugin: "test"})
	var v *policy.Violation
	t.Logf("%q → %v", prefix, err)
	if !errors.As(err, &v) || v.Rule != "image-not-allowed" || !strings.Contains(err.Error(), "localhost/mcp-forge/r:4.2") {
		t.Fatalf("image %q (an ID prefix): want image-not-allowed naming what Podman resolved, got %v", prefix, err)
	}
	after, _ := c.Manager.Ours(context.Background())
	if len(after) != len(before) {
		t.Errorf("a container was created: %d before, %d after", len(before), len(after))
	}
	// The approved name itself resolves to that same image and is created
	// from its ID.
	id, err := c.Manager.Create(context.Background(), policy.Intent{Image: "mcp-forge/r:4.2", Command: []string{"true"},
		Limits: c.Manager.Policy().Settings().Defaults, Plugin: "test"})
	if err != nil {
		t.Fatal(err)
	}
	list, _ := c.Manager.Ours(context.Background())
	for _, ct := range list {
		if ct.ID == id && !strings.Contains(ct.Image, "mcp-forge/r:4.2") && !strings.HasPrefix(r.ID, ct.Image) {
			t.Errorf("container image %q", ct.Image)
		}
	}
}
