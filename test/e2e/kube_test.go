package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/config/loader"
	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	kube "github.com/mcp-forge/mcp-forge/core/runtime/kubernetes"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// kubeClient is the core's own view of the test cluster.
// ownPods selects the pods of s's servers alone: the in-cluster cores'
// pools and the other packages' servers (scripts/test-kube.sh runs them
// beside test/e2e) share the namespace.
func ownPods(s *testenv.Server) string {
	return "io.mcp-forge.managed=true,io.mcp-forge.instance=" + forge.Instance(s.Base)
}

// listOwnPods lists the pods of server s.
func listOwnPods(t *testing.T, s *testenv.Server) *corev1.PodList {
	t.Helper()
	cs, k := kubeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := cs.CoreV1().Pods(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: ownPods(s)})
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func kubeClient(t *testing.T) (kubernetes.Interface, config.Kubernetes) {
	t.Helper()
	cfg, err := loader.Load(os.Getenv(testenv.KubeConfigEnv))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := kube.RESTConfig(cfg.Runtime.Kubernetes)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs, cfg.Runtime.Kubernetes
}

// TestKubeSandboxPods checks a live session's pod as the cluster holds it,
// and the sandbox from inside: the confinement the pod spec asks for is
// what the code gets.
func TestKubeSandboxPods(t *testing.T) {
	if !testenv.Kube() {
		t.Skip("Kubernetes runtime only: set " + testenv.KubeConfigEnv + " (scripts/test.sh's Kubernetes leg)")
	}
	s := testenv.StartServer(t, "")
	probe := `
import os, socket, json
out = {"uid": os.getuid(), "ifaces": sorted(n for _, n in socket.if_nameindex())}
out["token"] = os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount")
out["service_env"] = sorted(k for k in os.environ if k.startswith("KUBERNETES_") or k.endswith("_SERVICE_HOST"))
for name, addr in (("api", ("10.96.0.1", 443)), ("host_api", ("127.0.0.1", 6443)), ("bridge_api", ("10.244.89.1", 6443)), ("out", ("1.1.1.1", 80))):
    try:
        socket.create_connection(addr, timeout=3); out[name] = "connected"
    except OSError as e:
        out[name] = type(e).__name__
try:
    open("/forge-root-write", "w"); out["root_write"] = "written"
except OSError as e:
    out["root_write"] = e.strerror
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
out["capeff"] = st["CapEff"].strip(); out["nonewprivs"] = st["NoNewPrivs"].strip(); out["seccomp"] = st["Seccomp"].strip()
print(json.dumps(out))
`
	var o out
	res := s.Call(t, "execute_python", map[string]any{"code": probe, "session_id": "kube-probe"}, &o)
	if res.IsError {
		t.Fatalf("probe failed: %s", testenv.Text(res))
	}
	var p struct {
		UID                         int
		Ifaces                      []string
		Token                       bool
		ServiceEnv                  []string `json:"service_env"`
		API                         string
		HostAPI                     string `json:"host_api"`
		BridgeAPI                   string `json:"bridge_api"` // where the core's own pods reach it (kube-up)
		Out                         string
		RootWrite                   string `json:"root_write"`
		CapEff, NoNewPrivs, Seccomp string
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(o.Stdout)), &p); err != nil {
		t.Fatalf("probe output %q: %v", o.Stdout, err)
	}
	t.Logf("probe: %+v", p)
	switch {
	case p.UID != 1000:
		t.Errorf("uid %d, want 1000", p.UID)
	case p.Token:
		t.Error("a service account token is mounted")
	case len(p.ServiceEnv) > 0:
		t.Errorf("service links in the environment: %v", p.ServiceEnv)
	case p.API == "connected" || p.HostAPI == "connected" || p.BridgeAPI == "connected" || p.Out == "connected":
		t.Errorf("network reached: api %s, host api %s, bridge api %s, out %s", p.API, p.HostAPI, p.BridgeAPI, p.Out)
	case p.RootWrite != "Read-only file system":
		t.Errorf("writing / gave %q", p.RootWrite)
	case strings.Trim(p.CapEff, "0") != "" || p.NoNewPrivs != "1" || p.Seccomp != "2":
		t.Errorf("CapEff %s NoNewPrivs %s Seccomp %s: want no capabilities, no new privileges, a seccomp filter", p.CapEff, p.NoNewPrivs, p.Seccomp)
	}

	pods := listOwnPods(t, s)
	var session *corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].Labels["io.mcp-forge.one-shot"] != "true" && pods.Items[i].DeletionTimestamp == nil {
			session = &pods.Items[i]
		}
	}
	if session == nil {
		t.Fatalf("no session pod among %d managed pods", len(pods.Items))
	}
	sp := session.Spec
	if sp.AutomountServiceAccountToken == nil || *sp.AutomountServiceAccountToken || sp.EnableServiceLinks == nil || *sp.EnableServiceLinks {
		t.Error("the pod may mount a token or get service links")
	}
	if sp.HostNetwork || sp.HostPID || sp.HostIPC || sp.ActiveDeadlineSeconds == nil {
		t.Errorf("host namespaces or no deadline: %+v", sp)
	}
	for _, v := range sp.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a host path", v.Name)
		}
	}
	if sp.SecurityContext.SeccompProfile == nil || sp.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost {
		t.Errorf("seccomp %+v, want MCP-Forge's Localhost profile", sp.SecurityContext.SeccompProfile)
	}
}

