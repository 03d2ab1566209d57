package podspec

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/mcp-forge/mcp-forge/core/cluster"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
)

var update = flag.Bool("update", false, "rewrite testdata/pod-*.golden.json from Build")

const (
	testWorkspace = "/var/lib/mcp-forge/sessions/s-a1b2"
	codeHash      = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" // 64 hex: too long for a label value
)

// host marks the pods of the core with host 0123456789abcdef (core/cluster).
var host = map[string]string{cluster.LabelHost: "0123456789abcdef"}

// sessionID is 100 characters: a session id of the core, no label value.
var sessionID = strings.Repeat("s0123456789", 9) + "abcdefghij"

// statelessSpec is a spec as the policy hardens a one-shot Python run.
func statelessSpec() runtime.Spec {
	return runtime.Spec{
		Name:    "forge-run-1",
		Image:   "mcp-forge/python:3.11",
		ImageID: "localhost/mcp-forge/python:3.11", // what Image() resolved it to
		Command: []string{"python3", "/forge/code/runner.py"},
		Env:     map[string]string{"MPLBACKEND": "Agg", "HOME": "/tmp"},
		WorkDir: "/work",
		Labels: map[string]string{runtime.LabelManaged: "true", runtime.LabelInstance: "abc", runtime.LabelPlugin: "python",
			runtime.LabelOneShot: "true", runtime.LabelCodeHash: codeHash, runtime.LabelServer: "1-2"},
		User: "1000:1000", Network: "none", ReadOnlyRoot: true, TmpfsSize: 64 << 20, NoNewPrivileges: true,
		SeccompProfile: "/var/lib/mcp-forge/mcp-forge-seccomp-0123456789abcdef.json",
		CapDrop:        []string{"ALL"}, Init: true,
		Mounts: []runtime.Mount{
			{Source: testWorkspace + "/code", Target: "/forge/code", ReadOnly: true},
			{Source: testWorkspace + "/out", Target: "/work"},
		},
		Limits:        runtime.Limits{MemoryBytes: 512 << 20, CPUQuota: 50000, Pids: 256, NoFile: 1024, Timeout: 30 * time.Second},
		WorkspacePath: testWorkspace,
		Plugin:        "python",
	}
}

// sessionSpec is a kernel session: its whole workspace mounted, a channel
// directory for its sockets, no timeout of its own.
func sessionSpec() runtime.Spec {
	s := statelessSpec()
	delete(s.Labels, runtime.LabelOneShot)
	delete(s.Labels, runtime.LabelCodeHash)
	s.Labels[runtime.LabelSession] = sessionID
	s.Command = []string{"python3", "-m", "ipykernel_launcher", "-f", "/run/forge/kernel.json"}
	s.SessionID = sessionID
	s.Mounts = []runtime.Mount{
		{Source: testWorkspace, Target: "/work"},
		{Source: testWorkspace + "/chan", Target: "/run/forge"},
	}
	s.Limits.Timeout = 0
	return s
}

// toolsSpec is a session granted tools: the grant's directory, outside the
// workspace, mounted read-only (a copy in the pod).
func toolsSpec() runtime.Spec {
	s := sessionSpec()
	s.Mounts = append(s.Mounts, runtime.Mount{Source: "/var/lib/mcp-forge/tools/g-0123", Target: "/forge/tools", ReadOnly: true})
	return s
}

// goldenKube is a production-like section: a pinned node, MCP-Forge's
// seccomp profile, the workspace in memory, user namespaces, a taint.
func goldenKube() config.Kubernetes {
	k := config.Default().Runtime.Kubernetes
	k.Namespace = "mcp-forge"
	k.PullPolicy = "Never"
	k.NodeName = "localhost"
	k.SeccompProfile = "mcp-forge.json"
	k.WorkspaceMedium = "Memory"
	k.UserNamespaces = true
	k.RuntimeClass = "gvisor"
	k.Tolerations = []config.Toleration{{Key: "sandboxes", Operator: "Exists", Effect: "NoSchedule"}}
	return k
}

// The pod of each representative spec matches its golden file, so that a
// change to anything that confines a sandbox pod shows up in review. Run
// with -update to accept a deliberate change.
func TestPodSpecGolden(t *testing.T) {
	// A custom environment's session: its image by digest from the
	// registry, pulled if not present whatever pull_policy says.
	custom := sessionSpec()
	custom.Image, custom.ImageID = "mcp-forge/custom:stats", "127.0.0.1:5000/mcp-forge/custom@sha256:"+strings.Repeat("0f", 32)
	for name, s := range map[string]runtime.Spec{"stateless": statelessSpec(), "session": sessionSpec(), "custom": custom, "tools": toolsSpec()} {
		t.Run(name, func(t *testing.T) {
			pod, err := Build(s, goldenKube(), "mcp-forge", "forge-0123456789abcdef", host, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(pod); err != nil {
				t.Fatal(err)
			}
			got := buf.Bytes()
			path := filepath.Join("testdata", "pod-"+name+".golden.json")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run `go test ./core/runtime/kubernetes/podspec -run Golden -update` to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Build(%s) differs from %s (run with -update if the change is deliberate):\n%s", name, path, diffLines(string(want), string(got)))
			}
		})
	}
}

