package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// usage is a replica's own usage as a test sets it.
type usage struct {
	mu sync.Mutex
	m  map[string]runtime.Usage
}

func (u *usage) set(m map[string]runtime.Usage) {
	u.mu.Lock()
	u.m = m
	u.mu.Unlock()
}

func (u *usage) get() map[string]runtime.Usage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.m
}

// eventually waits for cond, failing with what it last said.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		ok, s := cond()
		if ok {
			return
		}
		last = s
	}
	t.Fatalf("%s: %s", what, last)
}

// Two replicas see each other's usage of a tenant's quotas, never their
// own, as soon as it changes; a replica that stops publishes what it
// still holds (nothing, once its sessions are handed over); the Lease is
// its pod's, and a Lease not renewed in time no longer counts.
func TestSharedQuotas(t *testing.T) {
	cs, a, b := recordCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	actx, stopA := context.WithCancel(ctx)
	var ua, ub usage
	ua.set(map[string]runtime.Usage{"alice": {Sessions: 2, Runs: 1}, "bob": {}})
	qa := a.shareQuotas(actx, ua.get)
	qb := b.shareQuotas(ctx, ub.get)
	eventually(t, "b sees a's usage", func() (bool, string) {
		u, err := qb.Elsewhere("alice")
		return err == nil && u == (runtime.Usage{Sessions: 2, Runs: 1}), "alice elsewhere " + strings.TrimSpace(errText(err)) + " " + useText(u)
	})
	if known, n := qb.Known(); !known || n != 1 {
		t.Errorf("b knows the others' usage: %v, of %d replicas; want true, 1", known, n)
	}
	eventually(t, "a knows the others' usage", func() (bool, string) {
		known, _ := qa.Known()
		return known, "not yet"
	})
	if u, err := qa.Elsewhere("alice"); err != nil || u != (runtime.Usage{}) {
		t.Errorf("a counts its own usage elsewhere: %+v %v", u, err)
	}
	if u, _ := qb.Elsewhere("carol"); u != (runtime.Usage{}) {
		t.Errorf("carol elsewhere %+v", u)
	}

	ub.set(map[string]runtime.Usage{"alice": {Runs: 3}})
	qb.Changed()
	eventually(t, "a sees b's change", func() (bool, string) {
		u, _ := qa.Elsewhere("alice")
		return u == (runtime.Usage{Runs: 3}), useText(u)
	})

	// The Lease: owned by a's pod, the tenant's name hashed.
	l, err := cs.CoordinationV1().Leases("mcp-forge-system").Get(ctx, "mcp-forge-usage-core-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != "uid-a" || l.Labels[LabelUsage] != "true" ||
		strings.Contains(l.Annotations[AnnotationUsage], "alice") || strings.Contains(l.Annotations[AnnotationUsage], "bob") {
		t.Errorf("a's Lease: owners %+v labels %v annotations %v", l.OwnerReferences, l.Labels, l.Annotations)
	}

	// a stops having let go of everything: its last word is nothing.
	ua.set(nil)
	stopA()
	qa.Wait()
	eventually(t, "a's last usage", func() (bool, string) {
		u, _ := qb.Elsewhere("alice")
		return u == (runtime.Usage{}), useText(u)
	})

	// A Lease past its renewal no longer counts (its replica died with its
	// pod still there).
	ua.set(map[string]runtime.Usage{"alice": {Sessions: 1}})
	qa = a.shareQuotas(ctx, ua.get)
	eventually(t, "a again", func() (bool, string) {
		u, _ := qb.Elsewhere("alice")
		return u == (runtime.Usage{Sessions: 1}), useText(u)
	})
	qb.mu.Lock()
	qb.now = func() time.Time { return time.Now().Add(usageExpiry + time.Second) }
	qb.mu.Unlock()
	if u, _ := qb.Elsewhere("alice"); u != (runtime.Usage{}) {
		t.Errorf("an expired Lease counts: %+v", u)
	}
}

// Until the replicas' Leases are read, what they hold is unknown: a quota
// cannot be counted, and says so.
func TestSharedQuotasUnknown(t *testing.T) {
	cs, a, _ := recordCluster(t)
	cs.PrependReactor("list", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		return true, nil, errors.New("leases is forbidden")
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := a.shareQuotas(ctx, func() map[string]runtime.Usage { return nil })
	time.Sleep(50 * time.Millisecond)
	if known, _ := q.Known(); known {
		t.Error("known before the Leases were read")
	}
	if _, err := q.Elsewhere("alice"); !errors.Is(err, ErrUsageUnknown) {
		t.Errorf("elsewhere before the Leases were read: %v", err)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func useText(u runtime.Usage) string { return fmt.Sprintf("%+v", u) }
