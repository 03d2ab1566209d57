package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Sessions recorded in the cluster (runtime.SessionStore), so that any
// replica of a core in the cluster can take a session over from one that
// is gone. The record is a Secret owned by the session's pod: only the
// core's service account reads Secrets (a sandbox has no token), the
// kernel's key in it never reaches a label, and the garbage collector
// removes it with the pod. Which core serves the session is the pod's
// LabelHost, changed only by an update that names the pod's
// resourceVersion, so two replicas claiming at once cannot both win.

// SecretTypeSession is the type of a session record's Secret.
const SecretTypeSession corev1.SecretType = "mcp-forge.io/session"

// AnnotationReleased marks a session pod whose core handed it over
// (stopping gracefully): any replica may claim it at once.
const AnnotationReleased = "io.mcp-forge.released"

// LabelCoreNamespace marks a session record with the namespace of the
// core that wrote it: deployments sharing a sandbox namespace (each with
// its core namespace) never take each other's sessions over.
const LabelCoreNamespace = "io.mcp-forge.core-namespace"

// recordKey is the record's key in the Secret's data.
const recordKey = "record"

// recordName is the Secret of session internal's record: a hash, since an
// internal id is longer than a name may be and says whose session it is.
func recordName(internal string) string { return "mcp-forge-session-" + LabelHash("session", internal) }

// RecordSession implements runtime.SessionStore.
func (c *Cluster) RecordSession(ctx context.Context, pod string, r runtime.SessionRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	cx, cancel := op(ctx)
	defer cancel()
	p, err := c.getPod(cx, pod)
	if err != nil {
		return err
	}
	if p.DeletionTimestamp != nil {
		return fmt.Errorf("pod %s is being deleted", pod)
	}
	if p.Labels[LabelHost] != c.host {
		return fmt.Errorf("pod %s is not this core's: it records only the sessions it serves", pod)
	}
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: recordName(r.Internal), Namespace: c.ns,
			Labels:          map[string]string{runtime.LabelManaged: "true", LabelCoreNamespace: c.self.NS},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}},
		},
		Type: SecretTypeSession,
		Data: map[string][]byte{recordKey: data},
	}
	secrets := c.cs.CoreV1().Secrets(c.ns)
	if _, err := secrets.Create(cx, want, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		// A restarted session's new kernel: the record moves to its pod.
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			have, err := secrets.Get(cx, want.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if have.Type != SecretTypeSession {
				return fmt.Errorf("secret %s is not a session record (type %q)", want.Name, have.Type)
			}
			if err := c.recordFree(cx, have, p.UID); err != nil {
				return err
			}
			have.OwnerReferences, have.Data, have.Labels = want.OwnerReferences, want.Data, want.Labels
			_, err = secrets.Update(cx, have, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("update session record %s: %w", want.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("create session record %s: %w", want.Name, err)
	}
	err = c.updatePod(cx, pod, func(p *corev1.Pod) error {
		if p.UID != want.OwnerReferences[0].UID {
			return fmt.Errorf("pod %s was replaced while its session was recorded", pod)
		}
		p.Labels[runtime.LabelRecorded] = "true"
		return nil
	})
	if err == nil {
		c.pods.Recorded(pod)
	}
	return err
}

// getPod reads a sandbox pod.
func (c *Cluster) getPod(ctx context.Context, pod string) (*corev1.Pod, error) {
	p, err := c.cs.CoreV1().Pods(c.ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return nil, fail("get", pod, err)
	}
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	return p, nil
}

// recordFree refuses to move a session's record away from a live pod
// another core serves: this core opened a session of that id without
// taking it over (it could not), and the record stays the other's.
func (c *Cluster) recordFree(ctx context.Context, have *corev1.Secret, to types.UID) error {
	for _, o := range have.OwnerReferences {
		if o.Kind != "Pod" || o.UID == to {
			continue
		}
		p, err := c.cs.CoreV1().Pods(c.ns).Get(ctx, o.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return fail("get", o.Name, err)
		}
		if p.UID == o.UID && p.DeletionTimestamp == nil && p.Labels[LabelHost] != c.host {
			return fmt.Errorf("the session is recorded for pod %s, which another replica serves", o.Name)
		}
	}
	return nil
}

// updatePod applies change to the pod and updates it, again on a conflict.
func (c *Cluster) updatePod(ctx context.Context, pod string, change func(*corev1.Pod) error) error {
	pods := c.cs.CoreV1().Pods(c.ns)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := c.getPod(ctx, pod)
		if err != nil {
			return err
		}
		if err := change(p); err != nil {
			return err
		}
		_, err = pods.Update(ctx, p, metav1.UpdateOptions{})
		return err
	})
}

