package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/images"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podspec"
)

// hostWorkspace is the core's copy of a workspace: files, a directory, a
// link (sent as a link) and a fifo (not sent).
func hostWorkspace(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	files := map[string]string{"a.txt": "alpha", "code/runner.py": "print('hi')\n", "sub/b.bin": "\x00\x01binary\xff", "out/.keep": ""}
	for rel, data := range files {
		p := filepath.Join(d, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// More than one stream frame, and names a shell would split.
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>12)
	}
	if err := os.MkdirAll(filepath.Join(d, "dir with space"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "dir with space", "ünï -x.bin"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(d, "code/runner.py"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(d, "chan"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(d, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(d, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}

// sessionID is 100 characters: a session id of the core, no label value.
var sessionID = strings.Repeat("s0123456789", 9) + "abcdefghij"

// codeHash is 64 hex: too long for a label value.
const codeHash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

// specIn is a one-shot spec as the policy hardens a Python run, over the
// workspace dir, with a channel mount.
func specIn(dir string) runtime.Spec {
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
			{Source: dir + "/code", Target: "/forge/code", ReadOnly: true},
			{Source: dir + "/out", Target: "/work"},
			{Source: dir + "/chan", Target: "/forge/chan"},
		},
		Limits:        runtime.Limits{MemoryBytes: 512 << 20, CPUQuota: 50000, Pids: 256, NoFile: 1024, Timeout: 30 * time.Second},
		WorkspacePath: dir,
		Plugin:        "python",
	}
}

// watches counts the pod watches the client opened.
func (cl *cluster) watches() int {
	n := 0
	for _, a := range cl.cs.Actions() {
		if a.GetVerb() == "watch" && a.GetResource().Resource == "pods" {
			n++
		}
	}
	return n
}

// started is a pod created and started from the workspace dir, its
// sandbox running.
func (cl *cluster) started(t testing.TB, s runtime.Spec) string {
	t.Helper()
	ctx := context.Background()
	id, err := cl.c.Create(ctx, s)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	cl.status(id, seedRunning)
	start := async(func() error { return cl.c.Start(ctx, id) })
	// The kubelet starts the containers once the seed container is done.
	waitFor(t, "the workspace sent", 10*time.Second, func() bool { return cl.attaches(id) == 1 })
	cl.status(id, sandboxRunning)
	if err := returned(t, "Start", 10*time.Second, start); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return id
}

func async[T any](f func() T) <-chan T {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	return ch
}

func returned[T any](t testing.TB, what string, d time.Duration, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
		panic("unreachable")
	}
}

type waited struct {
	code int
	err  error
}

// The whole life of a sandbox pod, over both streaming protocols.
func TestLifecycle(t *testing.T) {
	for _, proto := range []string{"websocket", "spdy"} {
		t.Run(proto, func(t *testing.T) {
			cl := newCluster(t, testKube())
			cl.spdyOnly.Store(proto == "spdy")
			ctx := context.Background()
			dir := hostWorkspace(t)
			s := specIn(dir)
			api := cl.cs.CoreV1().Pods(cl.k.Namespace)

			id, err := cl.c.Create(ctx, s)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			got, err := api.Get(ctx, id, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the created pod: %v", err)
			}
			want, err := podspec.Build(s, cl.k, cl.k.Namespace, id, map[string]string{LabelHost: cl.c.hostID}, 64<<20)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got.Spec, want.Spec) || !equality.Semantic.DeepEqual(got.Labels, want.Labels) ||
				!equality.Semantic.DeepEqual(got.Annotations, want.Annotations) || got.Namespace != "sandboxes" {
				t.Errorf("the pod created is not the pod podspec.Build builds:\n got %+v\nwant %+v", got, want)
			}

			// Start waits for the seed container, then sends the workspace.
			before := cl.watches()
			start := async(func() error { return cl.c.Start(ctx, id) })
			waitFor(t, "Start watches the pod", 5*time.Second, func() bool { return cl.watches() > before })
			cl.status(id, seedRunning)
			// Start returns once the sandbox and the keeper run.
			waitFor(t, "the workspace sent", 10*time.Second, func() bool { return cl.attaches(id) == 1 })
			waitFor(t, "Start watches the pod again", 5*time.Second, func() bool { return cl.watches() > before+1 })
			cl.status(id, func(st *corev1.PodStatus) {
				sandboxRunning(st)
				st.ContainerStatuses[1].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
			})
			cl.status(id, sandboxRunning)
			if err := returned(t, "Start", 10*time.Second, start); err != nil {
				t.Fatalf("Start: %v", err)
			}
			for rel, data := range map[string]string{"a.txt": "alpha", "code/runner.py": "print('hi')\n", "sub/b.bin": "\x00\x01binary\xff", "out/.keep": ""} {
				b, err := os.ReadFile(cl.ws(id, rel))
				if err != nil || string(b) != data {
					t.Errorf("workspace file %s in the pod: %q, %v; want %q", rel, b, err, data)
				}
			}
			want3, _ := os.ReadFile(filepath.Join(dir, "dir with space", "ünï -x.bin"))
			if b, err := os.ReadFile(cl.ws(id, "dir with space", "ünï -x.bin")); err != nil || !bytes.Equal(b, want3) || len(b) != 3<<20 {
				t.Errorf("the 3 MiB file in the pod: %d bytes, %v; want its %d bytes", len(b), err, len(want3))
			}
			if fi, err := os.Stat(cl.ws(id, "code/runner.py")); err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("runner.py's mode in the pod: %v, %v; want 0755", fi.Mode(), err)
			}
			if l, err := os.Readlink(cl.ws(id, "link")); err != nil || l != "a.txt" {
				t.Errorf("the link arrived as %q, %v; want a link to a.txt", l, err)
			}
			if _, err := os.Lstat(cl.ws(id, "fifo")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a fifo was sent into the pod: %v", err)
			}
			attach := slices.DeleteFunc(cl.served(), isService)
			if len(attach) != 1 || attach[0].Container != podspec.Seed || attach[0].Command != nil || attach[0].Protocol != proto {
				t.Errorf("Start's streams: %+v; want one attach to the seed container over %s (and the file service)", attach, proto)
			}
			if err := cl.c.Start(ctx, id); err == nil || !strings.Contains(err.Error(), "already started") {
				t.Errorf("a second Start: %v; want 'already started'", err)
			}

			// Running: State says so, OOMKilled cannot tell yet.
			cl.status(id, sandboxRunning)
			if run, _, err := cl.c.State(ctx, id); err != nil || !run {
				t.Errorf("State of a running sandbox: %v, %v", run, err)
			}
			if v, err := cl.c.OOMKilled(ctx, id); err != nil || v != runtime.OOMUnknown {
				t.Errorf("OOMKilled of a running sandbox: %v, %v; want unknown", v, err)
			}

			// Wait returns the sandbox's exit code once its status says so.
			before = cl.watches()
			wait := async(func() waited { c, err := cl.c.Wait(ctx, id, 10*time.Second); return waited{c, err} })
			waitFor(t, "Wait watches the pod", 5*time.Second, func() bool { return cl.watches() > before })
			cl.status(id, sandboxEndedWith(3, "Error"))
			if w := returned(t, "Wait", 10*time.Second, wait); w.err != nil || w.code != 3 {
				t.Errorf("Wait: %d, %v; want 3", w.code, w.err)
			}
			if run, code, err := cl.c.State(ctx, id); err != nil || run || code != 3 {
				t.Errorf("State of an ended sandbox: %v, %d, %v; want not running, 3", run, code, err)
			}
			if v, err := cl.c.OOMKilled(ctx, id); err != nil || v != runtime.NoOOMKill {
				t.Errorf("OOMKilled after exit 3 (Error): %v, %v; want no OOM kill", v, err)
			}
			cl.status(id, sandboxEndedWith(137, "OOMKilled"))
			if v, err := cl.c.OOMKilled(ctx, id); err != nil || v != runtime.OOMKill {
				t.Errorf("OOMKilled after reason OOMKilled: %v, %v; want an OOM kill", v, err)
			}

			// Logs reads the run directory the sandbox's init wrote.
			run := filepath.Join(cl.root(id), podspec.RunDir)
			for name, data := range map[string]string{"stdout": "hello world", "stderr": "oops", "totals": "2000000 4\n"} {
				if err := os.WriteFile(filepath.Join(run, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out, err := cl.c.Logs(ctx, id, 5)
			if err != nil {
				t.Fatalf("Logs: %v", err)
			}
			if string(out.Stdout) != "hello" || string(out.Stderr) != "oops" || out.StdoutTotal != 2000000 || out.StderrTotal != 4 {
				t.Errorf("Logs(5): %q %q totals %d %d; want \"hello\" \"oops\" totals 2000000 4", out.Stdout, out.Stderr, out.StdoutTotal, out.StderrTotal)
			}
			if err := os.Remove(filepath.Join(run, "totals")); err != nil {
				t.Fatal(err)
			}
			if out, err := cl.c.Logs(ctx, id, 1<<20); err != nil || string(out.Stdout) != "hello world" || out.StdoutTotal != 11 || out.StderrTotal != 4 {
				t.Errorf("Logs of a run without totals: %q, %d %d, %v; want what was kept as the totals", out.Stdout, out.StdoutTotal, out.StderrTotal, err)
			}
			for _, c := range cl.served()[1:] {
				if c.Container != podspec.Keeper || c.Protocol != proto {
					t.Errorf("Logs ran %v in %s over %s; want the keeper over %s", c.Command, c.Container, c.Protocol, proto)
				}
			}

			// Remove deletes the pod and forgets it.
			if err := cl.c.Remove(ctx, id); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if _, err := api.Get(ctx, id, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the pod after Remove: %v; want not found", err)
			}
			if _, err := cl.c.info(id); !errors.Is(err, ErrNotOurs) {
				t.Errorf("the client still knows the removed pod: %v", err)
			}
			if err := cl.c.Remove(ctx, id); err != nil {
				t.Errorf("Remove of a pod already gone: %v; want nil", err)
			}
		})
	}
}

// Past its timeout Wait kills the sandbox's processes (not the pod: its
// files are still to be read), and deletes the pod if even that fails.
func TestWaitTimeout(t *testing.T) {
	cl := newCluster(t, testKube())
	ctx := context.Background()
	api := cl.cs.CoreV1().Pods(cl.k.Namespace)

	id := cl.started(t, specIn(hostWorkspace(t)))
	t0 := time.Now()
	code, err := cl.c.Wait(ctx, id, 200*time.Millisecond)
	if !errors.Is(err, runtime.ErrTimeout) || code != -1 {
		t.Fatalf("Wait past its timeout: %d, %v; want -1, ErrTimeout", code, err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("Wait with a 200ms timeout took %s", d)
	}
	kill := killCmd("KILL", -1)
	sent := slices.ContainsFunc(cl.served(), func(c served) bool {
		return c.Pod == id && c.Container == podspec.Sandbox && slices.Equal(c.Command, kill)
	})
	if !sent {
		t.Errorf("no %v in the sandbox container after the timeout; served %+v", kill, cl.served())
	}
	if _, err := api.Get(ctx, id, metav1.GetOptions{}); err != nil {
		t.Errorf("the pod is gone after a kill that worked: %v", err)
	}

	// The kubelet cannot reach the container: the pod goes.
	id2 := cl.started(t, specIn(hostWorkspace(t)))
	cl.unreachable(id2)
	if _, err := cl.c.Wait(ctx, id2, 200*time.Millisecond); !errors.Is(err, runtime.ErrTimeout) {
		t.Fatalf("Wait past its timeout: %v; want ErrTimeout", err)
	}
	if _, err := api.Get(ctx, id2, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a pod whose kill failed is still there: %v", err)
	}

	// The caller's context ending is no timeout: nothing is killed.
	id3 := cl.started(t, specIn(hostWorkspace(t)))
	n := len(cl.served())
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := cl.c.Wait(cctx, id3, time.Minute); err == nil || errors.Is(err, runtime.ErrTimeout) {
		t.Errorf("Wait whose context ended: %v; want the context's error, not ErrTimeout", err)
	}
	if extra := slices.DeleteFunc(cl.served()[n:], isService); len(extra) != 0 {
		t.Errorf("Wait whose context ended sent %+v", extra)
	}
}

// A pod that cannot start says why, as soon as its status does.
func TestStartStuck(t *testing.T) {
	waiting := func(name, reason, msg string) func(*corev1.PodStatus) {
		return func(st *corev1.PodStatus) {
			st.Phase = corev1.PodPending
			cs := corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
			if name == podspec.Seed {
				st.InitContainerStatuses = []corev1.ContainerStatus{cs}
			} else {
				st.ContainerStatuses = []corev1.ContainerStatus{cs}
			}
		}
	}
	cases := []struct {
		name   string
		status func(*corev1.PodStatus)
		want   []string
	}{
		{"image never pulled", waiting(podspec.Seed, "ErrImageNeverPull", `Container image "localhost/mcp-forge/python:3.11" is not present with pull policy of Never`),
			[]string{"container seed", "ErrImageNeverPull", "is not present"}},
		{"image pull back-off", waiting(podspec.Seed, "ImagePullBackOff", "Back-off pulling image"), []string{"ImagePullBackOff"}},
		{"config error", waiting(podspec.Sandbox, "CreateContainerConfigError", "secret not found"), []string{"container sandbox", "CreateContainerConfigError"}},
		{"pod failed", func(st *corev1.PodStatus) {
			st.Phase, st.Reason, st.Message = corev1.PodFailed, "OutOfcpu", "Node didn't have enough resource: cpu"
		}, []string{"the pod failed", "OutOfcpu"}},
		{"seed exited", func(st *corev1.PodStatus) {
			st.InitContainerStatuses = []corev1.ContainerStatus{{Name: podspec.Seed, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Message: "tar: Unexpected EOF"}}}}
		}, []string{"could not be unpacked", "exit 2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl := newCluster(t, testKube())
			ctx := context.Background()
			id, err := cl.c.Create(ctx, specIn(hostWorkspace(t)))
			if err != nil {
				t.Fatal(err)
			}
			start := async(func() error { return cl.c.Start(ctx, id) })
			waitFor(t, "Start watches the pod", 5*time.Second, func() bool { return cl.watches() > 0 })
			t0 := time.Now()
			cl.status(id, tc.status)
			err = returned(t, "Start", 5*time.Second, start)
			if d := time.Since(t0); d > time.Second {
				t.Errorf("Start took %s to see the pod was stuck", d)
			}
			if err == nil {
				t.Fatal("Start of a stuck pod succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Start: %q does not say %q", err, w)
				}
			}
			if len(cl.served()) != 0 {
				t.Errorf("Start attached to a stuck pod: %+v", cl.served())
			}
		})
	}
}

// List finds the pods of this namespace marked managed, filtered by the
// labels asked, also those only the annotation carries.
func TestList(t *testing.T) {
	cl := newCluster(t, testKube())
	ctx := context.Background()
	api := cl.cs.CoreV1().Pods(cl.k.Namespace)
	hashA, hashB := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	mk := func(hash string) (string, runtime.Spec) {
		s := specIn(hostWorkspace(t))
		s.Labels[runtime.LabelCodeHash] = hash
		s.Labels[runtime.LabelSession] = sessionID
		id, err := cl.c.Create(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return id, s
	}
	a, sa := mk(hashA)
	b, _ := mk(hashB)
	// Not ours: unmarked, and marked but in another namespace.
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: cl.k.Namespace, Labels: map[string]string{"app": "web"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "elsewhere", Labels: map[string]string{runtime.LabelManaged: "true"}}},
	} {
		if _, err := cl.cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Marked, without the annotation (made by hand): its labels are all it has.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: cl.k.Namespace, Labels: map[string]string{runtime.LabelManaged: "true", runtime.LabelPlugin: "r", LabelHost: cl.c.hostID}}}
	if _, err := api.Create(ctx, bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A core on another host, sharing the namespace: never listed, so never
	// reconciled away (its server's process is not this host's to judge).
	elsewhere := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: cl.k.Namespace, Labels: map[string]string{runtime.LabelManaged: "true", runtime.LabelPlugin: "r", LabelHost: "ffffffffffffffff"}}}
	if _, err := api.Create(ctx, elsewhere, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cl.status(b, sandboxEndedWith(0, "Completed"))

	ids := func(cs []runtime.Container) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.ID)
		}
		slices.Sort(out)
		return out
	}
	cases := []struct {
		name string
		want map[string]string
		ids  []string
	}{
		{"all ours", nil, []string{a, b, "bare"}},
		{"by code hash (annotation only)", map[string]string{runtime.LabelCodeHash: hashA}, []string{a}},
		{"by the other hash", map[string]string{runtime.LabelCodeHash: hashB}, []string{b}},
		{"by session id (annotation only)", map[string]string{runtime.LabelSession: sessionID}, []string{a, b}},
		{"by a label", map[string]string{runtime.LabelPlugin: "r"}, []string{"bare"}},
		{"hash and plugin", map[string]string{runtime.LabelCodeHash: hashA, runtime.LabelPlugin: "python"}, []string{a}},
		{"no match", map[string]string{runtime.LabelCodeHash: strings.Repeat("c3", 32)}, nil},
	}
	for _, tc := range cases {
		got, err := cl.c.List(ctx, tc.want)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := slices.Clone(tc.ids)
		slices.Sort(want)
		if !slices.Equal(ids(got), want) {
			t.Errorf("List %s: %v; want %v", tc.name, ids(got), want)
		}
	}
	got, err := cl.c.List(ctx, map[string]string{runtime.LabelCodeHash: hashA})
	if err != nil || len(got) != 1 {
		t.Fatalf("List: %v, %v", got, err)
	}
	if !equality.Semantic.DeepEqual(got[0].Labels, sa.Labels) || got[0].State != "running" || got[0].Image != "localhost/mcp-forge/python:3.11" {
		t.Errorf("listed %+v; want labels %v, running, the pod's image", got[0], sa.Labels)
	}
	all, _ := cl.c.List(ctx, nil)
	for _, c := range all {
		if want := map[string]string{a: "running", b: "exited", "bare": "running"}[c.ID]; c.State != want {
			t.Errorf("pod %s is %q; want %q", c.ID, c.State, want)
		}
	}

	// Another core adopts what it lists: their mounts, from the annotation.
	c2 := NewWithClient(cl.cs, cl.c.rest, cl.k, Options{})
	if _, err := c2.List(ctx, nil); err != nil {
		t.Fatal(err)
	}
	p1, err1 := cl.c.info(a)
	p2, err2 := c2.info(a)
	if err1 != nil || err2 != nil || !equality.Semantic.DeepEqual(p1.mounts, p2.mounts) || len(p2.mounts) != 3 || !p2.seeded {
		t.Errorf("adopted pod %s: %+v, %v; want the mounts %+v, seeded", a, p2, err2, p1)
	}
}

