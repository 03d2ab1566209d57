// Package cluster coordinates the replicas of a core that runs in a
// Kubernetes cluster, apart from the runtime that runs its sandboxes as
// pods: sessions recorded for another replica to take over (records.go),
// the tenants' quotas shared through usage Leases (quotas.go), and the
// reaper of the sandboxes of core pods that are gone (reaper.go). It
// reaches the cluster's API through client-go and the runtime through
// Pods, the little it needs of the runtime's own bookkeeping; the runtime
// declares what it provides as runtime.Capabilities.
package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// LabelHost marks the pods of the cores of one host (one process
// namespace), or of one core pod when the core runs in the cluster (its
// UID: see Identify): a core tells a live neighbour from a dead one by its
// process (core/procid), which only means something on the same host, so
// it lists, adopts and removes only the pods of its host's cores. Cores
// on other hosts sharing a namespace leave each other's pods alone; the
// sandboxes of core pods that are gone are the reaper's (reaper.go).
const LabelHost = "io.mcp-forge.host"

// AnnotationCorePod names the core pod that made a sandbox, as
// "NAMESPACE/NAME/UID", when the core runs in the cluster
// (runtime.kubernetes.core_pod).
const AnnotationCorePod = "io.mcp-forge.core-pod"

// opTimeout bounds an API call that should return promptly.
const opTimeout = 60 * time.Second

func op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, opTimeout)
}

// LabelHash is parts, joined, hashed to a label value.
func LabelHash(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:8])
}

// CorePod is the core's own pod; Labels select its replicas (its own,
// less what differs between a Deployment's revisions).
type CorePod struct {
	NS, Name, UID string
	Labels        map[string]string
}

func (p CorePod) String() string { return p.Pod() + "/" + p.UID }

// Pod is NAMESPACE/NAME.
func (p CorePod) Pod() string { return p.NS + "/" + p.Name }

// Host is the LabelHost value of the sandboxes this core pod serves: a
// core restarted in the same pod (a new process, a new pid namespace)
// still finds and reconciles its predecessor's.
func (p CorePod) Host() string { return LabelHash("pod", p.UID) }

// parseCorePod reads an AnnotationCorePod value.
func parseCorePod(s string) (CorePod, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return CorePod{}, false
	}
	return CorePod{NS: parts[0], Name: parts[1], UID: parts[2]}, true
}

// Identify reads the core's own pod, "NAMESPACE/NAME"
// (runtime.kubernetes.core_pod).
func Identify(ctx context.Context, cs kubernetes.Interface, pod string) (CorePod, error) {
	ns, name, _ := strings.Cut(pod, "/")
	cx, cancel := op(ctx)
	defer cancel()
	p, err := cs.CoreV1().Pods(ns).Get(cx, name, metav1.GetOptions{})
	if err != nil {
		return CorePod{}, fmt.Errorf("runtime.kubernetes.core_pod: the core's own pod %s: %w (deploy/ sets it from the downward API; the core needs get on pods of its namespace)", pod, err)
	}
	self := CorePod{NS: ns, Name: name, UID: string(p.UID), Labels: map[string]string{}}
	for k, v := range p.Labels {
		if k != "pod-template-hash" && k != "controller-revision-hash" {
			self.Labels[k] = v
		}
	}
	return self, nil
}

// Sandbox is what the coordination reads of a sandbox pod, as the runtime
// that made it says.
type Sandbox struct {
	Session, Image string
	Ended          bool // its sandbox container ended
}

// Pods is what the coordination needs of the runtime whose sandbox pods it
// coordinates: what a pod runs, and the runtime's own bookkeeping of the
// pods it serves, as sessions change hands.
type Pods interface {
	// Describe reads a sandbox pod.
	Describe(p *corev1.Pod) Sandbox
	// Adopt learns a pod whose session this core took over.
	Adopt(p *corev1.Pod)
	// Forget drops a pod this core no longer serves: its channels end.
	Forget(pod string)
	// Recorded marks a pod whose session is recorded: another core may
	// serve it, so removing it checks first.
	Recorded(pod string)
}

// Cluster is the coordination of one core pod with its replicas.
type Cluster struct {
	cs    kubernetes.Interface
	ns    string  // the sandboxes' namespace
	self  CorePod // this core's pod
	host  string  // the LabelHost of its sandboxes
	pods  Pods
	log   hclog.Logger
	grace time.Duration

	// The reaper keeps the recorded sessions of a gone core for grace
	// (records.go), from when it first found each.
	mu        sync.Mutex
	unclaimed map[string]time.Time
}

// Options are what the coordination takes beyond the API and the runtime.
type Options struct {
	// Namespace holds the sandbox pods and the session records.
	Namespace string
	// SessionGrace is how long the reaper keeps the recorded session of
	// a core pod that is gone for another replica to claim
	// (sessions.idle_timeout).
	SessionGrace time.Duration
	Log          hclog.Logger
}

// New coordinates the core in pod self (Identify) with its replicas.
func New(cs kubernetes.Interface, self CorePod, pods Pods, o Options) *Cluster {
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	return &Cluster{cs: cs, ns: o.Namespace, self: self, host: self.Host(), pods: pods, log: o.Log, grace: o.SessionGrace, unclaimed: map[string]time.Time{}}
}

// Self is the core's own pod, NAMESPACE/NAME.
func (c *Cluster) Self() string { return c.self.Pod() }

var (
	_ runtime.SessionStore = (*Cluster)(nil)
	_ runtime.Reaper       = (*Cluster)(nil)
	_ runtime.QuotaSharer  = (*Cluster)(nil)
	_ runtime.Replicas     = (*Cluster)(nil)
)

// Capabilities are what the coordination gives a runtime's capabilities.
func (c *Cluster) Capabilities(caps runtime.Capabilities) runtime.Capabilities {
	caps.Sessions, caps.Reaper, caps.Quotas, caps.Replicas = c, c, c, c
	return caps
}

// fail is Fail.
func fail(what, id string, err error) error { return Fail(what, id, err) }

// Fail wraps an API error with what was done and to which pod, and says
// which permission a refusal lacks.
func Fail(what, id string, err error) error {
	if err == nil {
		return nil
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%s of pod %s: %w (the core's Role lacks this permission: docs/kubernetes.md lists it)", what, id, err)
	}
	return fmt.Errorf("%s of pod %s: %w", what, id, err)
}

// terminatingMargin is how long past its grace period a core pod may stay
// Terminating before it counts as dead: a pod of a lost node stays
// Terminating until the Node object goes.
const terminatingMargin = 30 * time.Second

// coreAlive: the pod NAMESPACE/NAME/UID exists with that UID and has not
// ended (an evicted pod stays, Failed, until pod GC) or outstayed its
// grace period. Only an answer that it does not counts as dead.
func (c *Cluster) coreAlive(ctx context.Context, owner CorePod) bool {
	cx, cancel := op(ctx)
	defer cancel()
	p, err := c.cs.CoreV1().Pods(owner.NS).Get(cx, owner.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false
	case err != nil:
		c.log.Warn("cannot tell whether a core pod is alive; its sandboxes stay", "pod", owner.Pod(), "error", err)
		return true
	}
	return coreRunning(p, owner.UID, time.Now())
}

func coreRunning(p *corev1.Pod, uid string, now time.Time) bool {
	if string(p.UID) != uid || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false
	}
	if d := p.DeletionTimestamp; d != nil {
		// The deletion timestamp is when the grace period ends.
		return now.Before(d.Add(terminatingMargin))
	}
	return true
}
