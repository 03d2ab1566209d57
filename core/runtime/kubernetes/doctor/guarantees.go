package doctor

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Guarantees is the runtime's runtime.Guarantor: what a pod built by podspec.Build
// gets on this cluster, as far as the configuration and the API can tell.
// Memory, CPU and OOM detection are the pod's limits and its status;
// read-only root and the lifetime bound (activeDeadlineSeconds) are fields
// every cluster honours; the rest depends on the cluster and is a gap
// unless the configuration says the cluster provides it.
func (c Cluster) Guarantees(ctx context.Context) (runtime.Report, error) {
	var gaps []runtime.Gap
	if c.Config.SeccompProfile == "" {
		gaps = append(gaps, runtime.Gap{Guarantee: runtime.Seccomp, Why: "pods get the container runtime's RuntimeDefault profile, not MCP-Forge's",
			Fix: "install `mcp-forge seccomp-profile` under the kubelet's seccomp directory on every node and set runtime.kubernetes.seccomp_profile"})
	}
	if !c.Config.UserNamespaces {
		gaps = append(gaps, runtime.Gap{Guarantee: runtime.UserNamespace, Why: "pods share the node's user ids (hostUsers is not false)",
			Fix: "on Kubernetes >= 1.33 with containerd 2 or CRI-O set runtime.kubernetes.user_namespaces = true"})
	}
	switch {
	case c.Config.NodePidsLimit <= 0:
		gaps = append(gaps, runtime.Gap{Guarantee: runtime.Pids, Why: "a pod's process count is bounded only by the kubelet's podPidsLimit, which the API does not show",
			Fix: "set podPidsLimit in the kubelet configuration of the nodes and runtime.kubernetes.node_pids_limit to it"})
	case c.MaxPids > 0 && int64(c.Config.NodePidsLimit) > c.MaxPids:
		gaps = append(gaps, runtime.Gap{Guarantee: runtime.Pids, Why: fmt.Sprintf("the kubelet's podPidsLimit (%d) is above execution.max_pids (%d): a pod may run more processes than any run is allowed", c.Config.NodePidsLimit, c.MaxPids),
			Fix: "set podPidsLimit on the nodes at most execution.max_pids (or raise max_pids to it), and runtime.kubernetes.node_pids_limit to it"})
	}
	if c.Config.RuntimeClass == "" {
		gaps = append(gaps, runtime.Gap{Guarantee: runtime.KernelIsolation, Why: "pods run on the nodes' default container runtime (runtime.kubernetes.runtime_class is empty)",
			Fix: "set runtime.kubernetes.runtime_class to the cluster's gVisor RuntimeClass (GKE Sandbox and kube-up name it gvisor)"})
	}
	gaps = append(gaps, runtime.Gap{Guarantee: runtime.OpenFiles, Why: "Kubernetes sets no open-files limit per pod (the container runtime's default RLIMIT_NOFILE applies)",
		Fix: "waive open-files, or set a low default RLIMIT_NOFILE in the container runtime of the nodes"})
	if c.Config.WorkspaceMedium != "Memory" {
		gaps = append(gaps, runtime.Gap{Guarantee: runtime.WorkspaceQuota, Why: "a disk-backed emptyDir past its sizeLimit is evicted, not refused with ENOSPC",
			Fix: "set runtime.kubernetes.workspace_medium = \"Memory\" (a tmpfs of the quota's size, counted in the memory limit)"})
	}
	if why := c.denyAll(ctx); why != "" {
		gaps = append(gaps, runtime.Gap{Guarantee: runtime.NoNetwork, Why: why,
			Fix: fmt.Sprintf("create a NetworkPolicy in namespace %s selecting %s=true with policyTypes [Ingress, Egress] and no rules (docs/kubernetes.md), on a CNI that enforces NetworkPolicy", c.Config.Namespace, runtime.LabelManaged)})
	}
	return runtime.Report{}.With(gaps...), nil
}

// denyAll says why sandbox pods may have network, or "" when NetworkPolicies
// deny them all traffic. Policies add up: a direction is closed when some
// policy selecting the pods isolates it, and opened again by any rule of any
// policy selecting them. Whether the CNI enforces them the API cannot say:
// docs/kubernetes.md asks the operator for one that does.
func (c Cluster) denyAll(ctx context.Context) string {
	cx, cancel := op(ctx)
	defer cancel()
	list, err := c.API.NetworkingV1().NetworkPolicies(c.Config.Namespace).List(cx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("the NetworkPolicies of namespace %s cannot be read (%v)", c.Config.Namespace, err)
	}
	ours := labels.Set{runtime.LabelManaged: "true"}
	var in, out bool
	for _, p := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil || !sel.Matches(ours) {
			continue
		}
		if len(p.Spec.Ingress) > 0 || len(p.Spec.Egress) > 0 {
			return fmt.Sprintf("NetworkPolicy %s of namespace %s has rules that let sandbox pods some traffic (they add to any deny-all)", p.Name, c.Config.Namespace)
		}
		for _, t := range p.Spec.PolicyTypes {
			in = in || t == networkingv1.PolicyTypeIngress
			out = out || t == networkingv1.PolicyTypeEgress
		}
	}
	if in && out {
		return ""
	}
	return fmt.Sprintf("no NetworkPolicy of namespace %s denies sandbox pods all ingress and egress", c.Config.Namespace)
}
