// Package kubernetes runs sandboxes as pods of a Kubernetes cluster: the
// core's runtime when a team outgrows one machine. A pod is built from the
// same policy-checked spec as a Podman container; its workspace is an
// emptyDir filled from the core's copy before the sandbox starts, and files
// and sockets are reached through the API server (exec and attach), so the
// core needs no pod network and never touches a sandbox's files itself.
//
// This package is the pods' lifecycle, files and sockets as runtime.Runtime
// serves them; its parts with a job of their own are beneath it: the pod a
// spec becomes (podspec), the streams to a pod's containers (podexec),
// where its images are and the environments built into the registry
// (images), and what the cluster gives its pods (doctor). A core in the
// cluster coordinates with its replicas through core/cluster (replicas.go).
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	coord "github.com/mcp-forge/mcp-forge/core/cluster"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/doctor"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/images"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podexec"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podspec"
)

// opTimeout bounds an API call that should return promptly.
const opTimeout = 60 * time.Second

// startTimeout bounds how long a pod may take to get its workspace: image
// pulls on a cold node take a while.
const startTimeout = 5 * time.Minute

// Client is the Kubernetes runtime.
type Client struct {
	cs      kubernetes.Interface
	rest    *rest.Config
	k       config.Kubernetes
	quota   int64
	maxPids int64
	hostID  string         // hostID(), or of the core's own pod (identify)
	core    coord.CorePod  // the core's own pod when it runs in the cluster
	cluster *coord.Cluster // its coordination with its replicas; nil outside the cluster
	log     hclog.Logger
	// exec runs a command in a container of a pod (the API server's exec
	// or attach subresource); tests give it the kubelet's own handler.
	exec   podexec.Func
	images *images.Store // where pods' images are, and the environments built

	mu   sync.Mutex
	pods map[string]*podInfo // pods this core created or adopted
	// sessionGrace: the cluster's reaper keeps the recorded sessions of
	// a gone core for it (Options.SessionGrace).
	sessionGrace time.Duration
}

// podInfo is what the core keeps of a pod it created.
type podInfo struct {
	workspace string          // host directory seeded into the pod at Start
	mounts    []podspec.Mount // the sandbox's mounts, to reach its sockets
	seeded    bool
	keeper    *podexec.Service   // its file service, once used
	unrelay   context.CancelFunc // ends the relay of its copied sockets
	// dials cut the relays of the sockets dialled in it (DialSocket),
	// each until its connection ends.
	dials map[*context.CancelFunc]bool
	// recorded: its session is recorded, so another core may serve it
	// now (core/cluster); Remove checks first.
	recorded bool
}

var klogOnce sync.Once

// Options are what the runtime takes beyond its configuration section.
type Options struct {
	Quota   int64 // volumes.session_quota: the workspace emptyDir's size
	MaxPids int64 // execution.max_pids: the most processes a run may have
	// SessionGrace is how long the reaper keeps the recorded session of
	// a core pod that is gone for another replica to claim
	// (sessions.idle_timeout).
	SessionGrace time.Duration
	Log          hclog.Logger
}

// LabelHost marks the pods of the cores of one host, or of one core pod
// (core/cluster).
const LabelHost = coord.LabelHost

// hostID names this host's process namespace: its boot, its name and its
// pid namespace, hashed to a label value.
func hostID() string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	name, _ := os.Hostname()
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return coord.LabelHash(strings.TrimSpace(string(boot)), name, ns)
}

