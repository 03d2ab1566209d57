// Package doctor says what a Kubernetes cluster gives sandbox pods, asked
// of its API: the guarantees a pod built by core/runtime/kubernetes/podspec
// gets there (the runtime's runtime.Guarantor, guarantees.go), and doctor's
// checks of the API server, the core's permissions, the namespace, the
// nodes, the runtime class, the registry and the images.
package doctor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/images"
)

// Cluster is what the checks ask: the cluster's API, the runtime's
// configuration of it, and the runtime's own answers.
type Cluster struct {
	API    kubernetes.Interface
	Config config.Kubernetes // [runtime.kubernetes]
	// MaxPids is execution.max_pids: the most processes a run may have.
	MaxPids int64
	// Info is the runtime's answer (its API server's version).
	Info   func(context.Context) (runtime.Info, error)
	Images *images.Store
}

// opTimeout bounds an API call that should return promptly.
const opTimeout = 60 * time.Second

func op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, opTimeout)
}

// Finding is one line of doctor's report (core/doctor prints them).
type Finding = runtime.Finding

// Statuses of a Finding, as doctor spells them.
const (
	OK   = "ok"
	Warn = "warn"
	Fail = "FAIL"
)

// Permission is one thing the core does in a namespace; Name: on that
// object only.
type Permission struct {
	Group, Resource, Subresource, Verb string
	Name                               string
}

// Permissions are the least the core needs (docs/kubernetes.md's Role).
var Permissions = []Permission{
	{"", "pods", "", "create", ""}, {"", "pods", "", "get", ""}, {"", "pods", "", "list", ""}, {"", "pods", "", "watch", ""}, {"", "pods", "", "delete", ""},
	{"", "pods", "exec", "create", ""}, {"", "pods", "exec", "get", ""}, {"", "pods", "attach", "create", ""}, {"", "pods", "attach", "get", ""},
	{"networking.k8s.io", "networkpolicies", "", "list", ""},
}

// SessionPermissions are what a core in the cluster also needs in the
// sandbox namespace to record its sessions and take over its replicas'
// (core/cluster/records.go).
var SessionPermissions = []Permission{
	{"", "pods", "", "update", ""},
	{"", "secrets", "", "create", ""}, {"", "secrets", "", "get", ""}, {"", "secrets", "", "update", ""},
}

// CorePermissions are what a core in the cluster (runtime.kubernetes.
// core_pod) also needs in its own namespace: read its pod and its
// replicas', hold the reaper's Lease, and publish its usage of the
// tenants' quotas in a Lease of its own while watching its replicas'
// (core/cluster; deploy/base/rbac.yaml).
var CorePermissions = []Permission{
	{"", "pods", "", "get", ""}, {"", "pods", "", "list", ""},
	{"coordination.k8s.io", "leases", "", "create", ""}, {"coordination.k8s.io", "leases", "", "get", ""},
	{"coordination.k8s.io", "leases", "", "update", ""}, {"coordination.k8s.io", "leases", "", "list", ""},
	{"coordination.k8s.io", "leases", "", "watch", ""},
}

// missing returns the permissions of want the core lacks in ns, as
// "verb resource[/sub][ name]".
func (c Cluster) missing(ctx context.Context, ns string, want []Permission) []string {
	var out []string
	for _, p := range want {
		rev, err := c.API.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: p.Verb, Group: p.Group, Resource: p.Resource, Subresource: p.Subresource, Name: p.Name}}}, metav1.CreateOptions{})
		if err != nil || !rev.Status.Allowed {
			name := p.Resource
			if p.Subresource != "" {
				name += "/" + p.Subresource
			}
			if p.Name != "" {
				name += " " + p.Name
			}
			out = append(out, p.Verb+" "+name)
		}
	}
	return out
}

