// Package podspec builds the pod a sandbox runs in from a spec that passed
// the policy, for the Kubernetes runtime: its containers (the agent's
// install, the seed that unpacks the workspace, the sandbox under the
// agent's init, the keeper that serves files and sockets), their
// confinement, limits, volumes and labels, and reads back what a pod was
// built with. It is pure: it calls nothing.
package podspec

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/images"
)

// The containers of a sandbox pod. The sandbox runs the intent's command
// under the agent's init; agent brings the agent into the pod, then seed
// fills the workspace before the sandbox starts; keeper outlives it, so
// that files can be read back after a run ended and endpoints reached
// while it runs, always inside the pod's confinement.
const (
	Sandbox = "sandbox"
	Agent   = "agent"
	Seed    = "seed"
	Keeper  = "keeper"
)

// Paths in the pod's containers.
const (
	WorkspaceDir = "/forge/ws"  // the whole workspace, in seed and keeper
	RunDir       = "/forge/run" // the sandbox's captured output, in sandbox and keeper
	SeedRoot     = "/forge"     // where the seed unpacks: ws/ and copy/<n>/ beneath
	// agentPath is the agent in every container of the pod (where the
	// core's egress forwarder expects it, as on Podman).
	agentPath = agent.Path
	agentDir  = agent.Dir // its emptyDir, read-only but in the agent container
)

// Annotations of a sandbox pod.
const (
	// annotationLabels holds every label of the spec as JSON: a label value
	// of the core (a 64-hex code hash, a 128-character session id) may not
	// fit a Kubernetes label, so only those that do are labels too.
	annotationLabels = "mcp-forge.io/labels"
	// annotationMounts holds the sandbox's mounts (target → place in the
	// workspace), so that a core that adopts the pod reaches its sockets.
	annotationMounts = "mcp-forge.io/mounts"
)

// lifetimeGrace is how long a stateless pod outlives its run's timeout
// before the cluster ends it (activeDeadlineSeconds), were the core gone.
const lifetimeGrace = 60

// The sandbox container runs its command under the agent's init (its
// PID 1: images carry no init and a pod gets none injected, as Podman's
// --init), which captures stdout and stderr apart in RunDir, reaps and
// forwards signals, and keeps the API server's address out of
// /proc/1/environ; the keeper's PID 1 is the agent idling. The agent
// reaches the pod through the init container agent, which copies it from
// its own image into an emptyDir the others mount read-only: nothing of
// the user's image is needed for it.
func AgentCmd(args ...string) []string { return append([]string{agentPath}, args...) }

// Name is a fresh pod name (a DNS label).
func Name() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "forge-" + hex.EncodeToString(b)
}

// Mount is a mount's place in the workspace, or a copy.
type Mount struct {
	Target   string `json:"target"`
	Rel      string `json:"rel"` // "" or "." for the workspace itself
	ReadOnly bool   `json:"ro,omitempty"`
	// Copy numbers (from 1) a read-only mount of a directory of the core's
	// outside the workspace: the pod gets a copy of Source (CopyDir),
	// whose sockets the runtime relays to the core's.
	Copy   int    `json:"copy,omitempty"`
	Source string `json:"-"`
	// Claim is a host root's PersistentVolumeClaim, mounted read-only at
	// Target (runtime.Mount.Claim).
	Claim string `json:"claim,omitempty"`
}

// Places maps the spec's mounts into its workspace, since a pod cannot
// mount the core's directories (no host paths); a read-only mount of
// another directory of the core's becomes a copy.
func Places(s runtime.Spec) ([]Mount, error) {
	var out []Mount
	copies := 0
	for _, m := range s.Mounts {
		rel, ok := within(s.WorkspacePath, m.Source)
		switch {
		case m.HostRoot && m.Claim != "" && m.ReadOnly:
			out = append(out, Mount{Target: m.Target, ReadOnly: true, Claim: m.Claim})
		case m.HostRoot:
			return nil, fmt.Errorf("host root %s at %s: a pod cannot mount a directory of the core's machine, only a read-only PersistentVolumeClaim (volumes.host_roots.*.claim)", m.Source, m.Target)
		case ok:
			out = append(out, Mount{Target: m.Target, Rel: rel, ReadOnly: m.ReadOnly})
		case m.ReadOnly:
			copies++
			out = append(out, Mount{Target: m.Target, ReadOnly: true, Copy: copies, Source: m.Source})
		default:
			return nil, fmt.Errorf("writable mount of %s at %s is not in the sandbox's workspace: a pod gets the workspace, and only copies of the core's other directories, read-only", m.Source, m.Target)
		}
	}
	return out, nil
}

