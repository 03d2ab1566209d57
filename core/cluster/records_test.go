package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// recordCluster is two replicas of a core in the cluster over one fake
// API server, and a running sandbox pod made by the first.
func recordCluster(t *testing.T) (cs *fake.Clientset, a, b *Cluster) {
	t.Helper()
	core := func(name, uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mcp-forge-system", Name: name, UID: types.UID(uid)}}
	}
	cs = fake.NewClientset(core("core-a", "uid-a"), core("core-b", "uid-b"))
	replica := func(name string) *Cluster {
		return replica(t, cs, "mcp-forge-system/"+name, time.Hour)
	}
	a, b = replica("core-a"), replica("core-b")
	for _, name := range []string{"sb1", "sb2"} {
		mustCreatePod(t, cs, a, name)
	}
	return cs, a, b
}

// replica is the coordination of the core in pod (NAMESPACE/NAME) over
// cs, with a book of its runtime's pods.
func replica(t *testing.T, cs *fake.Clientset, pod string, grace time.Duration) *Cluster {
	t.Helper()
	self, err := Identify(context.Background(), cs, pod)
	if err != nil {
		t.Fatal(err)
	}
	return New(cs, self, &book{adopted: map[string]bool{}}, Options{Namespace: "mcp-forge", SessionGrace: grace})
}

// book is a runtime's bookkeeping of its pods, as a test reads it.
type book struct {
	mu      sync.Mutex
	adopted map[string]bool // adopted and not forgotten since
}

func (b *book) Describe(p *corev1.Pod) Sandbox {
	sb := Sandbox{Session: p.Labels[runtime.LabelSession]}
	for _, st := range p.Status.ContainerStatuses {
		sb.Ended = sb.Ended || st.Name == "sandbox" && st.State.Terminated != nil
	}
	if len(p.Spec.Containers) > 0 {
		sb.Image = p.Spec.Containers[0].Image
	}
	return sb
}

func (b *book) Adopt(p *corev1.Pod) { b.mu.Lock(); b.adopted[p.Name] = true; b.mu.Unlock() }
func (b *book) Forget(pod string)   { b.mu.Lock(); delete(b.adopted, pod); b.mu.Unlock() }
func (b *book) Recorded(string)     {}

// adopted says whether c's runtime serves pod, as it was told.
func adopted(c *Cluster, pod string) bool {
	b := c.pods.(*book)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.adopted[pod]
}

