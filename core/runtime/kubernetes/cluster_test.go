package kubernetes

// An in-process cluster for the unit tier: client-go's fake clientset for
// the API objects (the test moves a pod's status on, as a kubelet would),
// and an httptest API server whose exec and attach subresources are served
// as a real one serves them: WebSocket v5 requests through the API
// server's own stream translator, SPDY straight to the kubelet's own
// ServeExec / ServeAttach (or SPDY only, to make client-go fall back). The
// "container runtime" behind them runs commands on this host with os/exec
// under a temporary root per pod, each container's volume mounts mapped
// into it, so that the agent and the commands the runtime sends into pods
// really run: the agent volume holds mcp-forge-agent built for the test
// (TestMain), the seed attach runs the pod's own tar, startSandbox runs
// the sandbox container's command (the agent's init). A pod's pid
// namespace is emulated for kill only (-1: all but the init, 1: the init).
// It is a fake for what it does not model (no confinement, no namespaces,
// commands run as this user): the cluster tier tests those on a kubelet.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podspec"
)

// served is one exec or attach the kubelet ran.
type served struct {
	Pod, Container string
	Command        []string // nil for an attach
	Protocol       string   // how the client reached the API server: "websocket" or "spdy"
}

type cluster struct {
	t  testing.TB
	cs *fake.Clientset
	c  *Client
	k  config.Kubernetes

	srv  *httptest.Server
	base *url.URL

	// spdyOnly makes the API server refuse WebSocket upgrades, as one
	// without the stream translator does: client-go then falls back to SPDY.
	spdyOnly atomic.Bool

	mu       sync.Mutex
	roots    map[string]string              // pod → its temporary root
	procs    map[string]map[int]*os.Process // pod → live processes by pid
	calls    []served
	attached map[string]int  // pod → attaches that ended
	inits    map[string]int  // pod → pid of its sandbox's init, while it runs
	services map[int]bool    // pids of file services (the agent's serve), which live with their pod
	running  sync.WaitGroup  // sandbox containers
	broken   map[string]bool // pods whose execs fail (the kubelet cannot reach them)
}

func testKube() config.Kubernetes {
	k := config.Default().Runtime.Kubernetes
	k.Namespace = "sandboxes"
	return k
}

// newCluster is a fake cluster and a Client of it.
func newCluster(t testing.TB, k config.Kubernetes) *cluster {
	t.Helper()
	cl := &cluster{t: t, cs: fake.NewClientset(), k: k, roots: map[string]string{}, procs: map[string]map[int]*os.Process{},
		attached: map[string]int{}, inits: map[string]int{}, services: map[int]bool{}, broken: map[string]bool{}}
	// The fake's watch ignores field selectors; the API server does not,
	// and waitPod relies on it (another pod's events are not this one's).
	cl.cs.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		wa, ok := a.(k8stesting.WatchActionImpl)
		if !ok {
			return false, nil, nil
		}
		sel, err := fields.ParseSelector(wa.ListOptions.FieldSelector)
		if err != nil {
			return true, nil, err
		}
		w, err := cl.cs.Tracker().Watch(a.GetResource(), a.GetNamespace(), wa.ListOptions)
		if err != nil {
			return true, nil, err
		}
		return true, watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
			p, ok := ev.Object.(*corev1.Pod)
			return ev, !ok || sel.Matches(fields.Set{"metadata.name": p.Name, "metadata.namespace": p.Namespace})
		}), nil
	})
	cl.srv = httptest.NewServer(cl)
	cl.base, _ = url.Parse(cl.srv.URL)
	cl.c = NewWithClient(cl.cs, &rest.Config{Host: cl.srv.URL}, k, Options{Quota: 64 << 20})
	t.Cleanup(func() {
		cl.killAll()
		cl.running.Wait()
		cl.srv.CloseClientConnections()
		cl.srv.Close()
		cl.mu.Lock()
		defer cl.mu.Unlock()
		for _, r := range cl.roots {
			os.RemoveAll(r)
		}
	})
	return cl
}

// root is pod's temporary root, made on first use with the directories
// its volumes mount (/forge/ws, /forge/run).
func (cl *cluster) root(pod string) string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if r, ok := cl.roots[pod]; ok {
		return r
	}
	// Short: a unix socket path under it must stay below 108 bytes.
	r, err := os.MkdirTemp("", "kpod-")
	if err != nil {
		panic(err)
	}
	for _, d := range []string{podspec.WorkspaceDir, podspec.RunDir} {
		if err := os.MkdirAll(filepath.Join(r, d), 0o755); err != nil {
			panic(err)
		}
	}
	cl.roots[pod] = r
	return r
}