// diffLines shows the lines that differ, with their line numbers.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			fmt.Fprintf(&b, "line %d:\n- %s\n+ %s\n", i+1, a, c)
		}
	}
	return b.String()
}

// podCases are specs and sections whose pods must all be confined,
// whatever the golden files say.
func podCases() map[string]struct {
	s runtime.Spec
	k config.Kubernetes
} {
	plain := config.Default().Runtime.Kubernetes
	ws := statelessSpec()
	ws.Mounts = append(ws.Mounts, runtime.Mount{Source: testWorkspace, Target: "/ws"})
	custom := sessionSpec()
	custom.ImageID = "127.0.0.1:5000/mcp-forge/custom@sha256:" + strings.Repeat("0f", 32)
	return map[string]struct {
		s runtime.Spec
		k config.Kubernetes
	}{
		"stateless":                {statelessSpec(), goldenKube()},
		"session":                  {sessionSpec(), goldenKube()},
		"stateless, default kube":  {statelessSpec(), plain},
		"session, default kube":    {sessionSpec(), plain},
		"workspace itself mounted": {ws, plain},
		"custom image by digest":   {custom, goldenKube()},
	}
}

// Whatever the golden files say, these confine every sandbox pod: checked
// on the pod itself so that an -update cannot accept their loss.
func TestPodSpecConfines(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range podCases() {
		t.Run(name, func(t *testing.T) {
			s, k := tc.s, tc.k
			pod, err := Build(s, k, k.Namespace, "forge-0123456789abcdef", host, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			check := func(ok bool, what string) {
				t.Helper()
				if !ok {
					t.Errorf("%s: %s", name, what)
				}
			}
			ps := pod.Spec
			all := append(slices.Clone(ps.InitContainers), ps.Containers...)
			check(len(ps.InitContainers) == 2 && len(ps.Containers) == 2 && ps.InitContainers[0].Name == Agent, "the agent's, a seed, a sandbox and a keeper container")
			for _, c := range ps.Containers {
				check(slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.Name == "agent" && vm.MountPath == agentDir && vm.ReadOnly }),
					c.Name+": the agent mounted read-only")
				check(c.Command[0] == agentPath, c.Name+": runs under the agent, nothing of its image's")
			}
			for _, c := range all {
				sc := c.SecurityContext
				check(sc != nil, c.Name+": a security context")
				if sc == nil {
					continue
				}
				check(sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, c.Name+": runAsNonRoot")
				check(sc.RunAsUser != nil && *sc.RunAsUser == 1000 && sc.RunAsGroup != nil && *sc.RunAsGroup == 1000, c.Name+": runs as 1000:1000")
				check(sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, c.Name+": allowPrivilegeEscalation false")
				check(sc.Privileged == nil || !*sc.Privileged, c.Name+": not privileged")
				check(sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, c.Name+": readOnlyRootFilesystem")
				check(sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(sc.Capabilities.Add) == 0, c.Name+": drops ALL, adds none")
				check(c.Resources.Limits.Memory().Value() > 0, c.Name+": a memory limit")
				check(len(c.Ports) == 0, c.Name+": no ports")
			}
			check(ps.AutomountServiceAccountToken != nil && !*ps.AutomountServiceAccountToken, "automountServiceAccountToken false")
			check(ps.EnableServiceLinks != nil && !*ps.EnableServiceLinks, "enableServiceLinks false")
			check(!ps.HostNetwork && !ps.HostPID && !ps.HostIPC, "no host namespaces")
			if k.UserNamespaces {
				check(ps.HostUsers != nil && !*ps.HostUsers, "hostUsers false: user namespaces were asked")
			} else {
				check(ps.HostUsers == nil, "hostUsers left to the cluster (true) when user namespaces are not asked")
			}
			check(ps.SecurityContext != nil && ps.SecurityContext.SeccompProfile != nil, "a seccomp profile")
			if k.SeccompProfile != "" {
				check(ps.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeLocalhost && *ps.SecurityContext.SeccompProfile.LocalhostProfile == k.SeccompProfile, "MCP-Forge's Localhost profile")
			} else {
				check(ps.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault, "RuntimeDefault")
			}
			check(ps.RestartPolicy == corev1.RestartPolicyNever, "never restarted")
			for _, v := range ps.Volumes {
				check(v.HostPath == nil && v.EmptyDir != nil, "volume "+v.Name+" is an emptyDir, no host path")
			}
			ws := ps.Volumes[0]
			check(ws.Name == "ws" && ws.EmptyDir != nil && string(ws.EmptyDir.Medium) == k.WorkspaceMedium, "the workspace is an emptyDir of workspace_medium")
			check(ws.EmptyDir != nil && ws.EmptyDir.SizeLimit != nil && ws.EmptyDir.SizeLimit.Value() == 1<<30, "the workspace is bounded by the quota")
			sandbox := ps.Containers[0]
			// Each of the spec's mounts is its place in the workspace, as read-only as asked.
			for _, m := range s.Mounts {
				found := false
				for _, vm := range sandbox.VolumeMounts {
					if vm.MountPath == m.Target {
						rel := strings.TrimPrefix(strings.TrimPrefix(m.Source, s.WorkspacePath), "/")
						found = vm.Name == "ws" && vm.SubPath == rel && vm.ReadOnly == m.ReadOnly
					}
				}
				check(found, "the mount at "+m.Target+" is the workspace's "+m.Source+", read-only as asked")
			}
			for _, vm := range ps.Containers[1].VolumeMounts {
				check(vm.Name != "run" || vm.ReadOnly, "the keeper reads the run directory only")
			}
			check(sandbox.Name == Sandbox && sandbox.Resources.Limits.Memory().Value() == s.Limits.MemoryBytes, "the sandbox's memory limit is the run's")
			check(sandbox.Resources.Limits.Cpu().MilliValue() == s.Limits.CPUQuota/100, "the sandbox's CPU limit is its quota (50000 µs per 100 ms: 500m)")
			check(slices.Equal(sandbox.Command[4:], s.Command), "the sandbox runs the command under its init")

			want := int64(k.SessionLifetime)
			if s.Labels[runtime.LabelOneShot] == "true" {
				want = int64(s.Limits.Timeout/time.Second) + 60
			}
			check(ps.ActiveDeadlineSeconds != nil && *ps.ActiveDeadlineSeconds == want, "activeDeadlineSeconds: the timeout + 60 s for a one-shot run, session_lifetime otherwise")

			for key, v := range pod.Labels {
				check(len(validation.IsQualifiedName(key)) == 0 && len(validation.IsValidLabelValue(v)) == 0, "label "+key+"="+v+" is label-safe")
				check(key == runtime.LabelManaged || key == cluster.LabelHost || s.Labels[key] == v, "label "+key+" comes from the spec")
			}
			check(pod.Labels[runtime.LabelManaged] == "true", "marked managed")
			check(pod.Labels[cluster.LabelHost] == "0123456789abcdef", "marked with its core's host")
			var ann map[string]string
			check(json.Unmarshal([]byte(pod.Annotations[annotationLabels]), &ann) == nil, "the labels annotation is JSON")
			for key, v := range s.Labels {
				check(ann[key] == v, "label "+key+" is in the annotation")
				_, isLabel := pod.Labels[key]
				check(isLabel == (len(validation.IsValidLabelValue(v)) == 0), "label "+key+" is a pod label exactly when its value fits one")
			}
			check(len(ann) == len(s.Labels), "the annotation holds the spec's labels, nothing else")
			if _, ok := pod.Labels[runtime.LabelCodeHash]; ok {
				t.Errorf("a 64-hex code hash is no label value")
			}
			if _, ok := pod.Labels[runtime.LabelSession]; ok {
				t.Errorf("a 100-character session id is no label value")
			}
			got := Labels(pod)
			check(len(got) == len(s.Labels), "Labels reads back every label")
			for key, v := range s.Labels {
				check(got[key] == v, "Labels reads back "+key)
			}

			// PodSecurity's own restricted checks, as the namespace enforces them.
			restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
			for _, r := range eval.EvaluatePod(restricted, &pod.ObjectMeta, &pod.Spec) {
				if !r.Allowed {
					t.Errorf("restricted Pod Security Standard refuses the pod: %s: %s", r.ForbiddenReason, r.ForbiddenDetail)
				}
			}
			// The checker does refuse: one capability added to the keeper.
			worse := pod.DeepCopy()
			worse.Spec.Containers[1].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_RAW"}
			refused := false
			for _, r := range eval.EvaluatePod(restricted, &worse.ObjectMeta, &worse.Spec) {
				refused = refused || !r.Allowed
			}
			check(refused, "the restricted checker refuses an added capability (else it checked nothing)")
		})
	}
}