// Doctor checks the cluster for serving sandboxes: the API server, the
// core's permissions, the namespace, the nodes, the images and the
// runtime class (the runtime's runtime.Capabilities.Doctor). Guarantees
// are core/doctor's own check over the runtime.
func (c Cluster) Doctor(imgs []string) func(context.Context) []Finding {
	return func(ctx context.Context) []Finding {
		info, err := c.Info(ctx)
		if err != nil {
			return []Finding{{Name: "kubernetes", Status: Fail, Detail: err.Error(),
				Fix: "check runtime.kubernetes.kubeconfig and that the API server runs (`make kube-up` starts a local one)"}}
		}
		out := []Finding{{Name: "kubernetes", Status: OK, Detail: fmt.Sprintf("API server %s, %s", info.Socket, info.Version)}}
		cx, cancel := op(ctx)
		defer cancel()
		ns, err := c.API.CoreV1().Namespaces().Get(cx, c.Config.Namespace, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, Finding{Name: "namespace", Status: Fail, Detail: "namespace " + c.Config.Namespace + " does not exist", Fix: "create it (docs/kubernetes.md) or set runtime.kubernetes.namespace"})
		case err != nil && !apierrors.IsForbidden(err):
			out = append(out, Finding{Name: "namespace", Status: Fail, Detail: err.Error()})
		case err == nil:
			detail := "namespace " + c.Config.Namespace
			st := OK
			if lvl := ns.Labels["pod-security.kubernetes.io/enforce"]; lvl != "restricted" {
				st, detail = Warn, detail+" does not enforce the restricted Pod Security Standard"
			} else {
				detail += ", Pod Security restricted enforced"
			}
			out = append(out, Finding{Name: "namespace", Status: st, Detail: detail, Fix: "label it pod-security.kubernetes.io/enforce=restricted"})
		}
		if missing := c.missing(cx, c.Config.Namespace, Permissions); len(missing) > 0 {
			out = append(out, Finding{Name: "rbac", Status: Fail, Detail: "the core may not " + strings.Join(missing, ", ") + " in " + c.Config.Namespace,
				Fix: "bind the Role of docs/kubernetes.md to the core's user or service account"})
		} else {
			out = append(out, Finding{Name: "rbac", Status: OK, Detail: fmt.Sprintf("all %d permissions the core needs in %s", len(Permissions), c.Config.Namespace)})
		}
		if ns, _, ok := strings.Cut(c.Config.CorePod, "/"); ok {
			if missing := c.missing(cx, ns, CorePermissions); len(missing) > 0 {
				out = append(out, Finding{Name: "rbac (core)", Status: Fail, Detail: "the core may not " + strings.Join(missing, ", ") + " in its own namespace " + ns + ": it cannot read its pod, reap a lost replica's sandboxes or count the tenants' quotas across replicas (runs and sessions are then refused)",
					Fix: "apply deploy/base/rbac.yaml (its Role mcp-forge-core in " + ns + ")"})
			} else {
				out = append(out, Finding{Name: "rbac (core)", Status: OK, Detail: fmt.Sprintf("all %d permissions the core needs in its own namespace %s", len(CorePermissions), ns)})
			}
			if missing := c.missing(cx, c.Config.Namespace, SessionPermissions); len(missing) > 0 {
				out = append(out, Finding{Name: "rbac (sessions)", Status: Warn, Detail: "the core may not " + strings.Join(missing, ", ") + " in " + c.Config.Namespace + ": its sessions are not recorded in the cluster, and are lost with the replica that opened them",
					Fix: "apply deploy/base/rbac.yaml (its Role mcp-forge-core in " + c.Config.Namespace + ")"})
			} else {
				out = append(out, Finding{Name: "rbac (sessions)", Status: OK, Detail: fmt.Sprintf("all %d permissions to record sessions and take over a lost replica's in %s", len(SessionPermissions), c.Config.Namespace)})
			}
		}
		if c.Config.NodeName != "" {
			n, err := c.API.CoreV1().Nodes().Get(cx, c.Config.NodeName, metav1.GetOptions{})
			switch {
			case err != nil:
				out = append(out, Finding{Name: "node", Status: Fail, Detail: fmt.Sprintf("node %s: %v", c.Config.NodeName, err), Fix: "set runtime.kubernetes.node_name to a node of the cluster"})
			case !ready(n):
				out = append(out, Finding{Name: "node", Status: Warn, Detail: "node " + n.Name + " is not Ready", Fix: "check its kubelet"})
			default:
				out = append(out, Finding{Name: "node", Status: OK, Detail: fmt.Sprintf("node %s Ready, %s CPU, %s memory allocatable", n.Name, n.Status.Allocatable.Cpu(), n.Status.Allocatable.Memory())})
			}
		}
		if c.Config.RuntimeClass != "" {
			if _, err := c.API.NodeV1().RuntimeClasses().Get(cx, c.Config.RuntimeClass, metav1.GetOptions{}); err != nil {
				out = append(out, Finding{Name: "runtime class", Status: Fail, Detail: fmt.Sprintf("RuntimeClass %s: %v", c.Config.RuntimeClass, err), Fix: "install it (gVisor, Kata) or unset runtime.kubernetes.runtime_class"})
			} else {
				out = append(out, Finding{Name: "runtime class", Status: OK, Detail: c.Config.RuntimeClass})
			}
		}
		if c.Config.ImageRegistry != "" {
			out = append(out, c.registryFindings(ctx, imgs)...)
		}
		for _, img := range imgs {
			ii, ok, err := c.Images.Image(ctx, img)
			switch {
			case err != nil:
				out = append(out, Finding{Name: "image", Status: Fail, Detail: img + ": " + err.Error()})
			case !ok:
				out = append(out, Finding{Name: "image", Status: Fail, Detail: images.Ref(c.Config.ImageRegistry, img) + " is on no node (pull_policy Never)",
					Fix: "import it on the nodes (`make kube-up` does for its cluster) or push it to runtime.kubernetes.image_registry"})
			case images.IsDigest(ii.ID):
				out = append(out, Finding{Name: "image", Status: OK, Detail: fmt.Sprintf("%s in the registry, %d MB compressed (pulled by digest)", ii.ID, ii.Size>>20)})
			case c.Config.PullPolicy == "Never":
				out = append(out, Finding{Name: "image", Status: OK, Detail: fmt.Sprintf("%s on the node(s), %d MB", ii.ID, ii.Size>>20)})
			default:
				out = append(out, Finding{Name: "image", Status: OK, Detail: ii.ID + " (pulled by the node, " + c.Config.PullPolicy + ")"})
			}
		}
		if c.Config.PullPolicy == "Never" && c.Config.ImageRegistry == "" && !images.IsDigest(c.Config.AgentImage) {
			// Every pod copies the agent from it: without it no pod starts.
			if _, ok, err := c.Images.Nodes(ctx, c.Config.AgentImage); err == nil && !ok {
				out = append(out, Finding{Name: "agent image", Status: Fail, Detail: images.Ref("", c.Config.AgentImage) + " is on no node (pull_policy Never): no sandbox pod can start",
					Fix: "make agent-image, then import it on the nodes (`make kube-up` does for its cluster)"})
			} else if err == nil {
				out = append(out, Finding{Name: "agent image", Status: OK, Detail: images.Ref("", c.Config.AgentImage) + " on the node(s)"})
			}
		}
		return out
	}
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// registryFindings are doctor's checks of the registry: it answers, the
// core may push to the environments' repository, and the base images are
// in it (a base image only on the nodes runs, but cannot be built on).
func (c Cluster) registryFindings(ctx context.Context, imgs []string) []Finding {
	repo, err := name.NewRepository(images.Ref(c.Config.ImageRegistry, images.CustomRepo))
	if err != nil {
		return []Finding{{Name: "registry", Status: Fail, Detail: err.Error(), Fix: "set runtime.kubernetes.image_registry to host[:port][/path]"}}
	}
	if err := remote.CheckPushPermission(repo.Tag("doctor"), authn.DefaultKeychain, remote.DefaultTransport); err != nil {
		return []Finding{{Name: "registry", Status: Fail, Detail: fmt.Sprintf("%s: cannot push: %v", repo, err),
			Fix: "start the registry (`make kube-up` runs one), or give the core push credentials in its docker config.json; the nodes must be able to pull from it too"}}
	}
	out := []Finding{{Name: "registry", Status: OK, Detail: fmt.Sprintf("%s answers and the core may push to %s (custom environments)", c.Config.ImageRegistry, repo)}}
	var missing []string
	for _, img := range imgs {
		if _, ok, err := c.Images.Registry(ctx, img); err != nil || !ok {
			missing = append(missing, img)
		}
	}
	if len(missing) > 0 {
		out = append(out, Finding{Name: "registry", Status: Warn, Detail: "not in the registry, so no environment can be built on it: " + strings.Join(missing, ", "),
			Fix: "push them to " + c.Config.ImageRegistry + " (scripts/kube-up.sh shows how)"})
	}
	return out
}