func mustCreatePod(t *testing.T, cs *fake.Clientset, by *Cluster, name string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: by.ns, Name: name, UID: types.UID("uid-" + name),
		Labels:      map[string]string{runtime.LabelManaged: "true", LabelHost: by.host},
		Annotations: map[string]string{AnnotationCorePod: by.self.String()}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if _, err := cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func record(internal string) runtime.SessionRecord {
	return runtime.SessionRecord{Client: "alice", ID: "s", Internal: internal, Backend: "jupyter", Language: "python", Workspace: internal,
		Endpoints: []runtime.SessionEndpoint{{Name: "shell", Path: "/k/shell"}}, Resume: []byte(`{"v":1}`)}
}

// A session recorded by one replica is found by another, held while its
// core lives, claimed once it is gone or handed over, and nothing but a
// record of the core's (type, owner UID, session) leads to a pod.
func TestSessionRecords(t *testing.T) {
	ctx := context.Background()
	cs, a, b := recordCluster(t)
	if err := a.RecordSession(ctx, "sb1", record("int-1")); err != nil {
		t.Fatal(err)
	}
	if p, _ := cs.CoreV1().Pods("mcp-forge").Get(ctx, "sb1", metav1.GetOptions{}); p.Labels[runtime.LabelRecorded] != "true" {
		t.Fatalf("recorded pod labels %v", p.Labels)
	}
	got, pod, err := b.FindSession(ctx, "int-1")
	if err != nil || pod != "sb1" || got.Client != "alice" || string(got.Resume) != `{"v":1}` || got.Endpoints[0].Path != "/k/shell" {
		t.Fatalf("found %+v in %q, %v", got, pod, err)
	}
	if by, err := b.Holder(ctx, "sb1"); by != "mcp-forge-system/core-a" || err != nil {
		t.Fatalf("holder seen by b: %q %v", by, err)
	}
	if by, err := a.Holder(ctx, "sb1"); by != "" || err != nil {
		t.Fatalf("a's own session held by %q (%v)", by, err)
	}
	var held *runtime.HeldError
	if err := b.ClaimSession(ctx, "sb1"); !errors.As(err, &held) || held.By != "mcp-forge-system/core-a" {
		t.Fatalf("claim of a live replica's session: %v", err)
	}
	// The first replica's pod goes: the second takes the session over.
	if err := cs.CoreV1().Pods("mcp-forge-system").Delete(ctx, "core-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.ClaimSession(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	if own, err := b.OwnsSession(ctx, "sb1"); !own || err != nil {
		t.Fatalf("claimer owns: %v %v", own, err)
	}
	if own, _ := a.OwnsSession(ctx, "sb1"); own {
		t.Fatal("the replica that lost the session still owns it")
	}
	if !adopted(b, "sb1") {
		t.Fatal("claimed pod not adopted")
	}
	if err := a.ReleaseSession(ctx, "sb1"); err == nil {
		t.Fatal("a replica handed over a session it no longer serves")
	}

	// Handed over: claimed at once although its core lives.
	if err := b.RecordSession(ctx, "sb2", record("int-2")); err == nil {
		t.Fatal("a replica recorded a session in another replica's pod")
	} else if err := a.RecordSession(ctx, "sb2", record("int-2")); err != nil {
		t.Fatal(err)
	}
	cs.CoreV1().Pods("mcp-forge-system").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mcp-forge-system", Name: "core-a", UID: "uid-a"}}, metav1.CreateOptions{})
	if err := b.ClaimSession(ctx, "sb2"); !errors.As(err, &held) {
		t.Fatalf("claim before the hand-over: %v", err)
	}
	if err := a.ReleaseSession(ctx, "sb2"); err != nil {
		t.Fatal(err)
	}
	if own, _ := a.OwnsSession(ctx, "sb2"); own {
		t.Fatal("released, still owned")
	}
	if err := b.ClaimSession(ctx, "sb2"); err != nil {
		t.Fatalf("claim after the hand-over: %v", err)
	}

	// A restarted session's kernel: the record follows it to its new pod.
	mustCreatePod(t, cs, b, "sb3")
	if err := b.RecordSession(ctx, "sb3", record("int-2")); err != nil {
		t.Fatal(err)
	}
	if _, pod, err := a.FindSession(ctx, "int-2"); pod != "sb3" || err != nil {
		t.Fatalf("record after restart: %q %v", pod, err)
	}

	// What does not lead to a session.
	secrets := cs.CoreV1().Secrets("mcp-forge")
	forge := func(internal string, change func(*corev1.Secret)) {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "mcp-forge", Name: recordName(internal), Labels: map[string]string{LabelCoreNamespace: "mcp-forge-system"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "sb1", UID: "uid-sb1"}}},
			Type: SecretTypeSession, Data: map[string][]byte{recordKey: []byte(`{"client":"mallory","internal":"` + internal + `","resume":"e30="}`)}}
		change(s)
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	forge("wrong-type", func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque })
	forge("wrong-uid", func(s *corev1.Secret) { s.OwnerReferences[0].UID = "uid-other" })
	forge("no-owner", func(s *corev1.Secret) { s.OwnerReferences = nil })
	forge("wrong-session", func(s *corev1.Secret) { s.Data[recordKey] = []byte(`{"internal":"int-1","resume":"e30="}`) })
	forge("no-state", func(s *corev1.Secret) { s.Data[recordKey] = []byte(`{"internal":"no-state"}`) })
	forge("other-deployment", func(s *corev1.Secret) { s.Labels[LabelCoreNamespace] = "other-forge-system" })
	stopped := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mcp-forge", Name: "sb-stopped", UID: "uid-sb-stopped", Labels: map[string]string{runtime.LabelManaged: "true"}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
	cs.CoreV1().Pods("mcp-forge").Create(ctx, stopped, metav1.CreateOptions{})
	forge("stopped", func(s *corev1.Secret) {
		s.OwnerReferences[0].Name, s.OwnerReferences[0].UID = "sb-stopped", "uid-sb-stopped"
	})
	for _, id := range []string{"never", "wrong-type", "wrong-uid", "no-owner", "wrong-session", "no-state", "stopped", "other-deployment"} {
		if r, pod, err := b.FindSession(ctx, id); !errors.Is(err, runtime.ErrNoRecord) {
			t.Errorf("%s: found %+v in %q (%v)", id, r, pod, err)
		}
	}
}

