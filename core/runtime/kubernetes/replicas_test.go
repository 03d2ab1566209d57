package kubernetes

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	coord "github.com/mcp-forge/mcp-forge/core/cluster"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/images"
)

// A core outside the cluster declares no coordination; one in the cluster
// declares core/cluster's, and its pods carry its pod's host and name.
func TestCapabilities(t *testing.T) {
	k := config.Default().Runtime.Kubernetes
	outside := NewWithClient(fake.NewClientset(), nil, k, Options{})
	caps := runtime.CapabilitiesOf(outside)
	if caps.Sessions != nil || caps.Reaper != nil || caps.Quotas != nil || caps.Replicas != nil || outside.CorePod() != "" {
		t.Fatalf("a core outside the cluster declares %+v", caps)
	}
	if !caps.StagedWorkspaces || caps.Doctor == nil || !errors.Is(caps.NoBuilds, images.ErrNoBuilds) {
		t.Fatalf("the runtime's own capabilities: %+v", caps)
	}
	k.ImageRegistry = "127.0.0.1:5000"
	if caps := NewWithClient(fake.NewClientset(), nil, k, Options{}).Capabilities(); caps.NoBuilds != nil {
		t.Fatalf("builds refused with a registry: %v", caps.NoBuilds)
	}

	c, _ := inCluster(t)
	caps = c.Capabilities()
	if caps.Sessions == nil || caps.Reaper == nil || caps.Quotas == nil || caps.Replicas == nil || caps.Replicas.Self() != "mcp-forge-system/core-a" {
		t.Fatalf("a core in the cluster declares %+v", caps)
	}
	if c.hostID != coord.LabelHash("pod", "uid-a") {
		t.Fatalf("host %s is not its pod's", c.hostID)
	}
}

// inCluster is a runtime of the core in pod mcp-forge-system/core-a.
func inCluster(t *testing.T) (*Client, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mcp-forge-system", Name: "core-a", UID: "uid-a"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mcp-forge-system", Name: "core-b", UID: "uid-b"}})
	k := config.Default().Runtime.Kubernetes
	k.CorePod = "mcp-forge-system/core-a"
	c := NewWithClient(cs, nil, k, Options{})
	if err := c.identify(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, cs
}

// A core does not remove the pod of a recorded session another core took
// over; it forgets it.
func TestRemoveLeavesATakenOverSession(t *testing.T) {
	ctx := context.Background()
	c, cs := inCluster(t)
	pods := cs.CoreV1().Pods(c.k.Namespace)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.k.Namespace, Name: "sb", UID: types.UID("uid-sb"),
		Labels:      map[string]string{runtime.LabelManaged: "true", LabelHost: c.hostID, runtime.LabelRecorded: "true"},
		Annotations: map[string]string{coord.AnnotationCorePod: c.core.String()}}}
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.adopt(p)
	p.Labels[LabelHost] = coord.LabelHash("pod", "uid-b") // claimed by core-b
	if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "sb"); err == nil {
		t.Fatal("a core removed the pod of a session another core serves")
	}
	if _, err := pods.Get(ctx, "sb", metav1.GetOptions{}); err != nil {
		t.Fatalf("the pod is gone: %v", err)
	}
	if _, err := c.info("sb"); err == nil {
		t.Fatal("the pod is still this core's")
	}
}
