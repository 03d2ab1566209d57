package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/sandboxes"
	kube "github.com/mcp-forge/mcp-forge/core/runtime/kubernetes"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// On the cluster a host root is mounted into the sandbox pod from its
// PersistentVolumeClaim, read-only: the code reads the user's file in
// place and cannot write (EROFS); the kubelet leaves the files' owners
// alone; a session keeps its roots; a root without a claim is refused
// with a reason.
func TestKubeHostRootClaim(t *testing.T) {
	if !testenv.Kube() {
		t.Skip("Kubernetes runtime only: set " + testenv.KubeConfigEnv + " (scripts/test-kube.sh)")
	}
	admin := os.Getenv("FORGE_TEST_KUBE_ADMIN")
	if admin == "" {
		t.Skip("a PersistentVolume needs the cluster's admin: set FORGE_TEST_KUBE_ADMIN (scripts/test-kube.sh does)")
	}
	_, k := kubeClient(t)
	ak := k
	ak.Kubeconfig, ak.Context = admin, ""
	rc, err := kube.RESTConfig(ak)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	dir, plain := t.TempDir(), t.TempDir()
	os.Chmod(dir, 0o755)
	csv := filepath.Join(dir, "data.csv")
	var b strings.Builder
	b.WriteString("a\n")
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	os.WriteFile(csv, []byte(b.String()), 0o644)
	var before syscall.Stat_t
	syscall.Stat(csv, &before)

	name := "forge-root-" + engine.NewID()
	class := "mcp-forge-test-roots" // no provisioner: the claim binds to this volume alone
	mode := []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}
	size := resource.MustParse("1Gi")
	dirType := corev1.HostPathDirectory
	ctx := context.Background()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		Capacity: corev1.ResourceList{corev1.ResourceStorage: size}, AccessModes: mode, StorageClassName: class,
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		ClaimRef:                      &corev1.ObjectReference{Namespace: k.Namespace, Name: name},
		PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}},
	}}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the volume: %v", err)
	}
	t.Cleanup(func() { cs.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.Namespace}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: mode, StorageClassName: &class, VolumeName: name,
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
	}}
	if _, err := cs.CoreV1().PersistentVolumeClaims(k.Namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the claim: %v", err)
	}
	t.Cleanup(func() {
		cs.CoreV1().PersistentVolumeClaims(k.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	for deadline := time.Now().Add(time.Minute); ; {
		c, err := cs.CoreV1().PersistentVolumeClaims(k.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil && c.Status.Phase == corev1.ClaimBound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s not bound: %v %+v", name, err, c)
		}
		time.Sleep(time.Second)
	}

	s := testenv.StartServer(t, fmt.Sprintf("[volumes.host_roots.data]\npath = %q\nclaim = %q\n[volumes.host_roots.plain]\npath = %q\n", dir, name, plain))
	code := `import errno
print("sum", sum(int(l) for l in open("/mnt/data/data.csv").read().split()[1:]))
try:
    open("/mnt/data/new.txt", "w")
except OSError as e:
    print("write", errno.errorcode[e.errno])`
	for _, args := range []map[string]any{
		{"code": code, "host_roots": []string{"data"}},
		{"code": "print('first')", "session_id": "claimed", "host_roots": []string{"data"}},
		{"code": code, "session_id": "claimed"},
	} {
		var o out
		res := s.Call(t, "execute_python", args, &o)
		if res.IsError {
			t.Fatalf("execute_python %v: %s", args["session_id"], testenv.Text(res))
		}
		if args["code"] == code && (!strings.Contains(o.Stdout, "sum 500500") || !strings.Contains(o.Stdout, "write EROFS")) {
			t.Errorf("execute_python %v over the claim: %q", args["session_id"], o.Stdout)
		}
	}
	res := s.Call(t, "execute_python", map[string]any{"code": "print(1)", "host_roots": []string{"plain"}}, nil)
	if text := testenv.Text(res); !res.IsError || !strings.Contains(text, "names none (volumes.host_roots.plain.claim)") {
		t.Errorf("a root without a claim on the cluster: %s", text)
	}
	var after syscall.Stat_t
	syscall.Stat(csv, &after)
	if after.Uid != before.Uid || after.Gid != before.Gid || after.Mode != before.Mode {
		t.Errorf("the user's file changed owner or mode: %d:%d %o, was %d:%d %o", after.Uid, after.Gid, after.Mode, before.Uid, before.Gid, before.Mode)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.txt")); err == nil {
		t.Error("the sandbox wrote into the root")
	}
	refused := 0
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == engine.EventRefused && e.Details["rule"] == sandboxes.RuleUnavailable {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("%d refusals audited by %s, want 1", refused, sandboxes.RuleUnavailable)
	}
}
