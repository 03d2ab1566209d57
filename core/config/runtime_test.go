package config

import (
	"strings"
	"testing"
)

// Every runtime.* check names its field and says what is wrong; a valid
// value of each is accepted.
func TestRuntimeValidation(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Runtime)
		path string // "" when valid
		msg  string
	}{
		{"defaults", func(*Runtime) {}, "", ""},
		{"kubernetes", func(r *Runtime) { r.Kind = "kubernetes" }, "", ""},
		{"everything set", func(r *Runtime) {
			k := &r.Kubernetes
			r.Kind, k.Kubeconfig, k.Context, k.Namespace = "kubernetes", "/etc/mcp-forge/kubeconfig", "prod", "sandboxes-1"
			k.ImageRegistry, k.PullPolicy, k.RuntimeClass = "registry.example.org:5000/team", "Never", "gvisor"
			k.NodeName, k.SeccompProfile, k.CPURequest, k.WorkspaceMedium = "node-1.example.org", "profiles/mcp-forge.json", "0.25", "Memory"
			k.Tolerations = []Toleration{{Key: "sandboxes", Operator: "Exists", Effect: "NoSchedule"}, {Key: "pool", Operator: "Equal", Value: "a"}}
			k.UserNamespaces, k.NodePidsLimit = true, 1024
		}, "", ""},
		{"kind", func(r *Runtime) { r.Kind = "docker" }, "runtime.kind", `must be one of podman, kubernetes (got "docker")`},
		{"kubeconfig relative", func(r *Runtime) { r.Kubernetes.Kubeconfig = "kubeconfig" }, "runtime.kubernetes.kubeconfig", `must be an absolute path (got "kubeconfig")`},
		{"namespace upper case", func(r *Runtime) { r.Kubernetes.Namespace = "Sandboxes" }, "runtime.kubernetes.namespace", `"Sandboxes" is not a namespace name`},
		{"namespace empty", func(r *Runtime) { r.Kubernetes.Namespace = "" }, "runtime.kubernetes.namespace", `"" is not a namespace name`},
		{"namespace too long", func(r *Runtime) { r.Kubernetes.Namespace = strings.Repeat("a", 64) }, "runtime.kubernetes.namespace", "at most 63"},
		{"pull policy", func(r *Runtime) { r.Kubernetes.PullPolicy = "never" }, "runtime.kubernetes.pull_policy", `must be one of Always, IfNotPresent, Never (got "never")`},
		{"registry scheme", func(r *Runtime) { r.Kubernetes.ImageRegistry = "https://registry.example.org" }, "runtime.kubernetes.image_registry", "no scheme"},
		{"registry trailing slash", func(r *Runtime) { r.Kubernetes.ImageRegistry = "registry.example.org/" }, "runtime.kubernetes.image_registry", "no trailing '/'"},
		{"registry digest", func(r *Runtime) { r.Kubernetes.ImageRegistry = "registry.example.org@sha256" }, "runtime.kubernetes.image_registry", "is not a registry prefix"},
		{"runtime class", func(r *Runtime) { r.Kubernetes.RuntimeClass = "gVisor" }, "runtime.kubernetes.runtime_class", `"gVisor" is not a RuntimeClass name`},
		{"node name", func(r *Runtime) { r.Kubernetes.NodeName = "node_1" }, "runtime.kubernetes.node_name", `"node_1" is not a node name`},
		{"toleration operator", func(r *Runtime) { r.Kubernetes.Tolerations = []Toleration{{Key: "k", Operator: "In"}} },
			"runtime.kubernetes.tolerations[0].operator", `must be one of Equal, Exists (got "In")`},
		{"toleration effect", func(r *Runtime) {
			r.Kubernetes.Tolerations = []Toleration{{Key: "k", Operator: "Exists"}, {Key: "k", Operator: "Equal", Effect: "NoRun"}}
		}, "runtime.kubernetes.tolerations[1].effect", "must be one of , NoSchedule, PreferNoSchedule, NoExecute"},
		{"toleration exists with value", func(r *Runtime) { r.Kubernetes.Tolerations = []Toleration{{Key: "k", Operator: "Exists", Value: "v"}} },
			"runtime.kubernetes.tolerations[0].value", "a toleration with operator Exists takes no value"},
		{"seccomp absolute", func(r *Runtime) { r.Kubernetes.SeccompProfile = "/var/lib/kubelet/seccomp/mcp-forge.json" },
			"runtime.kubernetes.seccomp_profile", "must be a path relative to the kubelet's seccomp directory"},
		{"seccomp escapes", func(r *Runtime) { r.Kubernetes.SeccompProfile = "../mcp-forge.json" }, "runtime.kubernetes.seccomp_profile", "relative to the kubelet's seccomp directory"},
		{"cpu request unit", func(r *Runtime) { r.Kubernetes.CPURequest = "50 m" }, "runtime.kubernetes.cpu_request", `"50 m" is not a CPU quantity`},
		{"cpu request empty", func(r *Runtime) { r.Kubernetes.CPURequest = "" }, "runtime.kubernetes.cpu_request", `"" is not a CPU quantity`},
		{"memory request zero", func(r *Runtime) { r.Kubernetes.MemoryRequest = 0 }, "runtime.kubernetes.memory_request", `use a number with k, m or g, like "512m"`},
		{"workspace medium", func(r *Runtime) { r.Kubernetes.WorkspaceMedium = "tmpfs" }, "runtime.kubernetes.workspace_medium", `must be one of , Memory (got "tmpfs")`},
		{"pids limit", func(r *Runtime) { r.Kubernetes.NodePidsLimit = -1 }, "runtime.kubernetes.node_pids_limit", "must be 0 (unknown) or the kubelet's podPidsLimit"},
		{"session lifetime", func(r *Runtime) { r.Kubernetes.SessionLifetime = 0 }, "runtime.kubernetes.session_lifetime", "must be > 0 (got 0)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.edit(&c.Runtime)
			errs := Validate(c)
			if tc.path == "" {
				if len(errs) > 0 {
					t.Fatalf("a valid runtime section refused: %v", errs)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("want exactly one error at %s, got %v", tc.path, errs)
			}
			if errs[0].Path != tc.path || !strings.Contains(errs[0].Msg, tc.msg) {
				t.Errorf("got %s: %s; want %s: ...%s...", errs[0].Path, errs[0].Msg, tc.path, tc.msg)
			}
		})
	}
}