// ws is a path in pod's workspace on this host.
func (cl *cluster) ws(pod string, rel ...string) string {
	return filepath.Join(append([]string{cl.root(pod), podspec.WorkspaceDir}, rel...)...)
}

func (cl *cluster) served() []served {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return slices.Clone(cl.calls)
}

// attaches is how many attaches to pod ended.
func (cl *cluster) attaches(pod string) int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.attached[pod]
}

// live is how many processes the kubelet runs in pod right now, but its
// file service (the agent's serve), which lives as long as the pod.
func (cl *cluster) live(pod string) int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	n := 0
	for pid := range cl.procs[pod] {
		if !cl.services[pid] {
			n++
		}
	}
	return n
}

func (cl *cluster) killAll() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, ps := range cl.procs {
		for pid := range ps {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// status moves pod's status on, as its kubelet would.
func (cl *cluster) status(pod string, f func(*corev1.PodStatus)) {
	cl.t.Helper()
	api := cl.cs.CoreV1().Pods(cl.k.Namespace)
	p, err := api.Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		cl.t.Fatalf("get pod %s: %v", pod, err)
	}
	f(&p.Status)
	if _, err := api.UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		cl.t.Fatalf("update status of pod %s: %v", pod, err)
	}
}

func running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
}

func ended(code int32, reason string) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}
}

// seedRunning is a pod waiting for its workspace.
func seedRunning(st *corev1.PodStatus) {
	st.Phase = corev1.PodPending
	st.InitContainerStatuses = []corev1.ContainerStatus{{Name: podspec.Seed, State: running()}}
}

// sandboxRunning is a pod whose workspace arrived.
func sandboxRunning(st *corev1.PodStatus) {
	st.Phase = corev1.PodRunning
	st.InitContainerStatuses = []corev1.ContainerStatus{{Name: podspec.Seed, State: ended(0, "Completed")}}
	st.ContainerStatuses = []corev1.ContainerStatus{{Name: podspec.Sandbox, State: running()}, {Name: podspec.Keeper, State: running()}}
}

// sandboxEndedWith is a pod whose sandbox exited (the keeper still runs).
func sandboxEndedWith(code int32, reason string) func(*corev1.PodStatus) {
	return func(st *corev1.PodStatus) {
		sandboxRunning(st)
		st.ContainerStatuses[0].State = ended(code, reason)
	}
}

// ServeHTTP is the API server's pods/{exec,attach} (WebSocket v5 through
// the stream translator, SPDY to the kubelet) and the kubelet's
// /exec/{ns}/{pod}/{container} and /attach/... (SPDY).
func (cl *cluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) == 7 && parts[0] == "api" && parts[1] == "v1" && parts[2] == "namespaces" && parts[4] == "pods":
		cl.apiServer(w, r, parts[3], parts[5], parts[6])
	case len(parts) == 4 && (parts[0] == "exec" || parts[0] == "attach"):
		// Only the stream translator calls the kubelet here: the client
		// came over WebSocket.
		cl.kubelet(w, r, parts[0], parts[1], parts[2], parts[3], "websocket")
	default:
		http.NotFound(w, r)
	}
}