// A pod's activeDeadlineSeconds (the lifetime-bound guarantee) is what
// docs/kubernetes.md says: a cold stateless run's timeout + 60 s; a warm
// pod, created before any run's timeout is known, the longest a run may
// be given (execution.max_background_timeout or max_timeout) + 60 s,
// which the pool's retirement of idle pods (at most 10 minutes) and its
// refusal to hand out one whose remaining life is shorter than the run's
// timeout keep sound; a session's pod session_lifetime.
func TestKubePodDeadlines(t *testing.T) {
	if !testenv.Kube() {
		t.Skip("Kubernetes runtime only: set " + testenv.KubeConfigEnv + " (scripts/test.sh's Kubernetes leg)")
	}
	s := testenv.StartServer(t, testenv.NoSessionPools+"[plugins.python.config]\nwarm = 1\n[plugins.r.config]\nwarm = 0\n")
	testenv.WaitWarm(t, s.Session, "python", 1)
	cs, k := kubeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	deadline := func(p corev1.Pod) int64 {
		if p.Spec.ActiveDeadlineSeconds == nil {
			t.Fatalf("pod %s has no activeDeadlineSeconds", p.Name)
		}
		return *p.Spec.ActiveDeadlineSeconds
	}
	pods := func(selector string) []corev1.Pod {
		sel := ownPods(s)
		if selector != "" {
			sel += "," + selector
		}
		l, err := cs.CoreV1().Pods(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		var out []corev1.Pod
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
		return out
	}
	longest := int64(config.Default().Execution.LongestTimeout())
	warm := pods("io.mcp-forge.x-warm=true")
	if len(warm) == 0 {
		t.Fatal("no warm pod in the cluster although the pool says it has one")
	}
	for _, p := range warm {
		if got := deadline(p); got != longest+60 {
			t.Errorf("warm pod %s: activeDeadlineSeconds %d, want the longest timeout %d + 60", p.Name, got, longest)
		}
	}

	// A cold run (R has no pool here): its own timeout + 60, read while it runs.
	done := make(chan error, 1)
	go func() {
		_, err := s.Session.CallTool(ctx, &mcp.CallToolParams{Name: "execute_r", Arguments: map[string]any{"code": "Sys.sleep(15)", "timeout": 47}})
		done <- err
	}()
	var cold []corev1.Pod
	testenv.WaitFor(t, "the cold R run's pod", time.Minute, func() bool {
		cold = nil
		for _, p := range pods("io.mcp-forge.one-shot=true") {
			if p.Labels["io.mcp-forge.x-warm"] != "true" && strings.Contains(p.Spec.Containers[0].Image, "/r") {
				cold = append(cold, p)
			}
		}
		return len(cold) == 1
	})
	if got := deadline(cold[0]); got != 47+60 {
		t.Errorf("cold pod %s: activeDeadlineSeconds %d, want the run's timeout 47 + 60", cold[0].Name, got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	if res := s.Call(t, "execute_python", map[string]any{"code": "1", "session_id": "deadline"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	// The session's own pod, by the session label the core records in the
	// pod's annotation (the label's value is the session id and a suffix).
	var session, others []string
	for _, p := range pods("") {
		if p.Labels["io.mcp-forge.one-shot"] == "true" {
			continue
		}
		labels := map[string]string{}
		_ = json.Unmarshal([]byte(p.Annotations["mcp-forge.io/labels"]), &labels)
		if !strings.HasPrefix(labels["io.mcp-forge.session"], "deadline-") {
			others = append(others, p.Name+" (session "+labels["io.mcp-forge.session"]+")")
			continue
		}
		session = append(session, p.Name)
		if got := deadline(p); got != int64(k.SessionLifetime) {
			t.Errorf("session pod %s: activeDeadlineSeconds %d, want session_lifetime %d", p.Name, got, k.SessionLifetime)
		}
	}
	if len(session) != 1 {
		t.Errorf("want one pod for session deadline, got %v (other session pods: %v)", session, others)
	}
}

// noPerlImage builds the Python image with perl removed (podman), and
// names it.
func noPerlImage(t *testing.T) string {
	t.Helper()
	const image = "localhost/mcp-forge/python:noperl"
	dir := t.TempDir()
	cf := "FROM localhost/mcp-forge/python:3.11\nUSER 0\nRUN rm -f /usr/bin/perl /usr/bin/perl5* && ! command -v perl\nUSER 1000\n"
	if err := os.WriteFile(dir+"/Containerfile", []byte(cf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("podman", "build", "-q", "-t", image, dir).CombinedOutput(); err != nil {
		t.Fatalf("podman build: %v\n%s", err, out)
	}
	return image
}

// TestKubeImageWithoutPerl: a custom image with no perl (the Python image
// with perl removed, built here) runs sessions, stateless runs and file
// tools on the cluster: everything the core runs in a pod is the agent,
// copied in by the pod's agent init container, nothing of the image's.
func TestKubeImageWithoutPerl(t *testing.T) {
	if !testenv.Kube() {
		t.Skip("Kubernetes runtime only: set " + testenv.KubeConfigEnv + " (scripts/test-kube.sh)")
	}
	sock := os.Getenv("FORGE_TEST_CONTAINERD")
	if sock == "" {
		t.Skip("putting an image on the node needs its containerd: set FORGE_TEST_CONTAINERD (scripts/test-kube.sh does)")
	}
	image := noPerlImage(t)
	imp := exec.Command("sh", "-c", `podman save "$1" | ctr -a "$2" -n k8s.io images import - >/dev/null`, "sh", image, sock)
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("import into the node's containerd: %v\n%s", err, out)
	}
	// With image_registry the core asks the registry first: the image goes
	// there too (its layers but the last are the Python image's).
	if _, k := kubeClient(t); k.ImageRegistry != "" {
		ref := "docker://" + k.ImageRegistry + "/mcp-forge/python:noperl"
		if out, err := exec.Command("podman", "push", "-q", "--tls-verify=false", image, ref).CombinedOutput(); err != nil {
			t.Fatalf("podman push %s: %v\n%s", ref, err, out)
		}
	}
	s := testenv.StartServer(t, "[plugins.python.config]\nimage = \"mcp-forge/python:noperl\"\n[plugins.jupyter.config]\nimage = \"mcp-forge/python:noperl\"\nwarm = 0\n")
	probe := "import shutil, os; print(shutil.which('perl'), os.path.exists('/usr/bin/perl'))"
	for _, args := range []map[string]any{{"code": probe}, {"code": probe + "\nopen('made.txt', 'w').write('by the kernel')", "session_id": "noperl"}} {
		var o out
		res := s.Call(t, "execute_python", args, &o)
		if res.IsError || strings.TrimSpace(o.Stdout) != "None False" {
			t.Fatalf("execute_python %v in an image without perl: %s %q", args["session_id"], testenv.Text(res), o.Stdout)
		}
	}
	var l mcpserver.ListOutput
	if res := s.Call(t, "list_files", map[string]any{"session_id": "noperl"}, &l); res.IsError || len(l.Files) == 0 {
		t.Fatalf("list_files: %s %+v", testenv.Text(res), l)
	}
	if res := s.Call(t, "upload_file", map[string]any{"session_id": "noperl", "path": "up.txt", "content": "uploaded"}, nil); res.IsError {
		t.Fatalf("upload_file: %s", testenv.Text(res))
	}
	var o out
	if res := s.Call(t, "execute_python", map[string]any{"code": "print(open('up.txt').read(), open('made.txt').read())", "session_id": "noperl"}, &o); res.IsError || strings.TrimSpace(o.Stdout) != "uploaded by the kernel" {
		t.Fatalf("reading back: %s %q", testenv.Text(res), o.Stdout)
	}
}
