package environments

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes"
)

// The service over the Kubernetes runtime and a registry (in memory, over
// HTTP): what the runtime names and labels is what the service judges, so
// an environment is built on the base's digest, recognised as this
// forge's, rebuilt as a new digest (the old one removed), refused for
// deletion while a session pod runs its digest, and deleted.
func TestOnKubernetesRegistry(t *testing.T) {
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	base, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := base.ConfigFile()
	cfg := cf.Config
	cfg.Labels = map[string]string{"io.mcp-forge.image": "python"}
	if base, err = mutate.Config(base, cfg); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host + "/mcp-forge/python:3.11")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, base); err != nil {
		t.Fatal(err)
	}

	k := config.Default().Runtime.Kubernetes
	k.Namespace, k.ImageRegistry, k.PullPolicy = "sandboxes", host, "Never"
	kc := kubernetes.NewWithClient(fake.NewClientset(), nil, k, kubernetes.Options{})
	r := newRig(t, nil)
	svc, err := New(Options{Config: r.svc.o.Config, Instance: "inst1", StateDir: r.svc.o.StateDir, Images: kc, Containers: kc,
		Builders: builders{"fake": r.b}, DefaultBase: map[string]string{"python": "mcp-forge/python:3.11"}, Audit: r.rec})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	res, err := svc.Build(ctx, Request{Name: "demo", Packages: []string{"forge-demo"}, Client: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Image != "mcp-forge/custom:demo" || res.SizeBytes == 0 {
		t.Fatalf("%+v", res)
	}
	if r.b.last.Spec.BaseImageID == "" || !strings.HasPrefix(r.b.last.Spec.BaseImageID, host+"/mcp-forge/python@sha256:") {
		t.Errorf("the builder was given base %q; want the base's digest reference", r.b.last.Spec.BaseImageID)
	}
	envs, err := svc.List(ctx, "alice")
	if err != nil || len(envs) != 1 || !strings.HasPrefix(envs[0].ID, host+"/mcp-forge/custom@sha256:") {
		t.Fatalf("List: %+v, %v; want the environment by its digest", envs, err)
	}
	first := envs[0].ID
	if l, _ := svc.List(ctx, "bob"); len(l) != 0 {
		t.Errorf("bob lists %v", l)
	}
	if err := svc.CheckUse(ctx, "bob", "mcp-forge/custom:demo"); err == nil || refusedBy(t, err) != RuleOwner {
		t.Errorf("bob runs alice's environment: %v", err)
	}
	if again, err := svc.Build(ctx, Request{Name: "demo", Packages: []string{"forge-demo"}, Client: "alice"}); err != nil || !again.CacheHit {
		t.Errorf("the same build again: %+v, %v; want a cache hit", again, err)
	}

	// A rebuild is a new digest; the old one is no environment any more.
	if _, err := svc.Build(ctx, Request{Name: "demo", Packages: []string{"forge-demo", "rich"}, Client: "alice"}); err != nil {
		t.Fatal(err)
	}
	envs, _ = svc.List(ctx, "alice")
	if len(envs) != 1 || envs[0].ID == first {
		t.Fatalf("after the rebuild: %+v; want one environment, not %s", envs, first)
	}
	if _, ok, err := kc.Image(ctx, first); err != nil || ok {
		t.Errorf("the old digest %s: %v, %v; want it removed from the registry", first, ok, err)
	}

	// A session pod of it: its image is the digest, and delete waits for it.
	spec := runtime.Spec{Name: "s", Image: "mcp-forge/custom:demo", ImageID: envs[0].ID, Command: []string{"sleep", "1"},
		User: "1000:1000", Network: "none", WorkspacePath: t.TempDir(),
		Labels: map[string]string{runtime.LabelManaged: "true", runtime.LabelInstance: "inst1", runtime.LabelSession: "s1"}}
	pod, err := kc.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Delete(ctx, "alice", "demo"); err == nil || refusedBy(t, err) != RuleInUse {
		t.Fatalf("Delete with a session pod of it: %v; want %s", err, RuleInUse)
	}
	if err := kc.Remove(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := svc.Delete(ctx, "alice", "demo"); err != nil {
		t.Fatal(err)
	}
	if envs, _ := svc.List(ctx, "alice"); len(envs) != 0 {
		t.Errorf("after Delete: %+v", envs)
	}
}
