package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// kubeGVisorProfile is the seccomp profile's gVisor variant as kube-up
// installs it beside the runc one (`mcp-forge seccomp-profile gvisor`):
// runsc applies a pod's profile in its Sentry (oci-seccomp in kube-up's
// runsc.toml) and answers every refusal with EPERM, so the runc profile's
// clone3 ENOSYS would stop every thread there.
const kubeGVisorProfile = "mcp-forge-gvisor.json"

// On kube-up's cluster, a server that asks for RuntimeClass gvisor runs
// its code under gVisor: a stateless run, a session (the kernel's threads
// and zmq) and R see gVisor's kernel and only lo, MCP-Forge's profile
// still refuses in the Sentry, the results say gvisor, and the pods the
// cluster holds name the RuntimeClass. The default runtime stays runc for
// every other test (kube-up's forge.toml has no runtime_class).
func TestKubeGVisorPods(t *testing.T) {
	if !testenv.Kube() {
		t.Skip("Kubernetes runtime only: set " + testenv.KubeConfigEnv + " (scripts/test-kube.sh; kube-up sets up RuntimeClass gvisor)")
	}
	s := testenv.StartServerEnv(t, `
[runtime.kubernetes]
runtime_class = "gvisor"
[security]
isolation = "gvisor"
`, "FORGE_RUNTIME_KUBERNETES_SECCOMP_PROFILE="+kubeGVisorProfile)
	probe := `
import ctypes, json, socket, subprocess, threading
out = {"version": open("/proc/version").read()}
out["ifaces"] = sorted(n for _, n in socket.if_nameindex())
libc = ctypes.CDLL(None, use_errno=True)
out["unshare"] = ctypes.get_errno() if libc.unshare(0x10000000) == -1 else 0
t = threading.Thread(target=lambda: out.__setitem__("thread", True)); t.start(); t.join()
out["subprocess"] = subprocess.run(["echo", "child"], capture_output=True, text=True).stdout.strip()
print(json.dumps(out))
`
	var o out
	res := s.Call(t, "execute_python", map[string]any{"code": probe}, &o)
	if res.IsError || !o.Success {
		t.Fatalf("stateless probe under gVisor failed: %s", testenv.Text(res))
	}
	var got struct {
		Version    string
		Ifaces     []string
		Unshare    int
		Thread     bool
		Subprocess string
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(o.Stdout)), &got); err != nil {
		t.Fatalf("%v: %q", err, o.Stdout)
	}
	t.Logf("stateless probe: %+v", got)
	if !strings.Contains(got.Version, "gvisor") {
		t.Errorf("/proc/version is not gVisor's: %q (the pod ran on the node's runc?)", got.Version)
	}
	if len(got.Ifaces) != 1 || got.Ifaces[0] != "lo" {
		t.Errorf("interfaces %v, want only lo", got.Ifaces)
	}
	if got.Unshare != 1 {
		t.Errorf("unshare(CLONE_NEWUSER) gave errno %d, want EPERM (1): MCP-Forge's profile is not applied in the Sentry", got.Unshare)
	}
	if !got.Thread || got.Subprocess != "child" {
		t.Errorf("under gVisor: thread %v, subprocess %q", got.Thread, got.Subprocess)
	}
	if o.Isolation != "gvisor" {
		t.Errorf("the stateless result says isolation %q, want gvisor", o.Isolation)
	}

	// A session: its kernel (threads, zmq) under gVisor, its pod alive to
	// look at.
	var so out
	sessProbe := "import socket\n(open('/proc/version').read(), sorted(n for _, n in socket.if_nameindex()))"
	if res := s.Call(t, "execute_python", map[string]any{"code": sessProbe, "session_id": "gv"}, &so); res.IsError || so.Isolation != "gvisor" ||
		!strings.Contains(so.Result+so.ResultRepr, "gvisor") || !strings.Contains(so.Result+so.ResultRepr, "['lo']") {
		t.Errorf("session under gVisor (isolation %q): %s", so.Isolation, testenv.Text(res))
	}
	pods := listOwnPods(t, s)
	live := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		live++
		if rc := p.Spec.RuntimeClassName; rc == nil || *rc != "gvisor" {
			t.Errorf("pod %s: runtimeClassName %v, want gvisor", p.Name, rc)
		}
		if sp := p.Spec.SecurityContext.SeccompProfile; sp == nil || sp.LocalhostProfile == nil || *sp.LocalhostProfile != kubeGVisorProfile {
			t.Errorf("pod %s: seccomp profile %+v, want Localhost %s", p.Name, sp, kubeGVisorProfile)
		}
	}
	if live == 0 {
		t.Errorf("no live pod of this server (the session's) among %d", len(pods.Items))
	}

	if res := s.Call(t, "execute_r", map[string]any{"code": "cat(readLines('/proc/version'))"}, &o); res.IsError || !strings.Contains(o.Stdout, "gvisor") || o.Isolation != "gvisor" {
		t.Errorf("R under gVisor (isolation %q): %s", o.Isolation, testenv.Text(res))
	}
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == "container.create" && e.Success && e.Details["isolation"] != "gvisor" {
			t.Errorf("container.create under isolation %v: %+v", e.Details["isolation"], e.Details)
		}
	}
}

// A server that must run its sandboxes under gVisor on a cluster where it
// names no RuntimeClass runs nothing (pods would land on the nodes' runc),
// and says why: the kernel-isolation guarantee, runtime_class.
func TestKubeGVisorNeedsRuntimeClass(t *testing.T) {
	if !testenv.Kube() {
		t.Skip("Kubernetes runtime only: set " + testenv.KubeConfigEnv)
	}
	s := testenv.StartServer(t, "[security]\nisolation = \"gvisor\"\n")
	var o out
	res := s.Call(t, "execute_python", map[string]any{"code": "print('ran')"}, &o)
	text := testenv.Text(res)
	if !res.IsError || strings.Contains(o.Stdout, "ran") {
		t.Fatalf("ran without a RuntimeClass under security.isolation = gvisor: %s", text)
	}
	t.Logf("refusal: %s", text)
	if !strings.Contains(text, "kernel-isolation") || !strings.Contains(text, "runtime_class") {
		t.Errorf("the refusal does not say kernel-isolation and runtime_class: %s", text)
	}
	pods := listOwnPods(t, s)
	if len(pods.Items) > 0 {
		t.Errorf("%d pods made for a refused run", len(pods.Items))
	}
}
