package kubernetes

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// AnnotationCorePod names the core pod that made a sandbox, as
// "NAMESPACE/NAME/UID", when the core runs in the cluster
// (runtime.kubernetes.core_pod).
const AnnotationCorePod = "io.mcp-forge.core-pod"

// ReaperLease is the Lease, in the core's namespace, that the replica
// removing other replicas' orphans holds.
const ReaperLease = "mcp-forge-reaper"

// corePod is the core's own pod; labels select its replicas (its own,
// less what differs between a Deployment's revisions).
type corePod struct {
	ns, name, uid string
	labels        map[string]string
}

func (p corePod) String() string { return p.pod() + "/" + p.uid }

// pod is NAMESPACE/NAME.
func (p corePod) pod() string { return p.ns + "/" + p.name }

// parseCorePod reads an AnnotationCorePod value.
func parseCorePod(s string) (corePod, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return corePod{}, false
	}
	return corePod{ns: parts[0], name: parts[1], uid: parts[2]}, true
}

// CorePod is the core's own pod, NAMESPACE/NAME, once identified; "": the
// core runs outside the cluster.
func (c *Client) CorePod() string {
	if c.core.uid == "" {
		return ""
	}
	return c.core.pod()
}

// identify reads the core's own pod: its UID names the host of its
// sandboxes, so that a core restarted in the same pod (a new process, a
// new pid namespace) still finds and reconciles its predecessor's.
func (c *Client) identify(ctx context.Context) error {
	ns, name, _ := strings.Cut(c.k.CorePod, "/")
	cx, cancel := op(ctx)
	defer cancel()
	p, err := c.cs.CoreV1().Pods(ns).Get(cx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("runtime.kubernetes.core_pod: the core's own pod %s: %w (deploy/ sets it from the downward API; the core needs get on pods of its namespace)", c.k.CorePod, err)
	}
	c.core = corePod{ns: ns, name: name, uid: string(p.UID), labels: map[string]string{}}
	for k, v := range p.Labels {
		if k != "pod-template-hash" && k != "controller-revision-hash" {
			c.core.labels[k] = v
		}
	}
	c.hostID = labelHash("pod", c.core.uid)
	return nil
}

// Reaped is a sandbox pod removed because the core pod that made it is gone.
type Reaped struct {
	Pod, Session, Image string
	LeftBy              string // the core pod, NAMESPACE/NAME
	Err                 error
}

// ReapOrphans removes the sandbox pods whose core pod no longer exists
// (deleted, evicted, replaced by a pod of the same name): nothing else
// removes them, since each core reconciles only its own. A core pod that
// cannot be read for another reason keeps its sandboxes until a later sweep.
func (c *Client) ReapOrphans(ctx context.Context) ([]Reaped, error) {
	cx, cancel := op(ctx)
	list, err := c.cs.CoreV1().Pods(c.k.Namespace).List(cx, metav1.ListOptions{LabelSelector: labels.Set{runtime.LabelManaged: "true"}.String()})
	cancel()
	if err != nil {
		return nil, fail("list", "(all)", err)
	}
	alive := map[string]bool{c.core.String(): true}
	var out []Reaped
	listed := map[string]bool{}
	for i := range list.Items {
		p := &list.Items[i]
		listed[p.Name] = true
		owner, ok := parseCorePod(p.Annotations[AnnotationCorePod])
		if !ok || p.DeletionTimestamp != nil {
			continue // none (a core outside the cluster), or not ours to judge
		}
		live, seen := alive[owner.String()]
		if !seen {
			live = c.coreAlive(ctx, owner)
			alive[owner.String()] = live
		}
		recorded := p.Labels[runtime.LabelRecorded] == "true"
		// A session handed over waits for a claim even while the core
		// that let it go lives.
		released := recorded && p.Annotations[AnnotationReleased] != ""
		if (live && !released) || ctx.Err() != nil {
			c.claimed(p.Name)
			continue
		}
		if recorded && !c.unclaimedTooLong(p.Name, time.Now()) {
			continue // another replica may take its session over
		}
		zero := int64(0)
		cx, cancel := op(ctx)
		// In the version listed: a replica that claimed the session
		// since keeps it.
		err := c.cs.CoreV1().Pods(c.k.Namespace).Delete(cx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
			Preconditions: &metav1.Preconditions{UID: &p.UID, ResourceVersion: &p.ResourceVersion}})
		cancel()
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue
		}
		img := ""
		for _, ct := range p.Spec.Containers {
			if ct.Name == containerSandbox {
				img = ct.Image
			}
		}
		out = append(out, Reaped{Pod: p.Name, Session: specLabels(p)[runtime.LabelSession], Image: img, LeftBy: owner.pod(), Err: err})
	}
	c.mu.Lock()
	for pod := range c.unclaimed {
		if !listed[pod] {
			delete(c.unclaimed, pod)
		}
	}
	c.mu.Unlock()
	return out, nil
}

// claimed forgets when the reaper found pod waiting for a claim: a live
// core serves it (again).
func (c *Client) claimed(pod string) {
	c.mu.Lock()
	delete(c.unclaimed, pod)
	c.mu.Unlock()
}

// unclaimedTooLong: the recorded session of a gone core in pod has waited
// for another replica to claim it for longer than sessions.idle_timeout
// (from when this reaper first found it so), the idle bound it would have
// had under its own core.
func (c *Client) unclaimedTooLong(pod string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	since, ok := c.unclaimed[pod]
	if !ok {
		c.unclaimed[pod] = now
		return false
	}
	if now.Sub(since) < c.sessionGrace {
		return false
	}
	delete(c.unclaimed, pod)
	return true
}

// terminatingMargin is how long past its grace period a core pod may stay
// Terminating before it counts as dead: a pod of a lost node stays
// Terminating until the Node object goes.
const terminatingMargin = 30 * time.Second

// coreAlive: the pod NAMESPACE/NAME/UID exists with that UID and has not
// ended (an evicted pod stays, Failed, until pod GC) or outstayed its
// grace period. Only an answer that it does not counts as dead.
func (c *Client) coreAlive(ctx context.Context, owner corePod) bool {
	cx, cancel := op(ctx)
	defer cancel()
	p, err := c.cs.CoreV1().Pods(owner.ns).Get(cx, owner.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false
	case err != nil:
		c.log.Warn("cannot tell whether a core pod is alive; its sandboxes stay", "pod", owner.pod(), "error", err)
		return true
	}
	return coreRunning(p, owner.uid, time.Now())
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

// RunReaper sweeps for orphans every interval while this replica holds
// the ReaperLease, so that one replica at a time does it, until ctx ends.
// record sees each pod removed. It does nothing for a core outside the
// cluster (no core_pod).
func (c *Client) RunReaper(ctx context.Context, every time.Duration, record func(Reaped)) {
	if c.core.uid == "" {
		return
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.core.ns, Name: ReaperLease},
		Client:     c.cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.core.name},
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: true, Name: ReaperLease,
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					c.log.Info("holding the reaper's Lease: removing the sandboxes of core pods that are gone", "lease", c.core.ns+"/"+ReaperLease)
					t := time.NewTicker(every)
					defer t.Stop()
					for {
						reaped, err := c.ReapOrphans(lctx)
						if err != nil && lctx.Err() == nil {
							c.log.Warn("orphan sweep failed", "error", err)
						}
						for _, r := range reaped {
							record(r)
						}
						select {
						case <-lctx.Done():
							return
						case <-t.C:
						}
					}
				},
				OnStoppedLeading: func() { c.log.Debug("reaper's Lease released or lost") },
			},
		})
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