func within(root, p string) (string, bool) {
	if root == "" {
		return "", false
	}
	root, p = path.Clean(root), path.Clean(p)
	if p == root {
		return ".", true
	}
	if !strings.HasPrefix(p, root+"/") {
		return "", false
	}
	return strings.TrimPrefix(p, root+"/"), true
}

// Build builds the pod of a spec that passed the policy, named name in
// namespace ns, its workspace bounded by quota, labelled also with marks
// (the core's own: its host). It translates: whatever the spec forbids
// (privileges, host namespaces, host paths) was refused before, and a spec
// that still carries it is refused here.
func Build(s runtime.Spec, k config.Kubernetes, ns, name string, marks map[string]string, quota int64) (*corev1.Pod, error) {
	if s.Privileged || len(s.CapAdd) > 0 || len(s.Devices) > 0 || s.PidNS == "host" || s.IPCNS == "host" || s.Network == "host" {
		return nil, fmt.Errorf("refusing a spec with privileges or host namespaces (the policy should have refused it)")
	}
	if s.Network != "none" {
		return nil, fmt.Errorf("security.allow_network is not served on Kubernetes: sandbox pods have no network (the deny-all NetworkPolicy); set allow_network = false")
	}
	uid, gid, err := ids(s.User)
	if err != nil {
		return nil, err
	}
	mounts, err := Places(s)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for k, v := range s.Labels {
		if len(validation.IsQualifiedName(k)) == 0 && len(validation.IsValidLabelValue(v)) == 0 {
			labels[k] = v
		}
	}
	labels[runtime.LabelManaged] = "true"
	for k, v := range marks {
		labels[k] = v
	}
	all, _ := json.Marshal(s.Labels)
	mj, _ := json.Marshal(mounts)

	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	if k.SeccompProfile != "" {
		p := k.SeccompProfile
		seccomp = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &p}
	}
	f, t := false, true
	confined := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{
			AllowPrivilegeEscalation: &f, Privileged: &f, ReadOnlyRootFilesystem: &t, RunAsNonRoot: &t,
			RunAsUser: &uid, RunAsGroup: &gid,
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
	}
	limits := corev1.ResourceList{}
	if s.Limits.MemoryBytes > 0 {
		limits[corev1.ResourceMemory] = *resource.NewQuantity(s.Limits.MemoryBytes, resource.BinarySI)
	}
	if s.Limits.CPUQuota > 0 {
		// A quota in µs per 100 ms period is a thousandth of a core per 100 µs.
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(s.Limits.CPUQuota/100, 10), resource.DecimalSI)
	}
	requests := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(k.CPURequest),
		corev1.ResourceMemory: *resource.NewQuantity(int64(k.MemoryRequest), resource.BinarySI),
	}
	for r, q := range requests {
		if l, ok := limits[r]; ok && q.Cmp(l) > 0 {
			requests[r] = l // a request may not exceed its limit
		}
	}
	// The seed and the keeper write the workspace: on a tmpfs its pages
	// count in the memory of the container that wrote them.
	helperMemory := int64(64 << 20)
	if k.WorkspaceMedium == string(corev1.StorageMediumMemory) && quota > 0 {
		helperMemory += quota
	}
	// A helper's CPU limit is a whole core: at a quarter core, a file
	// request that forked its script waited out CFS periods (p90 74 ms
	// against 14 ms, measured on the kube-up cluster); the helpers run only
	// the core's scripts, and they request almost nothing.
	helper := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: *resource.NewQuantity(helperMemory, resource.BinarySI)},
	}
	var env []corev1.EnvVar
	for _, key := range sortedKeys(s.Env) {
		env = append(env, corev1.EnvVar{Name: key, Value: s.Env[key]})
	}
	env = append(env, corev1.EnvVar{Name: "FORGE_LOG_MAX", Value: strconv.Itoa(MaxLog)})
	agentRO := corev1.VolumeMount{Name: "agent", MountPath: agentDir, ReadOnly: true}
	vm := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}, {Name: "run", MountPath: RunDir}, agentRO}
	seedMounts := []corev1.VolumeMount{{Name: "ws", MountPath: WorkspaceDir}}
	var copies []corev1.Volume
	claims := 0
	for _, m := range mounts {
		if m.Claim != "" {
			// Read-only in the volume source too: the kubelet then leaves
			// the files' owners alone (no fsGroup change of the user's data).
			claims++
			name := fmt.Sprintf("root-%d", claims)
			vm = append(vm, corev1.VolumeMount{Name: name, MountPath: m.Target, ReadOnly: true})
			copies = append(copies, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: m.Claim, ReadOnly: true}}})
			continue
		}
		if m.Copy > 0 {
			vm = append(vm, corev1.VolumeMount{Name: copyVolume(m.Copy), MountPath: m.Target, ReadOnly: true})
			seedMounts = append(seedMounts, corev1.VolumeMount{Name: copyVolume(m.Copy), MountPath: CopyDir(m.Copy)})
			copies = append(copies, corev1.Volume{Name: copyVolume(m.Copy), VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(copySize, resource.BinarySI)}}})
			continue
		}
		sub := m.Rel
		if sub == "." {
			sub = ""
		}
		vm = append(vm, corev1.VolumeMount{Name: "ws", MountPath: m.Target, SubPath: sub, ReadOnly: m.ReadOnly})
	}
	keeperMounts := append(slices.Clone(seedMounts), corev1.VolumeMount{Name: "run", MountPath: RunDir, ReadOnly: true}, agentRO)
	ws := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMedium(k.WorkspaceMedium)}
	if quota > 0 {
		ws.SizeLimit = resource.NewQuantity(quota, resource.BinarySI)
	}
	tmp := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}
	if s.TmpfsSize > 0 {
		tmp.SizeLimit = resource.NewQuantity(s.TmpfsSize, resource.BinarySI)
	}
	image := s.ImageID
	if image == "" {
		image = images.Ref(k.ImageRegistry, s.Image)
	}
	// An image by digest (an environment's, or a base image the registry
	// holds) never changes: the node pulls it once, whatever pull_policy
	// says of images by name (a preloaded node has no custom environment).
	pull := corev1.PullPolicy(k.PullPolicy)
	if images.IsDigest(image) {
		pull = corev1.PullIfNotPresent
	}
	agentImage := images.Ref("", k.AgentImage)
	agentPull := corev1.PullPolicy(k.PullPolicy)
	if images.IsDigest(agentImage) {
		agentPull = corev1.PullIfNotPresent
	}
	deadline := int64(k.SessionLifetime)
	if s.Labels[runtime.LabelOneShot] == "true" && s.Limits.Timeout > 0 {
		deadline = int64(s.Limits.Timeout.Seconds()) + lifetimeGrace
	}
	grace := int64(2)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns, Labels: labels,
			Annotations: map[string]string{annotationLabels: string(all), annotationMounts: string(mj)},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			NodeName:                      k.NodeName,
			NodeSelector:                  k.NodeSelector,
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: &t, FSGroup: &gid, SeccompProfile: seccomp,
			},
			Volumes: append([]corev1.Volume{
				{Name: "ws", VolumeSource: corev1.VolumeSource{EmptyDir: ws}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: tmp}},
				{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(3*MaxLog, resource.BinarySI)}}},
				{Name: "agent", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(agentSize, resource.BinarySI)}}},
			}, copies...),
			InitContainers: []corev1.Container{{
				// The agent's image is FROM scratch: the agent copies itself.
				Name: Agent, Image: agentImage, ImagePullPolicy: agentPull,
				Command:         []string{"/" + agent.Binary, "install", agentPath},
				VolumeMounts:    []corev1.VolumeMount{{Name: "agent", MountPath: agentDir}},
				SecurityContext: confined(), Resources: corev1.ResourceRequirements{Requests: helper.Requests, Limits: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: *resource.NewQuantity(agentSize+32<<20, resource.BinarySI)}},
			}, {
				Name: Seed, Image: image, ImagePullPolicy: pull,
				// The workspace arrives as a tar on stdin (Start attaches);
				// the sandbox starts only once it is all there.
				Command: []string{"tar", "-x", "-f", "-", "-C", SeedRoot, "--no-same-owner", "--delay-directory-restore"},
				Stdin:   true, StdinOnce: true,
				VolumeMounts:    seedMounts,
				SecurityContext: confined(), Resources: helper,
			}},
			Containers: []corev1.Container{
				{
					Name: Sandbox, Image: image, ImagePullPolicy: pull,
					Command:    append(AgentCmd("init", RunDir, "--"), s.Command...),
					WorkingDir: s.WorkDir, Env: env, VolumeMounts: vm, SecurityContext: confined(),
					Resources: corev1.ResourceRequirements{Limits: limits, Requests: requests},
				},
				{
					Name: Keeper, Image: image, ImagePullPolicy: pull,
					Command:         AgentCmd("idle"),
					VolumeMounts:    keeperMounts,
					SecurityContext: confined(), Resources: helper,
				},
			},
		},
	}
	if k.RuntimeClass != "" {
		rc := k.RuntimeClass
		pod.Spec.RuntimeClassName = &rc
	}
	if k.UserNamespaces {
		pod.Spec.HostUsers = &f
	}
	for _, t := range k.Tolerations {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator),
			Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return pod, nil
}

