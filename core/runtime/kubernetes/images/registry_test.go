package images

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// testRegistry is go-containerregistry's in-memory registry over HTTP on
// loopback (plain HTTP, as the local cluster's), counting blob uploads.
type testRegistry struct {
	host string
	mu   sync.Mutex
	puts []string // paths of completed blob uploads
}

func newTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	r := &testRegistry{}
	h := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/blobs/uploads/") {
			r.mu.Lock()
			r.puts = append(r.puts, req.URL.Path)
			r.mu.Unlock()
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

func (r *testRegistry) uploads() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.puts)
}

// pushBase puts a two-layer base image with a label under ref.
func (r *testRegistry) pushBase(t *testing.T, ref string) v1.Image {
	t.Helper()
	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cfg := cf.Config
	cfg.Labels = map[string]string{"io.mcp-forge.python": "3.11", "shared": "base"}
	if img, err = mutate.Config(img, cfg); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(r.host + "/" + ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	return img
}

func testKube() config.Kubernetes {
	k := config.Default().Runtime.Kubernetes
	k.Namespace = "sandboxes"
	return k
}

// registryStore is the store of a cluster without nodes whose registry
// is reg.
func registryStore(t *testing.T, reg, pull string) *Store {
	t.Helper()
	k := testKube()
	k.ImageRegistry, k.PullPolicy = reg, pull
	return New(fake.NewClientset(), k, nil)
}

// layerTree is a builder's layer: a directory, files of two modes and a
// link, as uv leaves a --target tree.
func layerTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "opt", "env", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, m := range map[string]os.FileMode{"opt/env/demo.py": 0o644, "opt/env/bin/tool": 0o755} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("print('x')\n"), m); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, p), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("demo.py", filepath.Join(dir, "opt", "env", "link.py")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// An environment is its base image plus one layer, pushed by digest: the
// base's layers are not uploaded again, the labels merge over the base's,
// the layer holds the tree root-owned with its modes and links, nothing is
// listed until it is tagged, and a tag lists it under both the registry's
// name and the core's; removing it removes the tag, and removing it again
// is no error.
func TestRegistryEnvironmentLifecycle(t *testing.T) {
	reg := newTestRegistry(t)
	reg.pushBase(t, "mcp-forge/python:3.11")
	c := registryStore(t, reg.host, "Never")
	ctx := context.Background()

	base, ok, err := c.Image(ctx, "mcp-forge/python:3.11")
	if err != nil || !ok {
		t.Fatalf("Image(base): %v, %v", ok, err)
	}
	if !strings.HasPrefix(base.ID, reg.host+"/mcp-forge/python@sha256:") || !IsDigest(base.ID) {
		t.Fatalf("base ID %q; want its digest reference in the registry", base.ID)
	}
	if !slices.Contains(base.Names, "localhost/mcp-forge/python:3.11") || !slices.Contains(base.Names, reg.host+"/mcp-forge/python:3.11") {
		t.Errorf("base names %v; want the core's name (the allowlist checks it) and the registry's", base.Names)
	}
	if base.Labels["io.mcp-forge.python"] != "3.11" || base.Size <= 4096 {
		t.Errorf("base %+v; want its labels and the size of its blobs", base)
	}

	before := reg.uploads()
	labels := map[string]string{"io.mcp-forge.env.instance": "i1", "io.mcp-forge.env.name": "demo", "shared": "env"}
	id, err := c.BuildLayer(ctx, runtime.LayerBuild{Base: base.ID, Context: layerTree(t), Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id, reg.host+"/mcp-forge/custom@sha256:") {
		t.Fatalf("built ID %q; want a digest reference in %s/mcp-forge/custom", id, reg.host)
	}
	if n := reg.uploads() - before; n != 2 {
		t.Errorf("%d blobs uploaded; want 2 (the new layer and the config), the base's layers being there already", n)
	}

	im, ok, err := c.Image(ctx, id)
	if err != nil || !ok {
		t.Fatalf("Image(%s): %v, %v", id, ok, err)
	}
	if im.ID != id || im.Labels["io.mcp-forge.env.name"] != "demo" || im.Labels["io.mcp-forge.python"] != "3.11" || im.Labels["shared"] != "env" {
		t.Errorf("built image %+v; want its ID and the labels merged over the base's", im)
	}
	if im.Size <= base.Size || len(im.Names) != 0 {
		t.Errorf("built image size %d (base %d), names %v; want larger, and no name before Tag", im.Size, base.Size, im.Names)
	}
	checkLayer(t, id, 3)

	if l, err := c.Images(ctx, map[string]string{"io.mcp-forge.env.instance": "i1"}); err != nil || len(l) != 0 {
		t.Errorf("Images before Tag: %v, %v; want none (an untagged manifest cannot be listed)", l, err)
	}
	if err := c.Tag(ctx, id, "mcp-forge/custom:demo"); err != nil {
		t.Fatal(err)
	}
	got, ok, err := c.Image(ctx, "mcp-forge/custom:demo")
	if err != nil || !ok || got.ID != id {
		t.Fatalf("Image(tag): %+v, %v, %v; want ID %s", got, ok, err, id)
	}
	for _, tc := range []struct {
		labels map[string]string
		want   int
	}{
		{map[string]string{"io.mcp-forge.env.instance": "i1"}, 1},
		{map[string]string{"io.mcp-forge.env.instance": "i1", "io.mcp-forge.env.name": "demo"}, 1},
		{map[string]string{"io.mcp-forge.env.instance": "i1", "io.mcp-forge.env.name": "other"}, 0}, // every label, not any
		{map[string]string{"io.mcp-forge.env.instance": "i2"}, 0},
	} {
		l, err := c.Images(ctx, tc.labels)
		if err != nil || len(l) != tc.want {
			t.Errorf("Images(%v): %d, %v; want %d", tc.labels, len(l), err, tc.want)
			continue
		}
		if tc.want == 1 && (l[0].ID != id || !slices.Contains(l[0].Names, "localhost/mcp-forge/custom:demo") || !slices.Contains(l[0].Names, reg.host+"/mcp-forge/custom:demo")) {
			t.Errorf("Images(%v) = %+v; want %s named both ways", tc.labels, l[0], id)
		}
	}

	if err := c.RemoveImage(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.Image(ctx, "mcp-forge/custom:demo"); err != nil || ok {
		t.Errorf("Image(tag) after RemoveImage: %v, %v; want gone", ok, err)
	}
	if l, err := c.Images(ctx, nil); err != nil || len(l) != 0 {
		t.Errorf("Images after RemoveImage: %v, %v; want none", l, err)
	}
	if err := c.RemoveImage(ctx, id); err != nil {
		t.Errorf("RemoveImage of a removed image: %v; want nil", err)
	}
	if err := c.RemoveImage(ctx, "mcp-forge/custom:never-built"); err != nil {
		t.Errorf("RemoveImage of a tag never pushed: %v; want nil", err)
	}
}

// checkLayer reads the top layer of id (of layers): the tree's entries, root-owned,
// with their modes, the link as a link.
func checkLayer(t *testing.T, id string, layers int) {
	t.Helper()
	ref, _ := name.NewDigest(id)
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	// What a node checks when it unpacks: every blob's digest, and the
	// config's diff_ids against the uncompressed layers.
	if err := validate.Image(img); err != nil {
		t.Fatalf("%s does not validate: %v", id, err)
	}
	ls, err := img.Layers()
	if err != nil || len(ls) != layers {
		t.Fatalf("%d layers, %v; want the base's and one more, %d", len(ls), err, layers)
	}
	rc, err := ls[layers-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d; want root, as Podman's COPY gives", h.Name, h.Uid, h.Gid)
		}
		got[h.Name] = os.FileMode(h.Mode).Perm().String() + " " + h.Linkname
	}
	want := map[string]string{"opt/": "-rwxr-xr-x ", "opt/env/": "-rwxr-xr-x ", "opt/env/bin/": "-rwxr-xr-x ",
		"opt/env/bin/tool": "-rwxr-xr-x ", "opt/env/demo.py": "-rw-r--r-- ", "opt/env/link.py": "-rwxrwxrwx demo.py"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("layer entry %s: %q; want %q (all: %v)", k, got[k], v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("layer entries %v; want exactly %v", got, want)
	}
}

// Without a registry nothing can be built, and the refusal names the key;
// a base that is not the registry's by digest is refused before anything
// is uploaded; a base only on the nodes (pull_policy Never) still runs.
func TestRegistryRefusals(t *testing.T) {
	ctx := context.Background()
	none := registryStore(t, "", "Never")
	if _, err := none.BuildLayer(ctx, runtime.LayerBuild{Base: "localhost/mcp-forge/python:3.11", Context: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "runtime.kubernetes.image_registry") {
		t.Errorf("BuildLayer without a registry: %v; want a refusal naming runtime.kubernetes.image_registry", err)
	}
	if err := none.Tag(ctx, "x", "mcp-forge/custom:x"); !errors.Is(err, ErrNoBuilds) {
		t.Errorf("Tag without a registry: %v; want ErrNoBuilds", err)
	}
	if l, err := none.Images(ctx, nil); err != nil || len(l) != 0 {
		t.Errorf("Images without a registry: %v, %v; want none", l, err)
	}

	reg := newTestRegistry(t)
	c := registryStore(t, reg.host, "IfNotPresent")
	for _, b := range []string{"mcp-forge/python:3.11", reg.host + "/mcp-forge/python:3.11", "sha256:" + strings.Repeat("ab", 32)} {
		before := reg.uploads()
		if _, err := c.BuildLayer(ctx, runtime.LayerBuild{Base: b, Context: layerTree(t)}); err == nil || !strings.Contains(err.Error(), "by digest") {
			t.Errorf("BuildLayer on %s: %v; want a refusal saying the base must be the registry's by digest", b, err)
		}
		if reg.uploads() != before {
			t.Errorf("BuildLayer on %s uploaded a blob before refusing", b)
		}
	}
	if _, ok, err := c.Image(ctx, "mcp-forge/python:3.11"); err != nil || ok {
		t.Errorf("Image of an image the registry lacks (IfNotPresent): %v, %v; want not found", ok, err)
	}

	// pull_policy Never: an image preloaded on the node runs by name.
	k := testKube()
	k.ImageRegistry, k.PullPolicy, k.NodeName = reg.host, "Never", "localhost"
	cs := fake.NewClientset()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "localhost"}, Status: corev1.NodeStatus{
		Images: []corev1.ContainerImage{{Names: []string{reg.host + "/mcp-forge/r:4.2"}, SizeBytes: 300 << 20}}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	im, ok, err := New(cs, k, nil).Image(ctx, "mcp-forge/r:4.2")
	if err != nil || !ok || im.ID != reg.host+"/mcp-forge/r:4.2" || !slices.Contains(im.Names, "localhost/mcp-forge/r:4.2") {
		t.Errorf("Image of a node-only image: %+v, %v, %v; want it by name, with the core's name", im, ok, err)
	}

	// The registry down, pull_policy Never: what the nodes hold runs by
	// name; anything else is the registry's error.
	k.ImageRegistry = "127.0.0.1:1"
	cs = fake.NewClientset()
	node.Status.Images[0].Names = []string{"127.0.0.1:1/mcp-forge/r:4.2"}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	down := New(cs, k, nil)
	if im, ok, err := down.Image(ctx, "mcp-forge/r:4.2"); err != nil || !ok || im.ID != "127.0.0.1:1/mcp-forge/r:4.2" {
		t.Errorf("Image of a node's image with the registry down: %+v, %v, %v; want it by name", im, ok, err)
	}
	if _, _, err := down.Image(ctx, "mcp-forge/custom:x"); err == nil || !strings.Contains(err.Error(), "runtime.kubernetes.image_registry") {
		t.Errorf("Image of an environment with the registry down: %v; want the registry's error", err)
	}

	// A registry that does not answer is an error, never "not there".
	down = registryStore(t, "127.0.0.1:1", "IfNotPresent")
	if _, _, err := down.Image(ctx, "mcp-forge/custom:x"); err == nil || !strings.Contains(err.Error(), "runtime.kubernetes.image_registry 127.0.0.1:1") {
		t.Errorf("Image with the registry down: %v; want an error naming runtime.kubernetes.image_registry", err)
	}
}