// With pull_policy Never an image is there only if every node a pod may
// land on lists it; other policies leave it to the node's pull.
func TestImage(t *testing.T) {
	node := func(name string, labels map[string]string, images ...corev1.ContainerImage) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Status: corev1.NodeStatus{Images: images}}
	}
	python := corev1.ContainerImage{Names: []string{"localhost/mcp-forge/python@sha256:" + strings.Repeat("ab", 32), "localhost/mcp-forge/python:3.11"}, SizeBytes: 700 << 20}
	other := corev1.ContainerImage{Names: []string{"docker.io/library/busybox:1"}, SizeBytes: 4 << 20}
	pool := map[string]string{"pool": "sandboxes"}
	nodes := []*corev1.Node{node("a", pool, python, other), node("b", pool, python), node("c", nil, other)}
	cases := []struct {
		name   string
		policy string
		nodeN  string
		sel    map[string]string
		image  string
		found  bool
	}{
		{"pinned node has it", "Never", "a", nil, "mcp-forge/python:3.11", true},
		{"pinned node lacks it", "Never", "c", nil, "mcp-forge/python:3.11", false},
		{"every selected node has it", "Never", "", pool, "mcp-forge/python:3.11", true},
		{"one node of all lacks it", "Never", "", nil, "mcp-forge/python:3.11", false},
		{"docker.io name", "Never", "c", nil, "library/busybox:1", false}, // a name without a registry is a local one
		{"pulled by the node", "IfNotPresent", "c", nil, "mcp-forge/python:3.11", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := testKube()
			k.PullPolicy, k.NodeName, k.NodeSelector = tc.policy, tc.nodeN, tc.sel
			cl := newCluster(t, k)
			for _, n := range nodes {
				if _, err := cl.cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			info, ok, err := cl.c.Image(context.Background(), tc.image)
			if err != nil || ok != tc.found {
				t.Fatalf("Image(%s): %v, %v; want found %v", tc.image, ok, err, tc.found)
			}
			if ok && info.ID != images.Ref("", tc.image) {
				t.Errorf("Image ID %q; want the reference pods are created with, %q", info.ID, images.Ref("", tc.image))
			}
			if ok && tc.policy == "Never" && (info.Size != python.SizeBytes || len(info.Digests) == 0 || !strings.Contains(info.Digests[0], "@sha256:")) {
				t.Errorf("Image info %+v; want the node's size and digest", info)
			}
		})
	}
	cl := newCluster(t, func() config.Kubernetes { k := testKube(); k.PullPolicy, k.NodeName = "Never", "gone"; return k }())
	if _, _, err := cl.c.Image(context.Background(), "mcp-forge/python:3.11"); err == nil || !strings.Contains(err.Error(), "runtime.kubernetes.node_name") {
		t.Errorf("Image on a node that does not exist: %v; want an error naming runtime.kubernetes.node_name", err)
	}
}