// FindSession implements runtime.SessionStore: the record must be a
// session Secret owned by the very pod (its UID) it names, of the session
// asked, and the pod's sandbox still running. Anything else is no record:
// labels and annotations alone never lead to a session.
func (c *Cluster) FindSession(ctx context.Context, internal string) (runtime.SessionRecord, string, error) {
	cx, cancel := op(ctx)
	defer cancel()
	s, err := c.cs.CoreV1().Secrets(c.ns).Get(cx, recordName(internal), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return runtime.SessionRecord{}, "", runtime.ErrNoRecord
	} else if err != nil {
		return runtime.SessionRecord{}, "", fmt.Errorf("read session record: %w", err)
	}
	var r runtime.SessionRecord
	if s.Labels[LabelCoreNamespace] != c.self.NS {
		// Another deployment's, sharing the sandbox namespace.
		return runtime.SessionRecord{}, "", runtime.ErrNoRecord
	}
	if s.Type != SecretTypeSession || json.Unmarshal(s.Data[recordKey], &r) != nil || r.Internal != internal || len(r.Resume) == 0 {
		c.log.Warn("a session record that is not one of ours; ignored", "secret", s.Name, "type", s.Type)
		return runtime.SessionRecord{}, "", runtime.ErrNoRecord
	}
	var owner *metav1.OwnerReference
	for i := range s.OwnerReferences {
		if o := &s.OwnerReferences[i]; o.Kind == "Pod" && o.APIVersion == "v1" {
			owner = o
		}
	}
	if owner == nil {
		return runtime.SessionRecord{}, "", runtime.ErrNoRecord
	}
	p, err := c.cs.CoreV1().Pods(c.ns).Get(cx, owner.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return runtime.SessionRecord{}, "", runtime.ErrNoRecord
	} else if err != nil {
		return runtime.SessionRecord{}, "", fail("get", owner.Name, err)
	}
	if p.UID != owner.UID || p.Labels[runtime.LabelManaged] != "true" || p.DeletionTimestamp != nil {
		return runtime.SessionRecord{}, "", runtime.ErrNoRecord
	}
	if c.pods.Describe(p).Ended || p.Status.Phase != corev1.PodRunning {
		return runtime.SessionRecord{}, "", runtime.ErrNoRecord
	}
	return r, p.Name, nil
}

