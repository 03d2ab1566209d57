package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	leaseinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// LabelUsage marks the Leases, one per replica of a core in the cluster,
// in which each replica publishes what it holds of every tenant's quotas
// (AnnotationUsage), so that a quota holds across replicas.
const LabelUsage = "io.mcp-forge.usage"

// AnnotationUsage holds a replica's usage: JSON, tenant (hashed) → use.
const AnnotationUsage = "io.mcp-forge.usage"

// Timing of the usage Leases: a replica renews its own every usageRenew,
// and its usage stops counting usageExpiry after its last renewal (a
// replica that died but whose pod is still there: a lost node).
const (
	usageRenew  = 5 * time.Second
	usageExpiry = 15 * time.Second
	// usageGap bounds the writes of a busy replica to 10 a second; the
	// others' wait for news of a run just over (tenant: 300 ms) covers it.
	usageGap = 100 * time.Millisecond
	// maxUse bounds what a Lease may say of one tenant (counts are sums).
	maxUse = 1 << 20
)

// use is what one replica holds of one tenant's quotas, as a Lease says
// it (runtime.Usage).
type use struct {
	Sessions int `json:"s,omitempty"`
	Runs     int `json:"r,omitempty"`
}

// ErrUsageUnknown: the other replicas' usage is not known yet (the watch
// of their Leases has not synced), so a quota cannot be counted.
var ErrUsageUnknown = errors.New("the other replicas' usage of the quotas is not known yet")

// Quotas shares this replica's usage of tenants' quotas with its
// replicas and sums theirs: each replica's Lease (owned by its pod, so it
// goes with it) is rewritten whenever its usage changes, and the others'
// are watched, so counting what the others hold costs no API call.
type Quotas struct {
	c     *Cluster
	lease string
	local func() map[string]runtime.Usage // this replica's usage, by tenant name
	kick  chan struct{}
	now   func() time.Time
	done  chan struct{} // closed once the last usage is written

	mu     sync.Mutex
	synced bool
	others map[string]published // Lease name → what it says
	hashes map[string]string    // tenant name → its key in a Lease
}

type published struct {
	use     map[string]use // by hashed tenant
	expires time.Time
}

// tenantKey is how a tenant is named in a Lease: a hash, so that tenant
// names stay out of the cluster's objects.
func tenantKey(name string) string { return LabelHash("tenant", name) }

// ShareQuotas starts sharing this replica's usage (local, called after
// each Changed and at every renewal) until ctx ends, when it writes the
// usage a last time (Wait waits for that). It returns at once; Elsewhere
// fails with ErrUsageUnknown until the other replicas' Leases were read.
func (c *Cluster) ShareQuotas(ctx context.Context, local func() map[string]runtime.Usage) runtime.SharedQuotas {
	return c.shareQuotas(ctx, local)
}

func (c *Cluster) shareQuotas(ctx context.Context, local func() map[string]runtime.Usage) *Quotas {
	q := &Quotas{c: c, lease: "mcp-forge-usage-" + c.self.Name, local: local, kick: make(chan struct{}, 1), now: time.Now, done: make(chan struct{}),
		others: map[string]published{}, hashes: map[string]string{}}
	go q.publish(ctx)
	go q.watch(ctx)
	return q
}

// Changed tells that this replica's usage changed: it is published at
// once (changes meanwhile go out together). It never blocks.
func (q *Quotas) Changed() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Elsewhere is what the other live replicas hold of tenant's quotas, as
// they last published it.
func (q *Quotas) Elsewhere(tenant string) (runtime.Usage, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.synced {
		return runtime.Usage{}, ErrUsageUnknown
	}
	key, ok := q.hashes[tenant]
	if !ok {
		key = tenantKey(tenant)
		q.hashes[tenant] = key
	}
	var sum runtime.Usage
	now := q.now()
	for name, p := range q.others {
		if name == q.lease || now.After(p.expires) {
			continue
		}
		u := p.use[key]
		sum.Sessions += u.Sessions
		sum.Runs += u.Runs
	}
	return sum, nil
}

// Wait returns once the usage was written a last time after ShareQuotas'
// ctx ended.
func (q *Quotas) Wait() { <-q.done }

// Known says whether the other replicas' usage is known (their Leases
// were read), and how many other live replicas publish theirs: a replica
// is not ready before.
func (q *Quotas) Known() (bool, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, now := 0, q.now()
	for name, p := range q.others {
		if name != q.lease && !now.After(p.expires) {
			n++
		}
	}
	return q.synced, n
}

