package kubernetes

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	coord "github.com/mcp-forge/mcp-forge/core/cluster"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/images"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podspec"
)

// Capabilities implements runtime.Capable: workspaces are staged into
// pods, nodes pull images, doctor checks the cluster, builds need a
// registry, and a core in the cluster coordinates with its replicas
// (core/cluster).
func (c *Client) Capabilities() runtime.Capabilities {
	caps := runtime.Capabilities{StagedWorkspaces: true, ImagesElsewhere: true, Doctor: c.checks().Doctor}
	if c.k.ImageRegistry == "" {
		caps.NoBuilds = images.ErrNoBuilds
	}
	if c.cluster != nil {
		caps = c.cluster.Capabilities(caps)
	}
	return caps
}

// CorePod is the core's own pod, NAMESPACE/NAME, once identified; "": the
// core runs outside the cluster.
func (c *Client) CorePod() string {
	if c.cluster == nil {
		return ""
	}
	return c.core.Pod()
}

// identify reads the core's own pod: its UID names the host of its
// sandboxes, so that a core restarted in the same pod (a new process, a
// new pid namespace) still finds and reconciles its predecessor's; and
// its coordination with its replicas starts.
func (c *Client) identify(ctx context.Context) error {
	self, err := coord.Identify(ctx, c.cs, c.k.CorePod)
	if err != nil {
		return err
	}
	c.core, c.hostID = self, self.Host()
	c.cluster = coord.New(c.cs, self, podBook{c}, coord.Options{Namespace: c.k.Namespace, SessionGrace: c.sessionGrace, Log: c.log.Named("cluster")})
	return nil
}

// podBook is the runtime's bookkeeping of its pods, as the cluster's
// coordination changes it (coord.Pods).
type podBook struct{ c *Client }

func (b podBook) Describe(p *corev1.Pod) coord.Sandbox {
	_, ended := sandboxEnded(p)
	return coord.Sandbox{Session: podspec.Labels(p)[runtime.LabelSession], Image: sandboxImage(p), Ended: ended}
}

func (b podBook) Adopt(p *corev1.Pod) { b.c.adopt(p) }

func (b podBook) Forget(pod string) { b.c.forget(pod) }

func (b podBook) Recorded(pod string) {
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	if info := b.c.pods[pod]; info != nil {
		info.recorded = true
	}
}

// sandboxImage is the image a pod's sandbox container runs.
func sandboxImage(p *corev1.Pod) string {
	for _, ct := range p.Spec.Containers {
		if ct.Name == podspec.Sandbox {
			return ct.Image
		}
	}
	return ""
}

// forget drops what this core keeps of a pod it removed or no longer
// serves: its file service, socket relays and dialled sockets end.
func (c *Client) forget(pod string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pods[pod]; p != nil {
		if p.keeper != nil {
			p.keeper.Close()
		}
		if p.unrelay != nil {
			p.unrelay()
		}
		for cut := range p.dials {
			(*cut)()
		}
	}
	delete(c.pods, pod)
}