// A spec with what a pod must not have is refused, whatever the policy
// let through.
func TestPodSpecRefuses(t *testing.T) {
	cases := []struct {
		name string
		edit func(*runtime.Spec)
		want string
	}{
		{"privileged", func(s *runtime.Spec) { s.Privileged = true }, "privileges or host namespaces"},
		{"capability added", func(s *runtime.Spec) { s.CapAdd = []string{"NET_ADMIN"} }, "privileges or host namespaces"},
		{"device", func(s *runtime.Spec) { s.Devices = []string{"/dev/kvm"} }, "privileges or host namespaces"},
		{"host pid", func(s *runtime.Spec) { s.PidNS = "host" }, "privileges or host namespaces"},
		{"host ipc", func(s *runtime.Spec) { s.IPCNS = "host" }, "privileges or host namespaces"},
		{"host network", func(s *runtime.Spec) { s.Network = "host" }, "privileges or host namespaces"},
		{"bridge network", func(s *runtime.Spec) { s.Network = "bridge" }, "allow_network is not served on Kubernetes"},
		{"mount outside the workspace", func(s *runtime.Spec) {
			s.Mounts = append(s.Mounts, runtime.Mount{Source: "/var/lib/mcp-forge/bridge/s-a1b2.sock", Target: "/run/forge/bridge.sock"})
		}, "is not in the sandbox's workspace"},
		{"mount beside the workspace", func(s *runtime.Spec) {
			s.Mounts = append(s.Mounts, runtime.Mount{Source: testWorkspace + "-other", Target: "/other"})
		}, "is not in the sandbox's workspace"},
		{"no workspace", func(s *runtime.Spec) { s.WorkspacePath = "" }, "is not in the sandbox's workspace"},
		{"uid 0", func(s *runtime.Spec) { s.User = "0:0" }, "a numeric non-root uid:gid"},
		{"gid 0", func(s *runtime.Spec) { s.User = "1000:0" }, "a numeric non-root uid:gid"},
		{"named user", func(s *runtime.Spec) { s.User = "nobody" }, "a numeric non-root uid:gid"},
		{"no user", func(s *runtime.Spec) { s.User = "" }, "a numeric non-root uid:gid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := statelessSpec()
			tc.edit(&s)
			pod, err := Build(s, goldenKube(), "mcp-forge", "forge-0123456789abcdef", host, 0)
			if err == nil {
				t.Fatalf("Build accepted it: %+v", pod.Spec.Containers[0].SecurityContext)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// A writable mount outside the workspace is refused: a copy could not
// carry the sandbox's writes back.
func TestWritableMountOutsideRefused(t *testing.T) {
	s := statelessSpec()
	s.Mounts = append(s.Mounts, runtime.Mount{Source: "/var/lib/other", Target: "/other"})
	if _, err := Build(s, goldenKube(), "mcp-forge", "forge-0123456789abcdef", host, 0); err == nil || !strings.Contains(err.Error(), "writable mount of /var/lib/other") {
		t.Fatalf("Build: %v; want the writable mount refused", err)
	}
}

// A uid alone is its own group; the request never exceeds the limit.
func TestPodSpecUserAndRequests(t *testing.T) {
	s := statelessSpec()
	s.User = "1234"
	s.Limits.MemoryBytes = 32 << 20 // below the default 64 MiB request
	s.Limits.CPUQuota = 2000        // 20m, below the 50m request
	pod, err := Build(s, config.Default().Runtime.Kubernetes, "ns", "p", host, 0)
	if err != nil {
		t.Fatal(err)
	}
	sc := pod.Spec.Containers[0].SecurityContext
	if *sc.RunAsUser != 1234 || *sc.RunAsGroup != 1234 || *pod.Spec.SecurityContext.FSGroup != 1234 {
		t.Errorf("user %q ran as %d:%d (fsGroup %d)", s.User, *sc.RunAsUser, *sc.RunAsGroup, *pod.Spec.SecurityContext.FSGroup)
	}
	r := pod.Spec.Containers[0].Resources
	if r.Requests.Memory().Cmp(*r.Limits.Memory()) != 0 || r.Requests.Cpu().Cmp(*r.Limits.Cpu()) != 0 {
		t.Errorf("requests %v exceed or differ from limits %v", r.Requests, r.Limits)
	}
	if pod.Spec.Volumes[0].EmptyDir.SizeLimit != nil {
		t.Errorf("no quota, yet a workspace size limit %v", pod.Spec.Volumes[0].EmptyDir.SizeLimit)
	}
}

// The init container installs the agent where the core's egress forwarder
// runs it (agent.Path, the same on Podman).
func TestAgentDirHoldsAgentPath(t *testing.T) {
	if agentDir+"/"+agent.Binary != agent.Path {
		t.Fatalf("the agent's emptyDir %s does not hold %s", agentDir, agent.Path)
	}
}
