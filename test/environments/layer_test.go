package environments

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// An environment's layer holds the builder's tree and nothing of the host:
// with volumes.base_path under /tmp (where the builder's work directory
// then lies), the image's /tmp stays 1777, a tempfile can be made in it by
// the sandbox user, and no entry of any of the image's layers names the
// host base path (issue 20, item 10: the layer carried the host path, and
// /tmp came back 0755 root).
func TestEnvironmentLayerCarriesNoHostPath(t *testing.T) {
	testenv.Require(t)
	bin := testenv.BuildPlugin(t, "./testdata/forgedemo")
	base, err := os.MkdirTemp("/tmp", "forge-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	t.Cleanup(func() { removeImages(t, base) })
	s := serve(t, base, fmt.Sprintf(`[environment_builder]
builder = "forgedemo"

[environment_builder.package_validation]
use_allowlist = false

[plugins.forgedemo]
path = %q
`, bin), nil)
	out, res := build(t, s, map[string]any{"name": "tmp-base", "packages": []string{"forgedemo"}})
	if !out.Success {
		t.Fatal(testenv.Text(res))
	}

	// In the sandbox, as its user: /tmp is writable and sticky.
	var ex mcpserver.ExecuteOutput
	code := fmt.Sprintf(`import os, tempfile, forgedemo
fd, p = tempfile.mkstemp()
os.write(fd, b"x"); os.close(fd)
print("mode", oct(os.stat("/tmp").st_mode & 0o1777), "host", os.path.exists(%q))`, base) // a pod's /tmp is setgid too (fsGroup)
	res = s.Call(t, "execute_python", map[string]any{"code": code, "custom_image": out.Image}, &ex)
	if !ex.Success || !strings.Contains(ex.Stdout, "mode 0o1777 host False") {
		t.Fatalf("in the environment: %s", testenv.Text(res))
	}

	if testenv.Kube() {
		// The layer's entries in the registry are the unit tests' (core/runtime/kubernetes
		// TestRegistryEnvironmentLifecycle): podman cannot see the cluster's images.
		return
	}
	// The image itself, outside the sandbox's mounts.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := exec.CommandContext(ctx, "podman", "run", "--rm", "--network", "none", out.Image, "stat", "-c", "%a %U", "/tmp").CombinedOutput()
	if err != nil || strings.TrimSpace(string(st)) != "1777 root" {
		t.Fatalf("/tmp of the image: %q %v", st, err)
	}
	arch := filepath.Join(t.TempDir(), "image.tar")
	if b, err := exec.CommandContext(ctx, "podman", "image", "save", "--format", "docker-archive", "-o", arch, out.Image).CombinedOutput(); err != nil {
		t.Fatalf("podman image save: %v %s", err, b)
	}
	entries := layerEntries(t, arch)
	rel := strings.TrimPrefix(base, "/")
	var seen bool
	for _, e := range entries {
		if strings.Contains(e, rel) || strings.Contains(e, ".containerfile") || strings.HasSuffix(e, "Containerfile") {
			t.Errorf("a layer holds %q", e)
		}
		seen = seen || strings.Contains(e, "forgedemo/__init__.py")
	}
	if !seen {
		t.Fatalf("the builder's files are in no layer (%d entries)", len(entries))
	}
}

// layerEntries lists the entries of every layer of a docker-archive.
func layerEntries(t *testing.T, archive string) []string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg || strings.HasSuffix(h.Name, ".json") || h.Name == "repositories" {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = bytes.NewReader(data)
		if len(data) > 2 && data[0] == 0x1f && data[1] == 0x8b {
			if r, err = gzip.NewReader(bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
		}
		lt := tar.NewReader(r)
		for {
			lh, err := lt.Next()
			if err != nil {
				break // not a tar, or its end
			}
			out = append(out, lh.Name)
		}
	}
	return out
}