// Of two replicas claiming one pod, the update that names an older
// resourceVersion loses, and says the session is held.
func TestClaimConflict(t *testing.T) {
	ctx := context.Background()
	cs, a, b := recordCluster(t)
	if err := a.RecordSession(ctx, "sb1", record("int-1")); err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseSession(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	cs.PrependReactor("update", "pods", func(k8stesting.Action) (bool, kruntime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "sb1", errors.New("the object has been modified"))
	})
	var held *runtime.HeldError
	if err := b.ClaimSession(ctx, "sb1"); !errors.As(err, &held) {
		t.Fatalf("claim that lost the race: %v", err)
	}
	if adopted(b, "sb1") {
		t.Fatal("a lost claim adopted the pod")
	}
}

// The reaper keeps the recorded session of a gone core for the grace (for
// another replica to claim), then removes it like any orphan.
func TestReapKeepsRecorded(t *testing.T) {
	ctx := context.Background()
	cs, a, b := recordCluster(t)
	if err := a.RecordSession(ctx, "sb1", record("int-1")); err != nil {
		t.Fatal(err)
	}
	cs.CoreV1().Pods("mcp-forge-system").Delete(ctx, "core-a", metav1.DeleteOptions{})
	reaped, err := b.ReapOrphans(ctx)
	if err != nil || len(reaped) != 1 || reaped[0].Container != "sb2" {
		t.Fatalf("first sweep reaped %+v (%v), want the unrecorded sb2 only", reaped, err)
	}
	if reaped, _ := b.ReapOrphans(ctx); len(reaped) != 0 {
		t.Fatalf("within the grace: reaped %+v", reaped)
	}
	b.mu.Lock()
	b.unclaimed["sb1"] = time.Now().Add(-2 * time.Hour)
	b.mu.Unlock()
	if reaped, _ := b.ReapOrphans(ctx); len(reaped) != 1 || reaped[0].Container != "sb1" {
		t.Fatalf("past the grace: reaped %+v", reaped)
	}
}

// A core's successors are its replicas that are not stopping, of any
// revision of its Deployment; none once the Deployment is deleted.
func TestSuccessors(t *testing.T) {
	ctx := context.Background()
	core := func(name, hash string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mcp-forge-system", Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": "forge", "pod-template-hash": hash}}}
	}
	other := core("other-app", "h1")
	other.Labels["app"] = "other"
	cs := fake.NewClientset(core("core-a", "h1"), core("core-b", "h1"), core("core-new", "h2"), other)
	c := replica(t, cs, "mcp-forge-system/core-a", 0)
	if n, err := c.Successors(ctx); n != 2 || err != nil {
		t.Fatalf("successors %d (%v), want core-b and core-new", n, err)
	}
	for _, name := range []string{"core-b", "core-new"} {
		p, _ := cs.CoreV1().Pods("mcp-forge-system").Get(ctx, name, metav1.GetOptions{})
		now := metav1.Now()
		p.DeletionTimestamp = &now
		cs.CoreV1().Pods("mcp-forge-system").Update(ctx, p, metav1.UpdateOptions{})
	}
	if n, err := c.Successors(ctx); n != 0 || err != nil {
		t.Fatalf("successors of a deleted Deployment: %d (%v)", n, err)
	}
}