// publish writes this replica's Lease on every change and renewal, and
// once more when ctx ends: what a stopping replica handed over or closed
// no longer counts.
func (q *Quotas) publish(ctx context.Context) {
	defer close(q.done)
	t := time.NewTicker(usageRenew)
	defer t.Stop()
	var last *coordinationv1.Lease
	for {
		start := time.Now()
		var err error
		if last, err = q.write(ctx, last); err != nil && ctx.Err() == nil {
			q.c.log.Warn("could not publish this replica's usage of the tenants' quotas", "lease", q.c.self.NS+"/"+q.lease, "error", err)
		}
		// At most one write per usageGap, whatever the calls' pace: the
		// changes meanwhile go out together.
		if d := usageGap - time.Since(start); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		select {
		case <-ctx.Done():
			if _, err := q.write(context.WithoutCancel(ctx), last); err != nil {
				q.c.log.Warn("could not publish this replica's usage of the tenants' quotas as it stops", "lease", q.c.self.NS+"/"+q.lease, "error", err)
			}
			return
		case <-q.kick:
		case <-t.C:
		}
	}
}

// write puts the current usage in the Lease: an update of the version
// last written, else (a conflict, the first time) of the one read now,
// else a new Lease owned by this replica's pod.
func (q *Quotas) write(ctx context.Context, last *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	held := map[string]use{}
	for name, u := range q.local() {
		if u != (runtime.Usage{}) {
			held[tenantKey(name)] = use(u)
		}
	}
	raw, err := json.Marshal(held)
	if err != nil {
		return last, err
	}
	cx, cancel := op(ctx)
	defer cancel()
	leases := q.c.cs.CoordinationV1().Leases(q.c.self.NS)
	fill := func(l *coordinationv1.Lease) {
		now := metav1.NewMicroTime(q.now())
		secs := int32(usageExpiry / time.Second)
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &q.c.self.Name, &secs, &now
		if l.Labels == nil {
			l.Labels = map[string]string{}
		}
		l.Labels[LabelUsage] = "true"
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[AnnotationUsage] = string(raw)
	}
	if last != nil {
		l := last.DeepCopy()
		fill(l)
		if out, err := leases.Update(cx, l, metav1.UpdateOptions{}); err == nil {
			return out, nil
		} else if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("update: %w", err)
		}
	}
	l, err := leases.Get(cx, q.lease, metav1.GetOptions{})
	switch {
	case err == nil:
		fill(l)
		out, err := leases.Update(cx, l, metav1.UpdateOptions{})
		if err != nil {
			return nil, fmt.Errorf("update: %w", err)
		}
		return out, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get: %w", err)
	}
	yes := true
	l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: q.lease, Namespace: q.c.self.NS,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: q.c.self.Name, UID: types.UID(q.c.self.UID), Controller: &yes}}}}
	fill(l)
	out, err := leases.Create(cx, l, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	return out, nil
}

// watch keeps what the replicas' Leases say, until ctx ends.
func (q *Quotas) watch(ctx context.Context) {
	inf := leaseinformers.NewFilteredLeaseInformer(q.c.cs, q.c.self.NS, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = LabelUsage + "=true" })
	put := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			q.mu.Lock()
			q.others[l.Name] = q.readUsage(l)
			q.mu.Unlock()
		}
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: put,
		UpdateFunc: func(old, obj any) {
			// A relist hands back Leases unchanged: that is no renewal.
			if o, ok := old.(*coordinationv1.Lease); ok {
				if l, ok := obj.(*coordinationv1.Lease); ok && o.ResourceVersion != "" && o.ResourceVersion == l.ResourceVersion {
					return
				}
			}
			put(obj)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				q.mu.Lock()
				delete(q.others, l.Name)
				q.mu.Unlock()
			}
		},
	})
	go inf.Run(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		q.mu.Lock()
		q.synced = true
		q.mu.Unlock()
	}
}

// readUsage is what a Lease says, seen now: it counts until usageExpiry
// from now unless written again (renewals come every usageRenew), by this
// replica's clock, whatever the writer's says; a count below zero is none,
// and a Lease that says nothing readable counts for nothing.
func (q *Quotas) readUsage(l *coordinationv1.Lease) published {
	p := published{use: map[string]use{}, expires: q.now().Add(usageExpiry)}
	var said map[string]use
	if json.Unmarshal([]byte(l.Annotations[AnnotationUsage]), &said) == nil {
		for k, u := range said {
			p.use[k] = use{Sessions: min(max(u.Sessions, 0), maxUse), Runs: min(max(u.Runs, 0), maxUse)}
		}
	}
	return p
}