// RESTConfig is the core's credentials: the kubeconfig file, else the
// in-cluster service account, else $KUBECONFIG or ~/.kube/config.
func RESTConfig(k config.Kubernetes) (*rest.Config, error) {
	if k.Kubeconfig == "" {
		if c, err := rest.InClusterConfig(); err == nil {
			return c, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if k.Kubeconfig != "" {
		rules.ExplicitPath = k.Kubeconfig
	}
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.Context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("runtime.kubernetes.kubeconfig: %w (set it to the core's kubeconfig, or run the core in the cluster)", err)
	}
	return c, nil
}

// New connects to the cluster named by k. Nothing is called yet (a cluster
// that is down is reported by the first call, and by doctor), except for a
// core in the cluster, which reads its own pod (core_pod).
func New(k config.Kubernetes, o Options) (*Client, error) {
	rc, err := RESTConfig(k)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	c := NewWithClient(cs, rc, k, o)
	if k.CorePod != "" {
		if err := c.identify(context.Background()); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// NewWithClient is New over a given clientset (tests: a fake one).
func NewWithClient(cs kubernetes.Interface, rc *rest.Config, k config.Kubernetes, o Options) *Client {
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	// client-go logs through klog to stderr; what it says belongs in the
	// core's log (a relay's stdin copier reports the close of its pipe).
	klogOnce.Do(func() {
		log := o.Log.Named("client-go")
		klog.SetLogger(funcr.New(func(prefix, args string) { log.Debug(prefix, "args", args) }, funcr.Options{}))
	})
	c := &Client{cs: cs, rest: rc, k: k, quota: o.Quota, maxPids: o.MaxPids, hostID: hostID(), log: o.Log, pods: map[string]*podInfo{},
		sessionGrace: o.SessionGrace, images: images.New(cs, k, o.Log)}
	c.exec = c.tracedExec
	return c
}

// tracedExec is an exec through the API server (podexec.API) with each in
// the debug log: every one costs the container runtime's exec (about
// 100 ms), so each is worth seeing.
func (c *Client) tracedExec(ctx context.Context, pod string, s podexec.Stream) (int, error) {
	t0 := time.Now()
	code, err := podexec.API(ctx, c.rest, c.k.Namespace, pod, s)
	what := "attach"
	if len(s.Command) > 0 {
		what = s.Command[0]
		if len(s.Command) > 1 && s.Command[0] == agent.Path {
			what = agent.Binary + " " + s.Command[1]
		}
	}
	c.log.Debug("exec", "pod", pod, "container", s.Container, "command", what, "exit", code, "took", time.Since(t0), "error", err)
	return code, err
}

func op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, opTimeout)
}

// fail wraps an API error with what was done and to which pod.
func fail(what, id string, err error) error { return coord.Fail(what, id, err) }

// ErrNotOurs is a pod this core did not create.
var ErrNotOurs = errors.New("no such sandbox pod")

// Info implements runtime.Runtime.
func (c *Client) Info(ctx context.Context) (runtime.Info, error) {
	v, err := c.cs.Discovery().ServerVersion()
	if err != nil {
		return runtime.Info{}, fmt.Errorf("kubernetes API server %s: %w", c.host(), err)
	}
	oci := "the cluster's default"
	if c.k.RuntimeClass != "" {
		oci = "RuntimeClass " + c.k.RuntimeClass
	}
	return runtime.Info{Engine: "Kubernetes", Socket: c.host(), Version: v.GitVersion, APIVersion: v.Major + "." + v.Minor, OCIRuntime: oci, CgroupsV2: true, CgroupsMode: "cluster"}, nil
}

// Guarantees implements runtime.Guarantor: what a pod gets on this
// cluster (doctor.Cluster.Guarantees).
func (c *Client) Guarantees(ctx context.Context) (runtime.Report, error) {
	return c.checks().Guarantees(ctx)
}

// checks are the cluster's checks: its guarantees, and doctor's.
func (c *Client) checks() doctor.Cluster {
	return doctor.Cluster{API: c.cs, Config: c.k, MaxPids: c.maxPids, Info: c.Info, Images: c.images}
}

func (c *Client) host() string {
	if c.rest == nil {
		return "(in-process)"
	}
	return c.rest.Host
}

// Create implements runtime.Containers: the pod starts at once, but its
// sandbox waits for the workspace, which Start sends.
func (c *Client) Create(ctx context.Context, s runtime.Spec) (string, error) {
	if s.Isolation == runtime.IsolationGVisor && c.k.RuntimeClass == "" {
		// Fail closed: the node's default runtime is not gVisor.
		return "", fmt.Errorf("pod for %s: refused, the sandbox must run under gVisor and runtime.kubernetes.runtime_class is empty (set it to the cluster's gVisor RuntimeClass, e.g. \"gvisor\")", s.Image)
	}
	name := podspec.Name()
	pod, err := podspec.Build(s, c.k, c.k.Namespace, name, map[string]string{LabelHost: c.hostID}, c.quota)
	if err != nil {
		return "", err
	}
	if c.cluster != nil {
		pod.Annotations[coord.AnnotationCorePod] = c.core.String()
	}
	mounts, _ := podspec.Places(s)
	cx, cancel := op(ctx)
	defer cancel()
	made, err := c.cs.CoreV1().Pods(c.k.Namespace).Create(cx, pod, metav1.CreateOptions{})
	if err != nil {
		return "", fail("create", name, err)
	}
	if err := dropped(pod, made); err != nil {
		zero := int64(0)
		_ = c.cs.CoreV1().Pods(c.k.Namespace).Delete(context.WithoutCancel(cx), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		return "", err
	}
	c.mu.Lock()
	c.pods[name] = &podInfo{workspace: s.WorkspacePath, mounts: mounts}
	c.mu.Unlock()
	return name, nil
}

// dropped refuses a pod the API server stored without a confinement it
// was asked for: a server whose feature gate is off drops a field it does
// not serve (hostUsers) instead of refusing it, and the pod would run
// without it.
func dropped(asked, made *corev1.Pod) error {
	if asked.Spec.HostUsers != nil && !*asked.Spec.HostUsers && (made.Spec.HostUsers == nil || *made.Spec.HostUsers) {
		return fmt.Errorf("the API server dropped hostUsers: false from pod %s (its UserNamespacesSupport feature gate is off): the pod was deleted; enable user namespaces on the cluster, or set runtime.kubernetes.user_namespaces = false and waive the user-namespace guarantee", asked.Name)
	}
	return nil
}

func (c *Client) info(id string) (*podInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[id]
	if !ok {
		return nil, fmt.Errorf("pod %s: %w", id, ErrNotOurs)
	}
	return p, nil
}

// Start implements runtime.Containers: it waits for the seed container and
// streams the workspace into it; the sandbox starts when that ends.
func (c *Client) Start(ctx context.Context, id string) error {
	p, err := c.info(id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	seeded := p.seeded
	p.seeded = true
	c.mu.Unlock()
	if seeded {
		return fmt.Errorf("pod %s was already started", id)
	}
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if _, err := c.waitPod(sctx, id, func(pod *corev1.Pod) (bool, error) {
		if st, ok := status(pod.Status.InitContainerStatuses, podspec.Seed); ok && st.State.Running != nil {
			return true, nil
		}
		return false, stuck(pod)
	}); err != nil {
		return fmt.Errorf("start pod %s: %w", id, err)
	}
	if err := c.seed(sctx, id, p.workspace, p.mounts); err != nil {
		return fmt.Errorf("start pod %s: send its workspace: %w", id, err)
	}
	// Started as a Podman container is: its command runs (or already
	// ended), and its keeper serves files and endpoints.
	if _, err := c.waitPod(sctx, id, func(pod *corev1.Pod) (bool, error) {
		keeper, _ := status(pod.Status.ContainerStatuses, podspec.Keeper)
		sandbox, _ := status(pod.Status.ContainerStatuses, podspec.Sandbox)
		if keeper.State.Running != nil && (sandbox.State.Running != nil || sandbox.State.Terminated != nil) {
			return true, nil
		}
		return false, stuck(pod)
	}); err != nil {
		return fmt.Errorf("start pod %s: %w", id, err)
	}
	// The file service's exec is opened now, while a warm pod waits for
	// its run: the run's first file operation then costs a round trip.
	_, _ = c.keeperOf(context.WithoutCancel(ctx), id)
	// The copied sockets listen before the sandbox is handed over: its
	// first call through one must not find nothing there.
	socks, err := socketsOf(p.mounts)
	if err != nil {
		return fmt.Errorf("start pod %s: %w", id, err)
	}
	if len(socks) > 0 {
		rctx, unrelay := context.WithCancel(context.WithoutCancel(ctx))
		if err := c.startRelay(rctx, sctx, id, socks); err != nil {
			unrelay()
			return fmt.Errorf("start pod %s: %w", id, err)
		}
		c.mu.Lock()
		p.unrelay = unrelay
		c.mu.Unlock()
	}
	return nil
}

// stuck says why a pod cannot go on, from its status: an image that is not
// there, a container that cannot be created, a pod the node refused.
func stuck(pod *corev1.Pod) error {
	if pod.Status.Phase == corev1.PodFailed {
		return fmt.Errorf("the pod failed: %s %s", pod.Status.Reason, pod.Status.Message)
	}
	all := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, st := range all {
		if w := st.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return fmt.Errorf("container %s: %s: %s", st.Name, w.Reason, w.Message)
			}
		}
		if t := st.State.Terminated; t != nil && st.Name == podspec.Seed && t.ExitCode != 0 {
			return fmt.Errorf("the workspace could not be unpacked (exit %d, %s)", t.ExitCode, t.Message)
		}
	}
	return nil
}

func status(list []corev1.ContainerStatus, name string) (corev1.ContainerStatus, bool) {
	for _, st := range list {
		if st.Name == name {
			return st, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// waitPod watches pod id until done says so (or fails).
func (c *Client) waitPod(ctx context.Context, id string, done func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	api := c.cs.CoreV1().Pods(c.k.Namespace)
	for {
		pod, err := api.Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return nil, fail("get", id, err)
		}
		if ok, err := done(pod); ok || err != nil {
			return pod, err
		}
		w, err := api.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", id).String(), ResourceVersion: pod.ResourceVersion})
		if err != nil {
			return nil, fail("watch", id, err)
		}
		again := false
		for !again {
			select {
			case <-ctx.Done():
				w.Stop()
				return nil, ctx.Err()
			case ev, open := <-w.ResultChan():
				if !open {
					again = true
					break
				}
				switch ev.Type {
				case watch.Deleted:
					w.Stop()
					return nil, fmt.Errorf("pod %s was deleted", id)
				case watch.Error:
					again = true
				case watch.Added, watch.Modified:
					p, ok := ev.Object.(*corev1.Pod)
					if !ok {
						continue
					}
					if ok, err := done(p); ok || err != nil {
						w.Stop()
						return p, err
					}
				}
			}
		}
		w.Stop()
	}
}

// sandboxEnded reports the sandbox container's end, if it ended.
func sandboxEnded(pod *corev1.Pod) (*corev1.ContainerStateTerminated, bool) {
	if st, ok := status(pod.Status.ContainerStatuses, podspec.Sandbox); ok && st.State.Terminated != nil {
		return st.State.Terminated, true
	}
	return nil, false
}

// Wait implements runtime.Containers.
func (c *Client) Wait(ctx context.Context, id string, timeout time.Duration) (int, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pod, err := c.waitPod(wctx, id, func(pod *corev1.Pod) (bool, error) {
		if _, ok := sandboxEnded(pod); ok {
			return true, nil
		}
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			return true, nil
		}
		return false, stuck(pod)
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		c.kill(id)
		return -1, runtime.ErrTimeout
	}
	if err != nil {
		return -1, err
	}
	if t, ok := sandboxEnded(pod); ok {
		return int(t.ExitCode), nil
	}
	return -1, fmt.Errorf("pod %s ended (%s: %s) before its sandbox ran", id, pod.Status.Reason, pod.Status.Message)
}

// kill ends the sandbox's command: every process but its init, which then
// exits as its command did (137). A pod cannot signal its PID 1 with
// SIGKILL from inside, and deleting the pod would lose its files.
func (c *Client) kill(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.run(ctx, id, podspec.Sandbox, killCmd("KILL", -1), nil); err != nil {
		c.log.Debug("kill of a sandbox's processes failed; deleting its pod", "pod", id, "error", err)
		_ = c.Remove(ctx, id)
	}
}

// State implements runtime.Containers.
func (c *Client) State(ctx context.Context, id string) (bool, int, error) {
	cx, cancel := op(ctx)
	defer cancel()
	pod, err := c.cs.CoreV1().Pods(c.k.Namespace).Get(cx, id, metav1.GetOptions{})
	if err != nil {
		return false, 0, fail("get", id, err)
	}
	if t, ok := sandboxEnded(pod); ok {
		return false, int(t.ExitCode), nil
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return false, -1, nil
	}
	return true, 0, nil
}

// OOMKilled implements runtime.Containers, from the pod's status: the
// runtime records an OOM kill in the container's cgroup as its reason.
func (c *Client) OOMKilled(ctx context.Context, id string) (runtime.OOMVerdict, error) {
	cx, cancel := op(ctx)
	defer cancel()
	pod, err := c.cs.CoreV1().Pods(c.k.Namespace).Get(cx, id, metav1.GetOptions{})
	if err != nil {
		return runtime.OOMUnknown, fail("get", id, err)
	}
	t, ok := sandboxEnded(pod)
	if !ok {
		return runtime.OOMUnknown, nil
	}
	if t.Reason == "OOMKilled" {
		return runtime.OOMKill, nil
	}
	return runtime.NoOOMKill, nil
}

// Logs implements runtime.Containers: the sandbox's init keeps stdout and
// stderr apart in its run directory (the log API would merge them).
func (c *Client) Logs(ctx context.Context, id string, max int64) (runtime.Output, error) {
	res, data, err := c.keep(ctx, id, agent.Request{Op: agent.OpLogs, Max: max}, nil)
	if err != nil {
		return runtime.Output{}, err
	}
	if err := fileErr("read the sandbox's output", max, res); err != nil {
		return runtime.Output{}, err
	}
	return logsOf(res.Logs, data)
}

func logsOf(l *agent.Logs, data []byte) (runtime.Output, error) {
	if l == nil || l.Stdout < 0 || l.Stdout > int64(len(data)) {
		return runtime.Output{}, fmt.Errorf("the sandbox's output: a malformed answer")
	}
	out := runtime.Output{Stdout: data[:l.Stdout:l.Stdout], Stderr: data[l.Stdout:]}
	// A run still going has no totals yet: what was kept is what is known.
	out.StdoutTotal = maxInt(l.StdoutTotal, int64(len(out.Stdout)))
	out.StderrTotal = maxInt(l.StderrTotal, int64(len(out.Stderr)))
	return out, nil
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// Signal implements runtime.Containers: to the sandbox's init, which
// passes it to the command. SIGKILL cannot reach a PID 1 from inside: it
// goes to every other process, which ends the command and then the init.
func (c *Client) Signal(ctx context.Context, id, sig string) error {
	sig = strings.TrimPrefix(strings.ToUpper(sig), "SIG")
	cmd := podspec.AgentCmd("kill", sig, "1")
	if sig == "KILL" {
		cmd = killCmd(sig, -1)
	}
	res, err := c.run(ctx, id, podspec.Sandbox, cmd, nil)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 && sig != "KILL" {
		return errExit("signal "+sig+" to pod "+id, res)
	}
	return nil
}

// Stop implements runtime.Containers: SIGTERM, then SIGKILL past grace.
func (c *Client) Stop(ctx context.Context, id string, grace time.Duration) error {
	if running, _, err := c.State(ctx, id); err != nil || !running {
		return err
	}
	_ = c.Signal(ctx, id, "TERM")
	wctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	if _, err := c.waitPod(wctx, id, func(pod *corev1.Pod) (bool, error) { _, ok := sandboxEnded(pod); return ok, nil }); err == nil {
		return nil
	}
	c.kill(id)
	return nil
}

// removeWait bounds how long Remove waits for a pod to be gone: until then
// it still holds its node's resources, and the run its slot.
const removeWait = 30 * time.Second

// Remove implements runtime.Containers: the pod is deleted at once (its
// workspace goes with it) and Remove returns when it is gone.
func (c *Client) Remove(ctx context.Context, id string) error {
	cx, cancel := context.WithTimeout(ctx, removeWait)
	defer cancel()
	api := c.cs.CoreV1().Pods(c.k.Namespace)
	zero := int64(0)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	c.mu.Lock()
	recorded := c.pods[id] != nil && c.pods[id].recorded
	c.mu.Unlock()
	if recorded {
		// Another core may have taken its session over: the pod is
		// removed only while it is this core's, in the version read.
		p, err := api.Get(cx, id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			c.forget(id)
			return nil
		} else if err != nil {
			return fail("get", id, err)
		}
		if p.Labels[LabelHost] != c.hostID || p.Annotations[coord.AnnotationReleased] != "" {
			c.forget(id)
			return fmt.Errorf("pod %s: its session is served by another core now; not removed", id)
		}
		opts.Preconditions = &metav1.Preconditions{UID: &p.UID, ResourceVersion: &p.ResourceVersion}
	}
	err := api.Delete(cx, id, opts)
	c.forget(id)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fail("delete", id, err)
	}
	for {
		if _, err := api.Get(cx, id, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return fail("get", id, err)
		}
		select {
		case <-cx.Done():
			return fmt.Errorf("pod %s was deleted but is still there after %s", id, removeWait)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// List implements runtime.Containers: pods of this namespace marked
// managed, filtered by every label asked (labels too long for Kubernetes
// are matched on the pod's annotation).
func (c *Client) List(ctx context.Context, want map[string]string) ([]runtime.Container, error) {
	cx, cancel := op(ctx)
	defer cancel()
	sel := labels.Set{runtime.LabelManaged: "true", LabelHost: c.hostID}
	list, err := c.cs.CoreV1().Pods(c.k.Namespace).List(cx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fail("list", "(all)", err)
	}
	var out []runtime.Container
	for i := range list.Items {
		p := &list.Items[i]
		all := podspec.Labels(p)
		if v := p.Labels[runtime.LabelRecorded]; v != "" {
			all[runtime.LabelRecorded] = v // set after create, so not in the spec's
		}
		match := true
		for k, v := range want {
			if all[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		state := "running"
		if _, ok := sandboxEnded(p); ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			state = "exited"
		} else if p.DeletionTimestamp != nil {
			state = "removing"
		}
		img := sandboxImage(p)
		out = append(out, runtime.Container{ID: p.Name, Name: p.Name, Image: img, ImageID: img, State: state, Created: p.CreationTimestamp.Time, Labels: all})
		c.adopt(p)
	}
	return out, nil
}

// adopt learns a pod another core made (its mounts), so that the sandbox
// manager can remove it and a later core reach it.
func (c *Client) adopt(p *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pods[p.Name]; ok {
		return
	}
	c.pods[p.Name] = &podInfo{seeded: true, recorded: p.Labels[runtime.LabelRecorded] == "true", mounts: podspec.Mounts(p)}
}

// Image implements runtime.Images: in the registry, or on the nodes
// (images.Store.Image).
func (c *Client) Image(ctx context.Context, name string) (runtime.ImageInfo, bool, error) {
	return c.images.Image(ctx, name)
}

// BuildLayer implements runtime.ImageBuilder: an environment is layered
// and pushed in runtime.kubernetes.image_registry (images.Store.BuildLayer).
func (c *Client) BuildLayer(ctx context.Context, b runtime.LayerBuild) (string, error) {
	return c.images.BuildLayer(ctx, b)
}

// Tag implements runtime.ImageBuilder.
func (c *Client) Tag(ctx context.Context, id, ref string) error { return c.images.Tag(ctx, id, ref) }

// Images implements runtime.ImageBuilder.
func (c *Client) Images(ctx context.Context, labels map[string]string) ([]runtime.ImageInfo, error) {
	return c.images.Images(ctx, labels)
}

// RemoveImage implements runtime.ImageBuilder.
func (c *Client) RemoveImage(ctx context.Context, ref string) error {
	return c.images.RemoveImage(ctx, ref)
}