// agentSize bounds the agent's emptyDir: the binary (about 4 MB) and room.
const agentSize = 32 << 20

// MaxLog is how much of each of stdout and stderr the sandbox keeps: the
// most an MCP result carries (execution.max_output is at most this).
const MaxLog = 4 << 20

func ids(user string) (uid, gid int64, err error) {
	u, g, ok := strings.Cut(user, ":")
	if !ok {
		g = u
	}
	uid, err1 := strconv.ParseInt(u, 10, 64)
	gid, err2 := strconv.ParseInt(g, 10, 64)
	if err1 != nil || err2 != nil || uid <= 0 || gid <= 0 {
		return 0, 0, fmt.Errorf("security.sandbox_user %q: a pod runs as a numeric non-root uid:gid", user)
	}
	return uid, gid, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Labels reads back the labels a pod was created with.
func Labels(p *corev1.Pod) map[string]string {
	out := map[string]string{}
	if err := json.Unmarshal([]byte(p.Annotations[annotationLabels]), &out); err != nil || len(out) == 0 {
		out = map[string]string{}
		for k, v := range p.Labels {
			out[k] = v
		}
	}
	return out
}

// Mounts reads back the sandbox's mounts a pod was created with (their
// places in the workspace; a copy's Source is the creating core's alone).
func Mounts(p *corev1.Pod) []Mount {
	var out []Mount
	_ = json.Unmarshal([]byte(p.Annotations[annotationMounts]), &out)
	return out
}

// A read-only mount of a directory of the core's (a tool grant: generated
// code and the socket its sandbox calls tools through) cannot reach a pod:
// the pod gets a copy of the directory, filled by the seed and kept up to
// date through the keeper, which also serves its sockets.

// CopyDir is copy n's place in the seed and the keeper (from 1).
func CopyDir(n int) string { return fmt.Sprintf("/forge/copy/%d", n) }

// copyVolume is copy n's emptyDir.
func copyVolume(n int) string { return fmt.Sprintf("copy-%d", n) }

// copySize bounds a copy: generated code (toolbridge.MaxGenerated) and
// room to spare.
const copySize = 64 << 20
