package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/images"
)

// Doctor reports each thing a cluster must provide, with a fix for what
// is missing: the namespace and its Pod Security level, every permission
// of the Role (by its API group), the node, the runtime class, the images.
func TestDoctor(t *testing.T) {
	restricted := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	baseline := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes"}}
	ready := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "localhost"}, Status: corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		Images:     []corev1.ContainerImage{{Names: []string{"localhost/mcp-forge/python:3.11"}, SizeBytes: 700 << 20}},
	}}
	notReady := ready.DeepCopy()
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	gvisor := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}
	cases := []struct {
		name    string
		objects []k8sruntime.Object
		deny    []string // "verb group/resource/subresource[ name]" the core may not
		want    map[string]string
		says    map[string]string
		corePod string // runtime.kubernetes.core_pod
	}{
		{"all there", []k8sruntime.Object{restricted, ready, gvisor}, nil,
			map[string]string{"kubernetes": OK, "namespace": OK, "rbac": OK, "node": OK, "runtime class": OK, "image": OK},
			map[string]string{"kubernetes": "v1.37.2", "namespace": "restricted enforced", "rbac": "all 10 permissions", "node": "Ready", "image": "700 MB"}, ""},
		{"nothing there", nil, nil,
			map[string]string{"kubernetes": OK, "namespace": Fail, "rbac": OK, "node": Fail, "runtime class": Fail, "image": Fail},
			map[string]string{"namespace": "does not exist", "node": "localhost", "runtime class": "gvisor", "image": "runtime.kubernetes.node_name"}, ""},
		{"weak namespace, node not ready", []k8sruntime.Object{baseline, notReady, gvisor}, nil,
			map[string]string{"namespace": Warn, "node": Warn},
			map[string]string{"namespace": "does not enforce the restricted", "node": "not Ready"}, ""},
		{"permissions missing", []k8sruntime.Object{restricted, ready, gvisor}, []string{"create /pods/exec", "list networking.k8s.io/networkpolicies/"},
			map[string]string{"rbac": Fail},
			map[string]string{"rbac": "may not create pods/exec, list networkpolicies in sandboxes"}, ""},
		{"a core in the cluster", []k8sruntime.Object{restricted, ready, gvisor}, nil,
			map[string]string{"rbac": OK, "rbac (core)": OK, "rbac (sessions)": OK},
			map[string]string{"rbac (core)": "all 7 permissions the core needs in its own namespace forge-system", "rbac (sessions)": "all 4 permissions"}, "forge-system/core-0"},
		{"a core in the cluster that cannot record sessions", []k8sruntime.Object{restricted, ready, gvisor}, []string{"get /secrets/"},
			map[string]string{"rbac": OK, "rbac (core)": OK, "rbac (sessions)": Warn},
			map[string]string{"rbac (sessions)": "may not get secrets in sandboxes: its sessions are not recorded"}, "forge-system/core-0"},
		{"a core in the cluster without its Leases", []k8sruntime.Object{restricted, ready, gvisor}, []string{"update coordination.k8s.io/leases/", "watch coordination.k8s.io/leases/"},
			map[string]string{"rbac": OK, "rbac (core)": Fail},
			map[string]string{"rbac (core)": "may not update leases, watch leases in its own namespace forge-system"}, "forge-system/core-0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(tc.objects...)
			cs.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.37.2", Major: "1", Minor: "37"}
			cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
				r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
				ra := r.Spec.ResourceAttributes
				key := strings.TrimSpace(ra.Verb + " " + ra.Group + "/" + ra.Resource + "/" + ra.Subresource + " " + ra.Name)
				r.Status.Allowed = ra.Namespace == "sandboxes" || ra.Namespace == "forge-system"
				for _, d := range tc.deny {
					r.Status.Allowed = r.Status.Allowed && d != key
				}
				return true, r, nil
			})
			k := testKube()
			k.PullPolicy, k.NodeName, k.RuntimeClass, k.CorePod = "Never", "localhost", "gvisor", tc.corePod
			results := cluster(cs, "", k).Doctor([]string{"mcp-forge/python:3.11"})(context.Background())
			got := map[string]Finding{}
			for _, r := range results {
				got[r.Name] = r
				// (An image check that fails for its node leaves the fix to the node's row.)
				if r.Status != OK && r.Fix == "" && !strings.Contains(r.Detail, "runtime.kubernetes.node_name") {
					t.Errorf("%s is %s with no fix: %s", r.Name, r.Status, r.Detail)
				}
			}
			for name, st := range tc.want {
				if got[name].Status != st {
					t.Errorf("%s: %s (%s); want %s", name, got[name].Status, got[name].Detail, st)
				}
			}
			for name, s := range tc.says {
				if !strings.Contains(got[name].Detail, s) {
					t.Errorf("%s says %q; want it to say %q", name, got[name].Detail, s)
				}
			}
		})
	}

	// An API server that does not answer is one failure that says where to look.
	cs := fake.NewClientset()
	cs.Discovery().(*fakediscovery.FakeDiscovery).PrependReactor("get", "version", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	})
	results := cluster(cs, "https://127.0.0.1:6443", config.Default().Runtime.Kubernetes).Doctor(nil)(context.Background())
	if len(results) != 1 || results[0].Status != Fail || !strings.Contains(results[0].Detail, "127.0.0.1:6443") || !strings.Contains(results[0].Fix, "kubeconfig") {
		t.Errorf("Doctor with the API server down: %+v; want one failure naming it, with a fix", results)
	}
}

func testKube() config.Kubernetes {
	k := config.Default().Runtime.Kubernetes
	k.Namespace = "sandboxes"
	return k
}

// cluster is the checks of cs as k configures the runtime, whose API
// server is at host (its version the discovery's).
func cluster(cs kubernetes.Interface, host string, k config.Kubernetes) Cluster {
	info := func(context.Context) (runtime.Info, error) {
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			return runtime.Info{}, fmt.Errorf("kubernetes API server %s: %w", host, err)
		}
		return runtime.Info{Engine: "Kubernetes", Socket: host, Version: v.GitVersion}, nil
	}
	return Cluster{API: cs, Config: k, Info: info, Images: images.New(cs, k, nil)}
}

// doctor's registry findings: it answers and takes pushes, and which base
// images are missing from it (they run from the nodes, but no environment
// can be built on them); a registry that does not answer fails.
func TestRegistryDoctor(t *testing.T) {
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	reg := strings.TrimPrefix(srv.URL, "http://")
	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(reg + "/mcp-forge/python:3.11")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	withRegistry := func(r string) Cluster {
		k := testKube()
		k.ImageRegistry, k.PullPolicy = r, "Never"
		return cluster(fake.NewClientset(), "", k)
	}
	got := withRegistry(reg).registryFindings(ctx, []string{"mcp-forge/python:3.11", "mcp-forge/r:4.2"})
	if len(got) != 2 || got[0].Status != OK || !strings.Contains(got[0].Detail, "may push") ||
		got[1].Status != Warn || !strings.Contains(got[1].Detail, "mcp-forge/r:4.2") || strings.Contains(got[1].Detail, "python") {
		t.Errorf("findings %+v; want the registry ok and r:4.2 (only) missing", got)
	}
	got = withRegistry("127.0.0.1:1").registryFindings(ctx, []string{"mcp-forge/python:3.11"})
	if len(got) != 1 || got[0].Status != Fail || !strings.Contains(got[0].Detail, "cannot push") {
		t.Errorf("findings with the registry down %+v; want one failure", got)
	}
}
