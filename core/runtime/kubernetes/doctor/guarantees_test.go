package doctor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

func netpol(name string, sel map[string]string, types []networkingv1.PolicyType, edit func(*networkingv1.NetworkPolicySpec)) *networkingv1.NetworkPolicy {
	p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sandboxes"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: sel}, PolicyTypes: types}}
	if edit != nil {
		edit(&p.Spec)
	}
	return p
}

// Each configuration reports the guarantees it cannot give, and only those.
func TestGuarantees(t *testing.T) {
	both := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	ours := map[string]string{runtime.LabelManaged: "true"}
	denyAll := netpol("deny-all", ours, both, nil)
	full := func(k *config.Kubernetes) {
		k.SeccompProfile, k.UserNamespaces, k.NodePidsLimit, k.WorkspaceMedium = "mcp-forge.json", true, 1024, "Memory"
	}
	cases := []struct {
		name     string
		edit     func(*config.Kubernetes)
		policies []*networkingv1.NetworkPolicy
		gaps     []runtime.Guarantee
	}{
		{"defaults, no policy", nil, nil,
			[]runtime.Guarantee{runtime.Seccomp, runtime.UserNamespace, runtime.Pids, runtime.OpenFiles, runtime.WorkspaceQuota, runtime.NoNetwork}},
		{"everything configured, deny-all", full, []*networkingv1.NetworkPolicy{denyAll}, []runtime.Guarantee{runtime.OpenFiles}},
		{"seccomp profile", func(k *config.Kubernetes) { k.SeccompProfile = "mcp-forge.json" }, []*networkingv1.NetworkPolicy{denyAll},
			[]runtime.Guarantee{runtime.UserNamespace, runtime.Pids, runtime.OpenFiles, runtime.WorkspaceQuota}},
		{"user namespaces", func(k *config.Kubernetes) { k.UserNamespaces = true }, []*networkingv1.NetworkPolicy{denyAll},
			[]runtime.Guarantee{runtime.Seccomp, runtime.Pids, runtime.OpenFiles, runtime.WorkspaceQuota}},
		{"pids limit", func(k *config.Kubernetes) { k.NodePidsLimit = 512 }, []*networkingv1.NetworkPolicy{denyAll},
			[]runtime.Guarantee{runtime.Seccomp, runtime.UserNamespace, runtime.OpenFiles, runtime.WorkspaceQuota}},
		{"memory workspace", func(k *config.Kubernetes) { k.WorkspaceMedium = "Memory" }, []*networkingv1.NetworkPolicy{denyAll},
			[]runtime.Guarantee{runtime.Seccomp, runtime.UserNamespace, runtime.Pids, runtime.OpenFiles}},
		{"deny-all selecting every pod", full, []*networkingv1.NetworkPolicy{netpol("all", nil, both, nil)}, []runtime.Guarantee{runtime.OpenFiles}},
		{"a policy with an egress rule", full, []*networkingv1.NetworkPolicy{netpol("dns", ours, both, func(s *networkingv1.NetworkPolicySpec) {
			s.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
		})}, []runtime.Guarantee{runtime.OpenFiles, runtime.NoNetwork}},
		{"a policy with an ingress rule", full, []*networkingv1.NetworkPolicy{netpol("in", ours, both, func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{}}
		})}, []runtime.Guarantee{runtime.OpenFiles, runtime.NoNetwork}},
		{"ingress only", full, []*networkingv1.NetworkPolicy{netpol("in", ours, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, nil)},
			[]runtime.Guarantee{runtime.OpenFiles, runtime.NoNetwork}},
		{"egress only", full, []*networkingv1.NetworkPolicy{netpol("out", ours, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, nil)},
			[]runtime.Guarantee{runtime.OpenFiles, runtime.NoNetwork}},
		{"ingress and egress denied by two policies", full, []*networkingv1.NetworkPolicy{
			netpol("in", ours, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, nil),
			netpol("out", ours, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, nil),
		}, []runtime.Guarantee{runtime.OpenFiles}}, // isolation is per direction, by any policy
		{"deny-all of other pods", full, []*networkingv1.NetworkPolicy{netpol("web", map[string]string{"app": "web"}, both, nil)},
			[]runtime.Guarantee{runtime.OpenFiles, runtime.NoNetwork}},
		{"deny-all beside a rule", full, []*networkingv1.NetworkPolicy{denyAll, netpol("dns", ours, both, func(s *networkingv1.NetworkPolicySpec) {
			s.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
		})}, []runtime.Guarantee{runtime.OpenFiles, runtime.NoNetwork}}, // policies add up: the rule opens egress again
		{"deny-all beside a rule for other pods", full, []*networkingv1.NetworkPolicy{denyAll, netpol("web", map[string]string{"app": "web"}, both, func(s *networkingv1.NetworkPolicySpec) {
			s.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
		})}, []runtime.Guarantee{runtime.OpenFiles}},
		{"deny-all in another namespace", full, []*networkingv1.NetworkPolicy{func() *networkingv1.NetworkPolicy {
			p := netpol("deny-all", ours, both, nil)
			p.Namespace = "elsewhere"
			return p
		}()}, []runtime.Guarantee{runtime.OpenFiles, runtime.NoNetwork}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := testKube()
			k.RuntimeClass = "gvisor" // kernel-isolation has its own test
			if tc.edit != nil {
				tc.edit(&k)
			}
			cs := fake.NewClientset()
			for _, p := range tc.policies {
				if _, err := cs.NetworkingV1().NetworkPolicies(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			r, err := cluster(cs, "", k).Guarantees(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var got []runtime.Guarantee
			for _, g := range r.Gaps {
				got = append(got, g.Guarantee)
				if g.Why == "" || g.Fix == "" {
					t.Errorf("gap %s has no why or fix: %+v", g.Guarantee, g)
				}
			}
			slices.Sort(got)
			want := slices.Clone(tc.gaps)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("gaps %v; want %v", got, want)
			}
			for _, g := range []runtime.Guarantee{runtime.Memory, runtime.CPU, runtime.ReadOnlyRoot, runtime.OOMDetection, runtime.LifetimeBound} {
				if !r.Enforces(g) {
					t.Errorf("%s is every pod's, yet reported missing", g)
				}
			}
		})
	}
}

// Policies that cannot be read are a gap that says why.
func TestGuaranteesUnreadablePolicies(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("list", "networkpolicies", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "networking.k8s.io", Resource: "networkpolicies"}, "", errors.New("the core may not list them"))
	})
	r, err := cluster(cs, "", testKube()).Guarantees(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g, ok := r.Gap(runtime.NoNetwork)
	if !ok || !strings.Contains(g.Why, "cannot be read") || !strings.Contains(g.Why, "forbidden") {
		t.Errorf("no-network gap %+v; want one saying the policies cannot be read and why", g)
	}
}
