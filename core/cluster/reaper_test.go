package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// The reaper removes sandboxes whose core pod is gone, was replaced by a
// pod of the same name, was evicted (Failed) or stays Terminating long
// past its grace period (a lost node), and keeps its own, a live
// replica's, one still stopping, and those of no core pod (a core outside
// the cluster).
func TestReapOrphans(t *testing.T) {
	core := func(name, uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mcp-forge-system", Name: name, UID: types.UID(uid)}}
	}
	sandbox := func(name, owner string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mcp-forge", Name: name,
			Labels: map[string]string{runtime.LabelManaged: "true"}, Annotations: map[string]string{}}}
		if owner != "" {
			p.Annotations[AnnotationCorePod] = owner
		}
		return p
	}
	cs := fake.NewClientset(
		core("core-a", "uid-a"), core("core-b", "uid-b"), core("core-c", "uid-c2"),
		sandbox("mine", "mcp-forge-system/core-a/uid-a"),
		sandbox("live", "mcp-forge-system/core-b/uid-b"),
		sandbox("gone", "mcp-forge-system/core-x/uid-x"),
		sandbox("gone-too", "mcp-forge-system/core-x/uid-x"),
		sandbox("replaced", "mcp-forge-system/core-c/uid-c1"),
		sandbox("host-core", ""),
	)
	evicted := core("core-e", "uid-e")
	evicted.Status.Phase = corev1.PodFailed
	stuck := core("core-t", "uid-t")
	long := metav1.NewTime(time.Now().Add(-time.Hour))
	stuck.DeletionTimestamp = &long
	stopping := core("core-s", "uid-s")
	soon := metav1.NewTime(time.Now().Add(10 * time.Second))
	stopping.DeletionTimestamp = &soon
	for _, p := range []*corev1.Pod{evicted, stuck, stopping,
		sandbox("evicted", "mcp-forge-system/core-e/uid-e"), sandbox("lost-node", "mcp-forge-system/core-t/uid-t"), sandbox("stopping", "mcp-forge-system/core-s/uid-s")} {
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := replica(t, cs, "mcp-forge-system/core-a", 0)
	if c.Self() != "mcp-forge-system/core-a" || c.host != LabelHash("pod", "uid-a") {
		t.Fatalf("identified as %q, host %s", c.Self(), c.host)
	}
	reaped, err := c.ReapOrphans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range reaped {
		names = append(names, r.Container+"<"+r.LeftBy)
	}
	slices.Sort(names)
	if want := []string{"evicted<mcp-forge-system/core-e", "gone-too<mcp-forge-system/core-x", "gone<mcp-forge-system/core-x", "lost-node<mcp-forge-system/core-t", "replaced<mcp-forge-system/core-c"}; !slices.Equal(names, want) {
		t.Fatalf("reaped %v, want %v", names, want)
	}
	left, _ := cs.CoreV1().Pods("mcp-forge").List(context.Background(), metav1.ListOptions{})
	var kept []string
	for _, p := range left.Items {
		kept = append(kept, p.Name)
	}
	slices.Sort(kept)
	if want := []string{"host-core", "live", "mine", "stopping"}; !slices.Equal(kept, want) {
		t.Fatalf("kept %v, want %v", kept, want)
	}
	// The same pod, a new process: the same host, so it reconciles its predecessor's sandboxes.
	if c2 := replica(t, cs, "mcp-forge-system/core-a", 0); c2.host != c.host {
		t.Fatalf("a restarted core in the same pod has host %s, want %s", c2.host, c.host)
	}
	if _, err := Identify(context.Background(), cs, "mcp-forge-system/nobody"); err == nil {
		t.Fatal("a core_pod that does not exist was accepted")
	}
}