// What the review found: a pod that names no core is not claimed; a
// session handed over (even back, by a live replica) is reaped once
// nobody claimed it for the grace, a claim resets the grace; a restarted
// core hands over its predecessor's sessions; a record is not moved off
// a live pod another replica serves; and a core does not remove the pod
// of a session another core took over.
func TestSessionRecordEdges(t *testing.T) {
	ctx := context.Background()
	cs, a, b := recordCluster(t)
	pods := cs.CoreV1().Pods("mcp-forge")

	// No core annotation: not claimed.
	p, _ := pods.Get(ctx, "sb2", metav1.GetOptions{})
	delete(p.Annotations, AnnotationCorePod)
	pods.Update(ctx, p, metav1.UpdateOptions{})
	if err := b.ClaimSession(ctx, "sb2"); err == nil || !strings.Contains(err.Error(), "names no core pod") {
		t.Fatalf("claim of a pod of no core: %v", err)
	}

	// Handed over by a live replica, never claimed: reaped past the grace.
	if err := a.RecordSession(ctx, "sb1", record("int-1")); err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseSession(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	if reaped, _ := b.ReapOrphans(ctx); len(reaped) != 0 {
		t.Fatalf("reaped at once: %+v", reaped)
	}
	b.mu.Lock()
	_, waiting := b.unclaimed["sb1"]
	b.mu.Unlock()
	if !waiting {
		t.Fatal("a released session is not waiting for a claim")
	}
	// Claimed: the grace starts again from scratch the next time.
	if err := b.ClaimSession(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	b.ReapOrphans(ctx)
	b.mu.Lock()
	_, waiting = b.unclaimed["sb1"]
	b.mu.Unlock()
	if waiting {
		t.Fatal("a claimed session still counts its wait")
	}

	// A restart in the same pod: the previous process's sessions are handed over.
	if n, err := b.ReleaseAll(ctx); n != 1 || err != nil {
		t.Fatalf("released %d (%v), want sb1", n, err)
	}
	if own, _ := b.OwnsSession(ctx, "sb1"); own {
		t.Fatal("still owned after ReleaseAll")
	}
	b.mu.Lock()
	b.unclaimed["sb1"] = time.Now().Add(-2 * time.Hour)
	b.mu.Unlock()
	if reaped, _ := b.ReapOrphans(ctx); len(reaped) != 1 || reaped[0].Container != "sb1" {
		t.Fatalf("a handed-over session nobody claimed: reaped %+v", reaped)
	}

	// The record of a live session another replica serves stays its own.
	mustCreatePod(t, cs, a, "sb4")
	if err := a.RecordSession(ctx, "sb4", record("int-4")); err != nil {
		t.Fatal(err)
	}
	mustCreatePod(t, cs, b, "sb5")
	if err := b.RecordSession(ctx, "sb5", record("int-4")); err == nil || !strings.Contains(err.Error(), "another replica serves") {
		t.Fatalf("record moved off a live replica's pod: %v", err)
	}
	if _, pod, _ := b.FindSession(ctx, "int-4"); pod != "sb4" {
		t.Fatalf("record now names %q", pod)
	}

	// Taken over by b: a no longer serves it.
	cs.CoreV1().Pods("mcp-forge-system").Delete(ctx, "core-a", metav1.DeleteOptions{})
	if err := b.ClaimSession(ctx, "sb4"); err != nil {
		t.Fatal(err)
	}
	if own, _ := a.OwnsSession(ctx, "sb4"); own {
		t.Fatal("a still owns a session b took over")
	}
}
