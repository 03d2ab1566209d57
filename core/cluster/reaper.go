package cluster

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// ReaperLease is the Lease, in the core's namespace, that the replica
// removing other replicas' orphans holds.
const ReaperLease = "mcp-forge-reaper"

// ReapOrphans removes the sandbox pods whose core pod no longer exists
// (deleted, evicted, replaced by a pod of the same name): nothing else
// removes them, since each core reconciles only its own. A core pod that
// cannot be read for another reason keeps its sandboxes until a later sweep.
func (c *Cluster) ReapOrphans(ctx context.Context) ([]runtime.Reaped, error) {
	cx, cancel := op(ctx)
	list, err := c.cs.CoreV1().Pods(c.ns).List(cx, metav1.ListOptions{LabelSelector: labels.Set{runtime.LabelManaged: "true"}.String()})
	cancel()
	if err != nil {
		return nil, fail("list", "(all)", err)
	}
	alive := map[string]bool{c.self.String(): true}
	var out []runtime.Reaped
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
		err := c.cs.CoreV1().Pods(c.ns).Delete(cx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
			Preconditions: &metav1.Preconditions{UID: &p.UID, ResourceVersion: &p.ResourceVersion}})
		cancel()
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue
		}
		sb := c.pods.Describe(p)
		out = append(out, runtime.Reaped{Container: p.Name, Session: sb.Session, Image: sb.Image, LeftBy: owner.Pod(), Err: err})
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
func (c *Cluster) claimed(pod string) {
	c.mu.Lock()
	delete(c.unclaimed, pod)
	c.mu.Unlock()
}

// unclaimedTooLong: the recorded session of a gone core in pod has waited
// for another replica to claim it for longer than sessions.idle_timeout
// (from when this reaper first found it so), the idle bound it would have
// had under its own core.
func (c *Cluster) unclaimedTooLong(pod string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	since, ok := c.unclaimed[pod]
	if !ok {
		c.unclaimed[pod] = now
		return false
	}
	if now.Sub(since) < c.grace {
		return false
	}
	delete(c.unclaimed, pod)
	return true
}

// RunReaper sweeps for orphans every interval while this replica holds
// the ReaperLease, so that one replica at a time does it, until ctx ends.
// record sees each pod removed. It does nothing for a core outside the
// cluster (no core_pod).
func (c *Cluster) RunReaper(ctx context.Context, every time.Duration, record func(runtime.Reaped)) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.self.NS, Name: ReaperLease},
		Client:     c.cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.self.Name},
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: true, Name: ReaperLease,
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					c.log.Info("holding the reaper's Lease: removing the sandboxes of core pods that are gone", "lease", c.self.NS+"/"+ReaperLease)
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