// ReleaseAll implements runtime.SessionStore.
func (c *Cluster) ReleaseAll(ctx context.Context) (int, error) {
	cx, cancel := op(ctx)
	defer cancel()
	sel := labels.Set{runtime.LabelManaged: "true", LabelHost: c.host, runtime.LabelRecorded: "true"}
	list, err := c.cs.CoreV1().Pods(c.ns).List(cx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return 0, fail("list", "(recorded)", err)
	}
	n := 0
	var errs []error
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || p.Annotations[AnnotationReleased] != "" {
			continue
		}
		if err := c.ReleaseSession(ctx, p.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// ClaimSession implements runtime.SessionStore: a pod served by a core pod
// that is gone, or handed over, becomes this core's.
func (c *Cluster) ClaimSession(ctx context.Context, pod string) error {
	cx, cancel := op(ctx)
	defer cancel()
	p, err := c.getPod(cx, pod)
	if err != nil {
		return err
	}
	if by, err := c.heldBy(ctx, p); err != nil {
		return err
	} else if by != "" {
		return &runtime.HeldError{By: by}
	}
	p.Labels[LabelHost] = c.host
	p.Annotations[AnnotationCorePod] = c.self.String()
	delete(p.Annotations, AnnotationReleased)
	// The resourceVersion read above: of two replicas claiming at once,
	// the second update is refused.
	made, err := c.cs.CoreV1().Pods(c.ns).Update(cx, p, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return &runtime.HeldError{}
	} else if err != nil {
		return fail("update", pod, err)
	}
	c.pods.Adopt(made)
	return nil
}

// heldBy is the live other core serving sandbox pod p, "" when p is this
// core's, handed over, or its core is gone.
func (c *Cluster) heldBy(ctx context.Context, p *corev1.Pod) (string, error) {
	if p.Labels[LabelHost] == c.host || p.Annotations[AnnotationReleased] != "" {
		return "", nil
	}
	owner, ok := parseCorePod(p.Annotations[AnnotationCorePod])
	if !ok {
		return "", fmt.Errorf("pod %s names no core pod that serves it (annotation %s): not claimed", p.Name, AnnotationCorePod)
	}
	if c.coreAlive(ctx, owner) {
		return owner.Pod(), nil
	}
	return "", nil
}

// Holder implements runtime.SessionStore.
func (c *Cluster) Holder(ctx context.Context, pod string) (string, error) {
	cx, cancel := op(ctx)
	defer cancel()
	p, err := c.getPod(cx, pod)
	if err != nil {
		return "", err
	}
	return c.heldBy(ctx, p)
}

// OwnsSession implements runtime.SessionStore.
func (c *Cluster) OwnsSession(ctx context.Context, pod string) (bool, error) {
	cx, cancel := op(ctx)
	defer cancel()
	p, err := c.getPod(cx, pod)
	if err != nil {
		return false, err
	}
	return p.Labels[LabelHost] == c.host && p.Annotations[AnnotationReleased] == "", nil
}

// ReleaseSession implements runtime.SessionStore; the pod leaves this
// core's reconciliation too.
func (c *Cluster) ReleaseSession(ctx context.Context, pod string) error {
	cx, cancel := op(ctx)
	defer cancel()
	err := c.updatePod(cx, pod, func(p *corev1.Pod) error {
		if p.Labels[LabelHost] != c.host {
			return fmt.Errorf("pod %s is not this core's to hand over", pod)
		}
		p.Annotations[AnnotationReleased] = c.self.String()
		return nil
	})
	if err == nil {
		c.pods.Forget(pod)
	}
	return err
}

// Forget implements runtime.SessionStore.
func (c *Cluster) Forget(pod string) { c.pods.Forget(pod) }

// Successors implements runtime.SessionStore: the core's other replicas
// (pods with its labels) that are not stopping, a new revision's too. When
// the Deployment itself is deleted there are none, and the sessions close.
func (c *Cluster) Successors(ctx context.Context) (int, error) {
	if len(c.self.Labels) == 0 {
		return 0, nil
	}
	cx, cancel := op(ctx)
	defer cancel()
	list, err := c.cs.CoreV1().Pods(c.self.NS).List(cx, metav1.ListOptions{LabelSelector: labels.Set(c.self.Labels).String()})
	if err != nil {
		return 0, fmt.Errorf("list the core's replicas: %w", err)
	}
	n := 0
	for _, p := range list.Items {
		if string(p.UID) != c.self.UID && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			n++
		}
	}
	return n, nil
}

// ReplicaAddress is the pod address of replica ("NAMESPACE/NAME", as a
// HeldError names it), to forward a call there: a pod of this core's
// namespace with its labels (another replica of the same Deployment, of
// any revision), running, not being deleted. Anything else is an error,
// so a call is never sent to a pod that is not one of the core's.
func (c *Cluster) ReplicaAddress(ctx context.Context, replica string) (string, error) {
	ns, name, _ := strings.Cut(replica, "/")
	if ns != c.self.NS || name == "" || len(c.self.Labels) == 0 {
		return "", fmt.Errorf("%s is not a replica of this core (its namespace is %s)", replica, c.self.NS)
	}
	cx, cancel := op(ctx)
	defer cancel()
	p, err := c.cs.CoreV1().Pods(ns).Get(cx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("replica %s: %w", replica, err)
	}
	for k, v := range c.self.Labels {
		if p.Labels[k] != v {
			return "", fmt.Errorf("pod %s is not a replica of this core (label %s)", replica, k)
		}
	}
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return "", fmt.Errorf("replica %s is not running (phase %s, being deleted: %v, address %q)", replica, p.Status.Phase, p.DeletionTimestamp != nil, p.Status.PodIP)
	}
	return p.Status.PodIP, nil
}