func (cl *cluster) apiServer(w http.ResponseWriter, r *http.Request, ns, pod, sub string) {
	if _, err := cl.cs.CoreV1().Pods(ns).Get(r.Context(), pod, metav1.GetOptions{}); err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	// PodExecOptions and PodAttachOptions as query parameters (client-go's
	// scheme has no conversion from url.Values for them: the API server's has).
	q0 := r.URL.Query()
	flag := func(k string) bool { return q0.Get(k) == "true" }
	container, command := q0.Get("container"), q0["command"]
	stdin, stdout, stderr, tty := flag("stdin"), flag("stdout"), flag("stderr"), flag("tty")
	if (sub == "exec") != (len(command) > 0) || (sub != "exec" && sub != "attach") {
		http.Error(w, "an exec needs a command, an attach has none", http.StatusBadRequest)
		return
	}
	// The kubelet's URL, as the API server's ExecLocation builds it.
	q := url.Values{}
	for _, c := range command {
		q.Add("command", c)
	}
	for p, on := range map[string]bool{remotecommand.ExecStdinParam: stdin, remotecommand.ExecStdoutParam: stdout, remotecommand.ExecStderrParam: stderr, remotecommand.ExecTTYParam: tty} {
		if on {
			q.Set(p, "1")
		}
	}
	loc := *cl.base
	loc.Path, loc.RawQuery = "/"+sub+"/"+ns+"/"+pod+"/"+container, q.Encode()

	if wsstream.IsWebSocketRequest(r) {
		if cl.spdyOnly.Load() {
			http.Error(w, "this API server speaks SPDY only", http.StatusBadRequest)
			return
		}
		// As the API server's ExecREST/AttachREST wrap their proxy to the kubelet.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		translator := proxy.NewStreamTranslatorHandler(&loc, tr, 0, proxy.Options{Stdin: stdin, Stdout: stdout, Stderr: stderr, Tty: tty})
		proxy.NewTranslatingHandler(http.NotFoundHandler(), translator, wsstream.IsWebSocketRequestWithStreamCloseProtocol).ServeHTTP(w, r)
		return
	}
	// The API server proxies SPDY to the kubelet as it is.
	r.URL.RawQuery = q.Encode()
	cl.kubelet(w, r, sub, ns, pod, container, "spdy")
}