// An exec of a pod the API server does not have, or whose container the
// kubelet cannot reach, is an error that names the pod.
func TestExecErrors(t *testing.T) {
	cl := newCluster(t, testKube())
	ctx := context.Background()
	id := cl.started(t, specIn(hostWorkspace(t)))
	cl.unreachable(id)
	if _, err := cl.c.Exec(ctx, id, runtime.ExecRequest{Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "exec of pod "+id) || !strings.Contains(err.Error(), "not running") {
		t.Errorf("Exec in an unreachable container: %v; want the pod and the kubelet's reason", err)
	}
	if _, err := cl.c.ReadFile(ctx, id, "a.txt", 10); err == nil || !strings.Contains(err.Error(), "file service of pod "+id) {
		t.Errorf("ReadFile in an unreachable container: %v; want the pod and container", err)
	}
	if err := cl.cs.CoreV1().Pods(cl.k.Namespace).Delete(ctx, id, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.c.Exec(ctx, id, runtime.ExecRequest{Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "exec of pod "+id) {
		t.Errorf("Exec in a deleted pod: %v; want an error naming it", err)
	}
	if _, err := NewWithClient(cl.cs, nil, cl.k, Options{}).Exec(ctx, id, runtime.ExecRequest{Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "REST config") {
		t.Errorf("Exec without a REST config: %v; want an error, not a panic", err)
	}
}

// A watch the API server ends (its timeout, a restart) or that reports an
// error is started again from a fresh Get: Wait still sees the exit.
func TestWaitRewatches(t *testing.T) {
	cl := newCluster(t, testKube())
	ctx := context.Background()
	id := cl.started(t, specIn(hostWorkspace(t)))
	var calls atomic.Int32
	cl.cs.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		switch calls.Add(1) {
		case 1: // ended at once
			w := watch.NewFake()
			w.Stop()
			return true, w, nil
		case 2: // an error event
			w := watch.NewRaceFreeFake()
			w.Error(&metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
			return true, w, nil
		}
		return false, nil, nil // the field-selecting watch of newCluster
	})
	before := cl.watches()
	wait := async(func() waited { c, err := cl.c.Wait(ctx, id, 10*time.Second); return waited{c, err} })
	waitFor(t, "a third watch", 5*time.Second, func() bool { return cl.watches() >= before+3 })
	cl.status(id, sandboxEndedWith(3, "Error"))
	if w := returned(t, "Wait", 10*time.Second, wait); w.err != nil || w.code != 3 {
		t.Errorf("Wait across ended watches: %d, %v; want 3", w.code, w.err)
	}
}

// isService is the stream of a pod's file service, which Start opens.
func isService(s served) bool {
	return len(s.Command) > 1 && s.Command[0] == agent.Path && s.Command[1] == "serve"
}

// An API server whose user-namespace feature gate is off stores the pod
// without hostUsers: false; Create refuses it and deletes the pod rather
// than run it in the node's user namespace.
func TestCreateRefusesDroppedHostUsers(t *testing.T) {
	k := testKube()
	k.UserNamespaces = true
	cl := newCluster(t, k)
	cl.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		p.Spec.HostUsers = nil // as a server without UserNamespacesSupport does
		return false, nil, nil
	})
	_, err := cl.c.Create(context.Background(), specIn(hostWorkspace(t)))
	if err == nil || !strings.Contains(err.Error(), "dropped hostUsers: false") {
		t.Fatalf("Create: %v; want the dropped field refused", err)
	}
	list, _ := cl.cs.CoreV1().Pods(k.Namespace).List(context.Background(), metav1.ListOptions{})
	if len(list.Items) != 0 {
		t.Errorf("%d pods left; want the refused pod deleted", len(list.Items))
	}
}

// Without a RuntimeClass pods run on the nodes' default runtime: no
// kernel-isolation, and a gVisor spec is refused rather than run on it.
func TestKernelIsolationNeedsARuntimeClass(t *testing.T) {
	c := NewWithClient(fake.NewClientset(), nil, testKube(), Options{})
	r, err := c.Guarantees(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Enforces(runtime.KernelIsolation) {
		t.Error("kernel-isolation reported enforced without a RuntimeClass")
	}
	if _, err := c.Create(context.Background(), runtime.Spec{Image: "mcp-forge/python:3.11", Isolation: runtime.IsolationGVisor}); err == nil || !strings.Contains(err.Error(), "runtime_class") {
		t.Errorf("a gVisor spec without a RuntimeClass: %v, want a refusal naming runtime_class", err)
	}
}
