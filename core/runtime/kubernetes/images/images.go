// Package images is where the images of sandbox pods are, for the
// Kubernetes runtime: the reference a pod is created with, whether an image
// is there (in runtime.kubernetes.image_registry, or on the nodes with
// pull_policy Never), and the custom environments the core layers and
// pushes into that registry (registry.go). It reaches the nodes through the
// cluster's API and the registry through go-containerregistry; no container
// runs and nothing is pulled to the core's host.
package images

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// opTimeout bounds an API call that should return promptly.
const opTimeout = 60 * time.Second

// Store answers for the images of one cluster's sandbox pods
// (runtime.Images and runtime.ImageBuilder).
type Store struct {
	cs  kubernetes.Interface
	k   config.Kubernetes
	log hclog.Logger

	// described caches what the registry said of an image by digest
	// (immutable): a run then costs the registry one manifest request.
	described sync.Map // digest reference -> runtime.ImageInfo
}

// New is the store of the images of the cluster cs as k configures it.
func New(cs kubernetes.Interface, k config.Kubernetes, log hclog.Logger) *Store {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Store{cs: cs, k: k, log: log}
}

// Ref is the reference a pod is created with for image name: the
// registry prefix before it, else a name without a registry is a local
// one (localhost/, as Podman names the images it builds).
func Ref(registry, name string) string {
	if registry != "" && strings.HasPrefix(name, registry+"/") {
		return name // already the registry's: an image ID or a listed name
	}
	if registry != "" {
		return registry + "/" + strings.TrimPrefix(name, "localhost/")
	}
	first, _, found := strings.Cut(name, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return name
	}
	return "localhost/" + name
}

// IsDigest reports whether a pod image names its image by digest.
func IsDigest(image string) bool { return strings.Contains(image, "@sha256:") }

// Image implements runtime.Images. With image_registry the registry says
// (an image's ID is then its digest reference, which pods run: a retag
// cannot change what a pod or a build gets), except that with pull_policy
// Never an image only preloaded on the nodes still runs by name. Without
// a registry, with pull_policy Never the image must be on the node (its
// status lists the images it holds); otherwise the node pulls it and a
// missing image fails the pod's start with its reason.
func (s *Store) Image(ctx context.Context, name string) (runtime.ImageInfo, bool, error) {
	var regErr error
	if s.k.ImageRegistry != "" {
		info, ok, err := s.Registry(ctx, name)
		if s.k.PullPolicy != "Never" || IsDigest(name) || (err == nil && ok) {
			return info, ok, err
		}
		// pull_policy Never: an image preloaded on the nodes runs by name,
		// also while the registry does not answer (no environment does).
		regErr = err
	}
	info, ok, err := s.Nodes(ctx, name)
	if regErr != nil && (err != nil || !ok) {
		return runtime.ImageInfo{}, false, regErr
	}
	if regErr != nil {
		s.log.Warn("the registry does not answer; running an image the nodes hold by name", "image", info.ID, "error", regErr)
	}
	return info, ok, err
}

// Nodes is Image without a registry's word: the image by name, which with
// pull_policy Never every node a pod may land on must hold.
func (s *Store) Nodes(ctx context.Context, name string) (runtime.ImageInfo, bool, error) {
	ref := Ref(s.k.ImageRegistry, name)
	info := runtime.ImageInfo{ID: ref, Names: []string{ref}}
	if cn := s.coreName(ref); cn != ref {
		info.Names = append(info.Names, cn) // the name the image allowlist checks
	}
	if s.k.PullPolicy != "Never" {
		return info, true, nil
	}
	cx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var nodes []corev1.Node
	if s.k.NodeName != "" {
		n, err := s.cs.CoreV1().Nodes().Get(cx, s.k.NodeName, metav1.GetOptions{})
		if err != nil {
			return runtime.ImageInfo{}, false, fmt.Errorf("node %s (runtime.kubernetes.node_name): %w", s.k.NodeName, err)
		}
		nodes = []corev1.Node{*n}
	} else {
		l, err := s.cs.CoreV1().Nodes().List(cx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(s.k.NodeSelector).String()})
		if err != nil {
			return runtime.ImageInfo{}, false, fmt.Errorf("list nodes: %w", err)
		}
		nodes = l.Items
	}
	if len(nodes) == 0 {
		return runtime.ImageInfo{}, false, nil
	}
	for _, n := range nodes { // pull_policy Never: every node a pod may land on must have it
		found := false
		for _, img := range n.Status.Images {
			for _, nm := range img.Names {
				if nm == ref || nm == "docker.io/"+ref {
					found = true
					info.Size = img.SizeBytes
					info.Digests = append(info.Digests, digestsOf(img.Names)...)
				}
			}
		}
		if !found {
			return runtime.ImageInfo{}, false, nil
		}
	}
	return info, true, nil
}

func digestsOf(names []string) []string {
	var out []string
	for _, n := range names {
		if strings.Contains(n, "@sha256:") {
			out = append(out, n)
		}
	}
	return out
}

// coreName is the name the core knows a registry tag by: the registry
// prefix dropped, under localhost/ as Podman names local images (the image
// allowlist and the environments judge names in that form).
func (s *Store) coreName(tag string) string {
	short := strings.TrimPrefix(tag, s.k.ImageRegistry+"/")
	if short == tag {
		return tag
	}
	return Ref("", short)
}