func (cl *cluster) kubelet(w http.ResponseWriter, r *http.Request, sub, ns, pod, container, protocol string) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rt := &containerRuntime{cl: cl, ns: ns, protocol: protocol}
	if sub == "attach" {
		remotecommand.ServeAttach(w, r, rt, pod, "", container, opts, time.Minute, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
		return
	}
	remotecommand.ServeExec(w, r, rt, pod, "", container, r.URL.Query()["command"], opts, time.Minute, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// unreachable makes the kubelet fail every exec in pod from now on. The
// file service Start opened in the background may have connected before
// that (it does under load): it is dropped, so the next file operation
// dials, as it would after the kubelet lost the container.
func (cl *cluster) unreachable(pod string) {
	cl.mu.Lock()
	cl.broken[pod] = true
	cl.mu.Unlock()
	cl.c.mu.Lock()
	if p, ok := cl.c.pods[pod]; ok && p.keeper != nil {
		p.keeper.Close()
	}
	cl.c.mu.Unlock()
}

// containerRuntime is what the kubelet's streaming server calls.
type containerRuntime struct {
	cl       *cluster
	ns       string
	protocol string
}

func (rt *containerRuntime) ExecInContainer(ctx context.Context, pod, _, container string, cmd []string, in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	cl := rt.cl
	cl.mu.Lock()
	cl.calls = append(cl.calls, served{Pod: pod, Container: container, Command: slices.Clone(cmd), Protocol: rt.protocol})
	broken := cl.broken[pod]
	cl.mu.Unlock()
	if broken {
		return fmt.Errorf("container %s of pod %s is not running", container, pod)
	}
	p, err := cl.cs.CoreV1().Pods(rt.ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if args, ok := killArgs(cmd); ok {
		return rt.kill(pod, cmd, args[0], args[1], errw)
	}
	c, ok := containerOf(p, container)
	if !ok {
		return fmt.Errorf("pod %s has no container %s", pod, container)
	}
	return cl.runIn(pod, "", cl.mapper(pod, c)(cmd), nil, in, out, errw, false)
}

func containerOf(p *corev1.Pod, name string) (corev1.Container, bool) {
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		if c.Name == name {
			return c, true
		}
	}
	return corev1.Container{}, false
}

// mapper rewrites a container's paths to where its volume mounts are on
// this host: the ws volume at <root>/forge/ws (a subPath below it), run
// at <root>/forge/run, copy-N at <root>/forge/copy/N, tmp at <root>/tmp. Every mount path in an argument
// is rewritten, inside scripts too.
func (cl *cluster) mapper(pod string, c corev1.Container) func([]string) []string {
	root := cl.root(pod)
	type mount struct{ in, host string }
	var ms []mount
	for _, vm := range c.VolumeMounts {
		host := map[string]string{"ws": filepath.Join(root, podspec.WorkspaceDir, vm.SubPath), "run": filepath.Join(root, podspec.RunDir), "tmp": filepath.Join(root, "tmp"), "agent": agentHostDir}[vm.Name]
		if n, ok := strings.CutPrefix(vm.Name, "copy-"); ok {
			host = filepath.Join(root, "forge", "copy", n)
		}
		if host == "" {
			continue
		}
		_ = os.MkdirAll(host, 0o755)
		ms = append(ms, mount{strings.TrimSuffix(vm.MountPath, "/"), host})
	}
	if c.Name == podspec.Seed { // it unpacks where its mounts are
		ms = append(ms, mount{podspec.SeedRoot, filepath.Join(root, podspec.SeedRoot)})
	}
	slices.SortFunc(ms, func(a, b mount) int { return len(b.in) - len(a.in) }) // the longest mount first
	var pairs []string
	for _, m := range ms {
		pairs = append(pairs, m.in, m.host)
	}
	// One pass, the longest mount first: a host path put in is not
	// rewritten again. Scripts that take a mount path apart (its length,
	// its components) see the host path throughout, so they work as in
	// the pod.
	inside := strings.NewReplacer(pairs...)
	return func(argv []string) []string {
		out := make([]string, len(argv))
		for i, a := range argv {
			out[i] = inside.Replace(a)
		}
		return out
	}
}

// killArgs are the signal and target of an agent kill command.
func killArgs(cmd []string) ([]string, bool) {
	if len(cmd) != 4 || cmd[0] != agent.Path || cmd[1] != "kill" {
		return nil, false
	}
	return cmd[2:], true
}

// agentHostDir holds the mcp-forge-agent the fake's pods run (the agent
// volume of every pod), built once by TestMain.
var agentHostDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "forge-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentHostDir = dir
	build := exec.Command("go", "build", "-o", filepath.Join(dir, agent.Binary), "github.com/mcp-forge/mcp-forge/cmd/mcp-forge-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build mcp-forge-agent: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// kill stands in for a kill in the pod's pid namespace, which this host
// does not have: -1 is every process of the pod but its init, 1 is the
// init, and any other target must be one of the pod's process groups.
func (rt *containerRuntime) kill(pod string, cmd []string, sig, target string, errw io.Writer) error {
	cl := rt.cl
	pid, err := strconv.Atoi(target)
	if err != nil {
		return fmt.Errorf("kill target %q", target)
	}
	if pid < -1 { // a process group
		pid = -pid
	}
	cl.mu.Lock()
	_, ours := cl.procs[pod][pid]
	var all []int
	for p := range cl.procs[pod] {
		if !cl.services[p] { // the keeper's file service is in another container's pid namespace
			all = append(all, p)
		}
	}
	init := cl.inits[pod]
	root := cl.roots[pod]
	cl.mu.Unlock()
	cmd = slices.Clone(cmd)
	cmd[0] = filepath.Join(agentHostDir, agent.Binary)
	s := map[string]syscall.Signal{"KILL": syscall.SIGKILL, "TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP}[sig]
	switch {
	case pid == -1 && s != 0:
		for _, p := range all {
			if p != init {
				_ = syscall.Kill(-p, s)
			}
		}
		if init != 0 { // the init's children are in its group: all but the init
			for _, p := range groupOf(init) {
				if p != init {
					_ = syscall.Kill(p, s)
				}
			}
		}
		return nil
	case pid == 1 && init != 0:
		c := slices.Clone(cmd)
		c[len(c)-1] = strconv.Itoa(init)
		return cl.runIn(pod, root, c, nil, nil, nil, errw, false)
	case ours && pid != 1:
		// One of the pod's own process groups: the real script signals it.
		return cl.runIn(pod, root, cmd, nil, nil, nil, errw, false)
	default:
		fmt.Fprintln(errw, "kill: No such process")
		return utilexec.CodeExitError{Err: fmt.Errorf("exit 1"), Code: 1}
	}
}

// groupOf lists the processes of process group pgid, from /proc.
func groupOf(pgid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, not ')'.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

func (rt *containerRuntime) AttachContainer(ctx context.Context, pod, _, container string, in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize) error {
	cl := rt.cl
	cl.mu.Lock()
	cl.calls = append(cl.calls, served{Pod: pod, Container: container, Protocol: rt.protocol})
	cl.mu.Unlock()
	p, err := cl.cs.CoreV1().Pods(rt.ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return err
	}
	c, ok := containerOf(p, container)
	if !ok {
		return fmt.Errorf("pod %s has no container %s", pod, container)
	}
	if in != nil && !c.Stdin {
		return fmt.Errorf("container %s has no stdin to attach to", container)
	}
	// Attaching runs the container's own command with the stream as its
	// stdin: what the seed container does with its workspace.
	err = cl.runIn(pod, "", cl.mapper(pod, c)(c.Command), nil, in, out, errw, false)
	cl.mu.Lock()
	cl.attached[pod]++
	cl.mu.Unlock()
	return err
}

// startSandbox starts the sandbox container as a kubelet would once the
// seed container is done: its command (the init script and the spec's
// command) with its environment, working directory and mounts, the
// keeper running beside it. Its end is its container status.
func (cl *cluster) startSandbox(pod string) {
	cl.t.Helper()
	p, err := cl.cs.CoreV1().Pods(cl.k.Namespace).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		cl.t.Fatal(err)
	}
	c, _ := containerOf(p, podspec.Sandbox)
	m := cl.mapper(pod, c)
	env := []string{
		// What the kubelet puts in every container, enableServiceLinks or not.
		"KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443", "KUBERNETES_PORT=tcp://10.96.0.1:443",
		"HOSTNAME=" + pod,
	}
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	dir := ""
	if c.WorkingDir != "" {
		dir = m([]string{c.WorkingDir})[0]
	}
	started := make(chan int, 1)
	cl.running.Add(1)
	go func() {
		defer cl.running.Done()
		err := cl.runIn(pod, dir, m(c.Command), env, nil, nil, nil, true, started)
		code := 0
		var ce utilexec.CodeExitError
		if errors.As(err, &ce) {
			code = ce.Code
		} else if err != nil {
			code = 128
		}
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		api := cl.cs.CoreV1().Pods(cl.k.Namespace)
		if p, err := api.Get(context.Background(), pod, metav1.GetOptions{}); err == nil {
			sandboxEndedWith(int32(code), reason)(&p.Status)
			_, _ = api.UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
		}
	}()
	<-started
	cl.status(pod, sandboxRunning)
}

// runIn runs argv as a process of pod: in dir (the pod's root if ""),
// with env added to a base environment; init marks the sandbox's init.
func (cl *cluster) runIn(pod, dir string, argv []string, env []string, in io.Reader, out, errw io.Writer, init bool, started ...chan int) error {
	if dir == "" {
		dir = cl.root(pod)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LC_ALL=C"}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so that the test can end all it left
	if out != nil {
		cmd.Stdout = out
	}
	if errw != nil {
		cmd.Stderr = errw
	}
	var stdin io.WriteCloser
	if in != nil {
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			return err
		}
	}
	if err := cmd.Start(); err != nil {
		if errw != nil {
			fmt.Fprintf(errw, "exec %s: %v\n", argv[0], err)
		}
		for _, ch := range started {
			ch <- 0
		}
		return utilexec.CodeExitError{Err: err, Code: 127}
	}
	pid := cmd.Process.Pid
	cl.mu.Lock()
	if cl.procs[pod] == nil {
		cl.procs[pod] = map[int]*os.Process{}
	}
	cl.procs[pod][pid] = cmd.Process
	if init {
		cl.inits[pod] = pid
	}
	if len(argv) > 1 && filepath.Base(argv[0]) == agent.Binary && argv[1] == "serve" {
		cl.services[pid] = true // the pod's file service lives with the pod
	}
	cl.mu.Unlock()
	for _, ch := range started {
		ch <- pid
	}
	if in != nil {
		// Not waited for: a stream's stdin may stay open past the process
		// (Wait closes the pipe when the process is gone).
		go func() { _, _ = io.Copy(stdin, in); stdin.Close() }()
	}
	err := cmd.Wait()
	cl.mu.Lock()
	delete(cl.procs[pod], pid)
	delete(cl.services, pid)
	if init {
		delete(cl.inits, pod)
	}
	cl.mu.Unlock()
	if ee, ok := err.(*exec.ExitError); ok {
		ws := ee.Sys().(syscall.WaitStatus)
		code := ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal()) // as container runtimes report it
		}
		return utilexec.CodeExitError{Err: err, Code: code}
	}
	return err
}

// waitFor polls cond (a condition of the fake, not a sleep as a guess).
func waitFor(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
