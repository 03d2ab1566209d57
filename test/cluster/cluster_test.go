// Package cluster tests MCP-Forge's core running inside the cluster: the
// manifests of deploy/ applied with kubectl to scripts/kube-up.sh's
// cluster, the core's image (images/core) as its pods, reached over HTTP
// with API keys at a pod's address, its sandboxes pods beside it.
//
// scripts/test-kube.sh runs it after the other Kubernetes tests, with
// FORGE_TEST_KUBE_CONFIG (kube-up's forge.toml: its directory holds the
// admin kubeconfig) and FORGE_TEST_CORE_IMAGE (the image it imported).
package cluster

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

const (
	coreNS    = "mcp-forge-system"
	sandboxNS = "mcp-forge"
	coreSA    = "mcp-forge"
	selector  = "app.kubernetes.io/name=mcp-forge,app.kubernetes.io/component=core"
)

// cluster is what a test of the deployed core works with.
type cluster struct {
	admin   *kubernetes.Clientset
	rest    *rest.Config
	kubectl string
	adminKC string
	image   string
}

func setup(t testing.TB) *cluster {
	t.Helper()
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("end-to-end: set FORGE_E2E=1")
	}
	cfg := os.Getenv(testenv.KubeConfigEnv)
	image := os.Getenv("FORGE_TEST_CORE_IMAGE")
	if cfg == "" || image == "" {
		t.Skip("the core in the cluster: set " + testenv.KubeConfigEnv + " and FORGE_TEST_CORE_IMAGE (scripts/test-kube.sh does)")
	}
	c := &cluster{image: image, adminKC: cmp.Or(os.Getenv("FORGE_TEST_KUBE_ADMIN"), filepath.Join(filepath.Dir(cfg), "admin.kubeconfig"))}
	var err error
	if c.rest, err = clientcmd.BuildConfigFromFlags("", c.adminKC); err != nil {
		t.Fatalf("admin kubeconfig %s: %v", c.adminKC, err)
	}
	// Hundreds of authorizer checks: client-go's default of 5 a second would take minutes.
	c.rest.QPS, c.rest.Burst = 500, 1000
	if c.admin, err = kubernetes.NewForConfig(c.rest); err != nil {
		t.Fatal(err)
	}
	if c.kubectl, err = exec.LookPath(cmp.Or(os.Getenv("FORGE_TEST_KUBECTL"), "kubectl")); err != nil {
		t.Fatalf("kubectl (kube-up builds it; FORGE_TEST_KUBECTL names it): %v", err)
	}
	return c
}

// run is kubectl with the admin's credentials.
func (c *cluster) run(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.kubectl, append([]string{"--kubeconfig", c.adminKC}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// overlay writes a kustomization over deploy/<of> that names the image
// under test and replaces the tenants Secret with tenants, as an operator's
// overlay does.
func (c *cluster) overlay(t testing.TB, of, tenants string) string {
	t.Helper()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(testenv.RepoRoot(), "deploy", of))
	if err != nil {
		t.Fatal(err)
	}
	name, tag, _ := strings.Cut(strings.TrimPrefix(c.image, "localhost/"), ":")
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
images:
  - name: localhost/mcp-forge/core
    newName: localhost/%s
    newTag: %q
secretGenerator:
  - name: mcp-forge-tenants
    namespace: %s
    behavior: replace
    files:
      - tenants.toml
`, rel, name, tag, coreNS)
	if of == "overlays/replicas" {
		k += fmt.Sprintf(`patches:
  - target:
      kind: PersistentVolumeClaim
      name: mcp-forge-checkpoints
    patch: |-
      - {op: add, path: /spec/storageClassName, value: ""}
      - {op: add, path: /spec/volumeName, value: %s}
`, c.sharedVolume(t))
	}
	for f, body := range map[string]string{"kustomization.yaml": k, "tenants.toml": tenants} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// sharedVolume makes the ReadWriteMany volume deploy/overlays/replicas
// claims for its checkpoints, as a cluster's storage would: here a host
// directory of kube-up's one node (the test runs on it), owned by the
// core's user, bound to the claim alone. The cleanup, after the
// deployment's, deletes the volume and the directory.
func (c *cluster) sharedVolume(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "forge-checkpoints-")
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.Chmod(dir, 0o700), os.Chown(dir, 65532, 65532)); err != nil {
		t.Fatal(err)
	}
	name := "mcp-forge-checkpoints-" + strings.ToLower(filepath.Base(dir)[len("forge-checkpoints-"):])
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: coreNS, Name: "mcp-forge-checkpoints"},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr(corev1.HostPathDirectory)}},
		},
	}
	ctx := context.Background()
	if _, err := c.admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the checkpoints' volume: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.admin.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete the checkpoints' volume %s: %v", name, err)
		}
		for ctx.Err() == nil {
			if _, err := c.admin.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if ctx.Err() != nil {
			t.Errorf("the checkpoints' volume %s is still there a minute after its deletion", name)
		}
		os.RemoveAll(dir)
	})
	return name
}

func ptr[T any](v T) *T { return &v }

// deploy applies the overlay, waits for the rollout and returns the ready
// core pods. The cleanup removes what the manifests made, except the
// sandbox namespace the other tests share, and fails on sandbox pods the
// deployment's cores (by their core-pod annotation) left behind after
// their graceful stop.
func (c *cluster) deploy(t testing.TB, dir string) []corev1.Pod {
	t.Helper()
	ctx := context.Background()
	before := map[string]bool{}
	if l, err := c.admin.CoreV1().Pods(sandboxNS).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range l.Items {
			before[p.Name] = true
		}
	}
	// A namespace of an earlier deployment still being deleted takes no
	// new objects: wait it out.
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(time.Second) {
		ns, err := c.admin.CoreV1().Namespaces().Get(ctx, coreNS, metav1.GetOptions{})
		if err != nil || ns.DeletionTimestamp == nil {
			break
		}
	}
	start := time.Now()
	c.run(t, "apply", "-k", dir)
	t.Cleanup(func() { c.teardown(t, before) })
	c.run(t, "-n", coreNS, "rollout", "status", "deployment/mcp-forge", "--timeout=180s")
	t.Logf("kubectl apply -k to a rolled-out Deployment in %v", time.Since(start).Round(time.Millisecond))
	return c.readyPods(t)
}

// replicas deploys deploy/overlays/replicas with tenants and returns its
// two ready core pods.
func (c *cluster) replicas(t testing.TB, tenants string) (a, b corev1.Pod) {
	t.Helper()
	pods := c.deploy(t, c.overlay(t, "overlays/replicas", tenants))
	if len(pods) != 2 {
		t.Fatalf("%d ready core pods, want the overlay's 2", len(pods))
	}
	return pods[0], pods[1]
}

func (c *cluster) readyPods(t testing.TB) []corev1.Pod {
	t.Helper()
	l, err := c.admin.CoreV1().Pods(coreNS).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no ready core pod in %s:\n%s", coreNS, c.run(t, "-n", coreNS, "describe", "pods"))
	}
	return out
}

func (c *cluster) teardown(t testing.TB, before map[string]bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if t.Failed() {
		logs, _ := exec.Command(c.kubectl, "--kubeconfig", c.adminKC, "-n", coreNS, "logs", "-l", selector, "--tail=40", "--all-containers").CombinedOutput()
		t.Logf("core logs:\n%s", logs)
	}
	del := func(err error, what string) {
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s: %v", what, err)
		}
	}
	del(c.admin.AppsV1().Deployments(coreNS).Delete(ctx, "mcp-forge", metav1.DeleteOptions{}), "the Deployment")
	// The core's pods stop gracefully (SIGTERM): each removes its sandboxes.
	for ctx.Err() == nil {
		l, err := c.admin.CoreV1().Pods(coreNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(l.Items) == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	rbac := c.admin.RbacV1()
	del(rbac.RoleBindings(sandboxNS).Delete(ctx, "mcp-forge-core", metav1.DeleteOptions{}), "the RoleBinding")
	del(rbac.Roles(sandboxNS).Delete(ctx, "mcp-forge-core", metav1.DeleteOptions{}), "the Role")
	del(rbac.ClusterRoleBindings().Delete(ctx, "mcp-forge-core", metav1.DeleteOptions{}), "the ClusterRoleBinding")
	del(rbac.ClusterRoles().Delete(ctx, "mcp-forge-core", metav1.DeleteOptions{}), "the ClusterRole")
	del(c.admin.CoreV1().Namespaces().Delete(ctx, coreNS, metav1.DeleteOptions{}), "namespace "+coreNS)
	for ctx.Err() == nil {
		if _, err := c.admin.CoreV1().Namespaces().Get(ctx, coreNS, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	l, err := c.admin.CoreV1().Pods(sandboxNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("list sandbox pods: %v", err)
		return
	}
	var left []string
	for _, p := range l.Items {
		// Only what this deployment's cores made: the other lanes' servers
		// (outside the cluster) have pods in the same namespace meanwhile.
		ours := strings.HasPrefix(p.Annotations["io.mcp-forge.core-pod"], coreNS+"/")
		if ours && !before[p.Name] && p.DeletionTimestamp == nil {
			left = append(left, p.Name)
			zero := int64(0)
			_ = c.admin.CoreV1().Pods(sandboxNS).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	}
	if len(left) > 0 {
		t.Errorf("the core left sandbox pods after its graceful stop: %v", left)
	}
}

type execOut = mcpserver.ExecuteOutput

func connect(t testing.TB, url, key string) *mcp.ClientSession {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: testenv.Bearer{Key: key}}, DisableStandaloneSSE: true, MaxRetries: -1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "forge-cluster-e2e", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// `kubectl apply -k` of deploy/base, with an operator's tenants, gives a
// server that runs Python and R, stateless and in sessions, for each
// tenant apart; answers its probes; is scraped for metrics; and writes its
// audit trail to stdout as JSON lines holding a hash of the code, never
// the code.
func TestCoreInCluster(t *testing.T) {
	c := setup(t)
	tenants, keys := testenv.TenantKeys(t, "alice", "bob")
	pods := c.deploy(t, c.overlay(t, "base", tenants))
	if len(pods) != 1 {
		t.Fatalf("%d ready core pods, want the base's 1", len(pods))
	}
	pod := pods[0]
	mcpURL := "http://" + pod.Status.PodIP + ":8080/mcp"
	admin := "http://" + pod.Status.PodIP + ":9090"

	code, body := get(t, admin+"/readyz")
	type check struct {
		Name   string
		OK     bool
		Detail string
	}
	var ready struct {
		Ready  bool
		Checks []check
	}
	ok := func(name string) bool {
		return slices.ContainsFunc(ready.Checks, func(ch check) bool { return ch.Name == name && ch.OK })
	}
	// The runtime, and the quotas counted across replicas.
	if err := json.Unmarshal([]byte(body), &ready); code != http.StatusOK || err != nil || !ready.Ready || !ok("kubernetes") || !ok("quotas") {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	if resp, err := http.Post(mcpURL, "application/json", strings.NewReader(`{}`)); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/mcp without a key: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	alice, bob := connect(t, mcpURL, keys["alice"]), connect(t, mcpURL, keys["bob"])
	const marker = "forge-cluster-marker-3f9a"
	var o execOut
	if res := testenv.Call(t, alice, "execute_python", map[string]any{"code": "# " + marker + "\nimport socket\nprint(6 * 7, sorted(n for _, n in socket.if_nameindex()))"}, &o); res.IsError || o.Stdout != "42 ['lo']\n" {
		t.Fatalf("stateless Python: %s %+v", testenv.Text(res), o)
	}
	o = execOut{}
	if res := testenv.Call(t, alice, "execute_r", map[string]any{"code": "cat(6 * 7)"}, &o); res.IsError || o.Stdout != "42" {
		t.Fatalf("stateless R: %s %+v", testenv.Text(res), o)
	}
	for _, step := range []struct{ lang, code, want string }{
		{"python", "x = 41", ""}, {"python", "x + 1", "42"},
		{"r", "y <- 41", ""}, {"r", "y + 1", "[1] 42"},
	} {
		var o execOut
		res := testenv.Call(t, alice, "execute_"+step.lang, map[string]any{"code": step.code, "session_id": "main-" + step.lang}, &o)
		if res.IsError || !o.Success || o.ResultRepr != step.want {
			t.Fatalf("%s session, %q: %s %+v", step.lang, step.code, testenv.Text(res), o)
		}
	}
	var sessions mcpserver.SessionsOutput
	if res := testenv.Call(t, bob, "list_sessions", map[string]any{}, &sessions); res.IsError || len(sessions.Sessions) != 0 {
		t.Fatalf("bob sees sessions: %s %+v", testenv.Text(res), sessions)
	}
	o = execOut{}
	if res := testenv.Call(t, bob, "execute_python", map[string]any{"code": "'x' in globals()", "session_id": "main-python"}, &o); res.IsError || o.ResultRepr != "False" {
		t.Fatalf("bob's main-python holds alice's x: %s %+v", testenv.Text(res), o)
	}

	code, body = get(t, admin+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, `tenant="alice"`) {
		t.Fatalf("/metrics: %d, alice not counted:\n%.2000s", code, body)
	}

	// The audit trail on stdout: JSON lines with the tenant and a code
	// hash; the code itself nowhere in the pod's output.
	logs, err := c.admin.CoreV1().Pods(coreNS).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(logs), marker) {
		t.Fatal("the code appears in the core's output")
	}
	events := map[string]int{}
	hashed, alices := 0, 0
	sc := bufio.NewScanner(strings.NewReader(string(logs)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			Event   string         `json:"event"`
			Tenant  string         `json:"user_id"`
			Details map[string]any `json:"details"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Event == "" {
			continue
		}
		events[e.Event]++
		if h, _ := e.Details["code_sha256"].(string); len(h) == 64 {
			hashed++
		}
		if e.Tenant == "alice" {
			alices++
		}
	}
	if events["container.create"] == 0 || hashed == 0 || alices == 0 {
		t.Fatalf("audit lines on stdout: %v, %d with a code hash, %d of alice's", events, hashed, alices)
	}
	t.Logf("audit on stdout: %d lines of %d kinds, %d with a code hash, %d of alice's", sum(events), len(events), hashed, alices)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// The core's service account may do what rbac.yaml grants and nothing
// else: every resource the API server serves, every verb it takes, in the
// sandbox namespace, the core's own, another, and cluster-wide, asked of
// the API server's authorizer (SubjectAccessReview); and a few of those
// refusals tried for real with the account's own token.
func TestCoreRBAC(t *testing.T) {
	c := setup(t)
	tenants, _ := testenv.TenantKeys(t, "alice")
	c.deploy(t, c.overlay(t, "base", tenants))
	ctx := context.Background()
	user := "system:serviceaccount:" + coreNS + ":" + coreSA

	type grant struct{ ns, resource, verb string }
	// What rbac.yaml gives, and what every authenticated account may ask
	// about itself (system:basic-user).
	want := map[grant]bool{}
	for _, v := range []string{"create", "get", "list", "watch", "delete", "update"} {
		want[grant{sandboxNS, "pods", v}] = true
	}
	// Session records: by name, never listed.
	for _, v := range []string{"create", "get", "update"} {
		want[grant{sandboxNS, "secrets", v}] = true
	}
	for _, r := range []string{"pods/exec", "pods/attach"} {
		want[grant{sandboxNS, r, "create"}], want[grant{sandboxNS, r, "get"}] = true, true
	}
	want[grant{sandboxNS, "networkpolicies.networking.k8s.io", "list"}] = true
	want[grant{"", "nodes", "get"}], want[grant{"", "nodes", "list"}] = true, true
	want[grant{coreNS, "pods", "get"}], want[grant{coreNS, "pods", "list"}] = true, true
	want[grant{"", "runtimeclasses.node.k8s.io", "get"}] = true
	// Leases: the reaper's, and one per replica with its usage of the
	// tenants' quotas (named by its pod: not known ahead).
	for _, v := range []string{"create", "get", "update", "list", "watch"} {
		want[grant{coreNS, "leases.coordination.k8s.io", v}] = true
	}
	for _, r := range []string{"selfsubjectaccessreviews.authorization.k8s.io", "selfsubjectrulesreviews.authorization.k8s.io", "selfsubjectreviews.authentication.k8s.io"} {
		for _, ns := range []string{"", sandboxNS, coreNS, "kube-system"} {
			want[grant{ns, r, "create"}] = true
		}
	}

	lists, err := c.admin.Discovery().ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	var extra []string
	for _, l := range lists {
		gv, _ := schemaGroup(l.GroupVersion)
		for _, r := range l.APIResources {
			res := r.Name
			if gv != "" {
				res += "." + gv
			}
			namespaces := []string{""}
			if r.Namespaced {
				namespaces = []string{sandboxNS, coreNS, "kube-system"}
			}
			name, sub, _ := strings.Cut(r.Name, "/")
			for _, ns := range namespaces {
				for _, v := range r.Verbs {
					ok := c.review(t, user, authzv1.ResourceAttributes{Namespace: ns, Group: gv, Resource: name, Subresource: sub, Verb: v})
					checked++
					if ok != want[grant{ns, res, v}] {
						extra = append(extra, fmt.Sprintf("%s %s in %q: allowed=%v", v, res, ns, ok))
					}
				}
			}
		}
	}
	// Subresources are not in the preferred list's verbs for every kind;
	// the ones the core must not touch, asked by name.
	for _, g := range []grant{{sandboxNS, "pods/log", "get"}, {sandboxNS, "pods/portforward", "create"}, {sandboxNS, "pods/ephemeralcontainers", "patch"},
		{sandboxNS, "pods/eviction", "create"}, {coreNS, "pods/exec", "create"}, {"kube-system", "pods/exec", "create"}, {coreNS, "secrets", "get"}} {
		res, sub, _ := strings.Cut(g.resource, "/")
		checked++
		if c.allowedSub(t, user, g.ns, res, sub, g.verb) != want[g] {
			extra = append(extra, fmt.Sprintf("%s %s in %q: allowed, want refused", g.verb, g.resource, g.ns))
		}
	}
	// namespaces: get of the sandbox namespace only (doctor's Pod Security check).
	if !c.allowed(t, user, "", "", "namespaces", "get", sandboxNS) || c.allowed(t, user, "", "", "namespaces", "get", coreNS) {
		extra = append(extra, "namespaces get: want mcp-forge only")
	}
	if len(extra) > 0 {
		t.Fatalf("the core's account differs from rbac.yaml in %d of %d checks:\n%s", len(extra), checked, strings.Join(extra, "\n"))
	}
	t.Logf("%d authorizer checks match rbac.yaml", checked)

	// For real, with the account's token.
	tok, err := c.admin.CoreV1().ServiceAccounts(coreNS).CreateToken(ctx, coreSA, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa := rest.AnonymousClientConfig(c.rest)
	sa.BearerToken = tok.Status.Token
	cs, err := kubernetes.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(sandboxNS).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the core cannot list its sandboxes: %v", err)
	}
	for what, err := range map[string]error{
		"list secrets in " + sandboxNS: second(cs.CoreV1().Secrets(sandboxNS).List(ctx, metav1.ListOptions{})),
		"read its own tenants Secret":  second(cs.CoreV1().Secrets(coreNS).List(ctx, metav1.ListOptions{})),
		"list pods in kube-system":     second(cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})),
		"create a pod in " + coreNS: second(cs.CoreV1().Pods(coreNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rbac-probe"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "localhost/mcp-forge/pause:catatonit"}}}}, metav1.CreateOptions{})),
		"delete namespace " + sandboxNS: cs.CoreV1().Namespaces().Delete(ctx, sandboxNS, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}),
		"scale its own Deployment":      second(cs.AppsV1().Deployments(coreNS).Get(ctx, "mcp-forge", metav1.GetOptions{})),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// allowed asks the API server's authorizer whether user may verb resource
// (of group, in ns; "" cluster-wide), optionally the object name.
func (c *cluster) allowed(t *testing.T, user, ns, group, resource, verb, name string) bool {
	t.Helper()
	return c.review(t, user, authzv1.ResourceAttributes{Namespace: ns, Group: group, Resource: resource, Verb: verb, Name: name})
}

func (c *cluster) allowedSub(t *testing.T, user, ns, resource, sub, verb string) bool {
	t.Helper()
	return c.review(t, user, authzv1.ResourceAttributes{Namespace: ns, Resource: resource, Subresource: sub, Verb: verb})
}

func (c *cluster) review(t *testing.T, user string, attrs authzv1.ResourceAttributes) bool {
	t.Helper()
	sar, err := c.admin.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + coreNS, "system:authenticated"}, ResourceAttributes: &attrs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview %+v: %v", attrs, err)
	}
	return sar.Status.Allowed
}

func schemaGroup(groupVersion string) (group, version string) {
	if g, v, ok := strings.Cut(groupVersion, "/"); ok {
		return g, v
	}
	return "", groupVersion
}

// sandboxesOf lists the live sandbox pods the core pod name made.
func (c *cluster) sandboxesOf(t testing.TB, name string) []string {
	t.Helper()
	l, err := c.admin.CoreV1().Pods(sandboxNS).List(context.Background(), metav1.ListOptions{LabelSelector: "io.mcp-forge.managed=true"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && strings.HasPrefix(p.Annotations["io.mcp-forge.core-pod"], coreNS+"/"+name+"/") {
			out = append(out, p.Name)
		}
	}
	return out
}

// kill SIGKILLs the core process of pod p through the node's containerd
// (the test runs on kube-up's node), then deletes the pod with no grace:
// a replica lost with its node, which stops nothing and sweeps nothing.
func (c *cluster) kill(t testing.TB, p corev1.Pod) {
	t.Helper()
	sock := os.Getenv("FORGE_TEST_CONTAINERD")
	if sock == "" || len(p.Status.ContainerStatuses) == 0 {
		t.Skip("killing a replica needs the node's containerd: set FORGE_TEST_CONTAINERD (scripts/test-kube.sh does)")
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if out, err := exec.Command("ctr", "-a", sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).CombinedOutput(); err != nil {
		t.Fatalf("SIGKILL the core of %s (container %s): %v\n%s", p.Name, id, err, out)
	}
	zero := int64(0)
	if err := c.admin.CoreV1().Pods(coreNS).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
}

// Two replicas (deploy/overlays/replicas); one is killed outright (SIGKILL,
// its pod deleted: no shutdown, no sweep of its own) while it serves a
// Python and an R session. The other takes both over with their
// variables at the client's next call; the replica holding the reaper's
// Lease removes the dead one's other sandboxes, audited; the Deployment
// replaces it. Another tenant never reaches the sessions taken over.
func TestReplicaLoss(t *testing.T) {
	c := setup(t)
	tenants, keys := testenv.TenantKeys(t, "alice", "bob")
	a, b := c.replicas(t, tenants)
	onA := connect(t, "http://"+a.Status.PodIP+":8080/mcp", keys["alice"])
	for _, step := range []struct{ lang, code string }{{"python", "x = 41; z = 7"}, {"r", "y <- 41"}} {
		var o execOut
		if res := testenv.Call(t, onA, "execute_"+step.lang, map[string]any{"code": step.code, "session_id": "kept-" + step.lang}, &o); res.IsError || !o.Success {
			t.Fatalf("%s session on %s: %s", step.lang, a.Name, testenv.Text(res))
		}
	}
	// A checkpoint through A, on the claim both replicas mount (the
	// session goes on past it: z = 8 on B below).
	var ck struct {
		Saved []string `json:"saved"`
	}
	if res := testenv.Call(t, onA, "checkpoint_session", map[string]any{"session_id": "kept-python"}, &ck); res.IsError || !slices.Contains(ck.Saved, "z") {
		t.Fatalf("checkpoint on %s: %s", a.Name, testenv.Text(res))
	}
	left := c.sandboxesOf(t, a.Name)
	if len(left) < 2 {
		t.Fatalf("sandbox pods marked as %s's: %v, want its two sessions' at least", a.Name, left)
	}
	// The baseline: calls on the replica that opened the session.
	before := timeCalls(t, onA, 20)
	// What the check that a replica still serves a session costs: one
	// read of the session's pod.
	var gets []time.Duration
	for range 20 {
		start := time.Now()
		if _, err := c.admin.CoreV1().Pods(sandboxNS).Get(context.Background(), left[0], metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		gets = append(gets, time.Since(start))
	}
	slices.Sort(gets)
	killed := time.Now()
	c.kill(t, a)

	// The client's next calls reach the other replica (as the Service
	// would send them): the sessions go on with their variables.
	onB := connect(t, "http://"+b.Status.PodIP+":8080/mcp", keys["alice"])
	var failover time.Duration
	for _, step := range []struct{ lang, code, want string }{{"python", "z = 8\nx + 1", "42"}, {"r", "y + 1", "[1] 42"}} {
		var o execOut
		start := time.Now()
		res := testenv.Call(t, onB, "execute_"+step.lang, map[string]any{"code": step.code, "session_id": "kept-" + step.lang}, &o)
		if res.IsError || o.ResultRepr != step.want {
			t.Fatalf("%s session on %s after %s was killed: %s %+v", step.lang, b.Name, a.Name, testenv.Text(res), o)
		}
		if failover == 0 {
			failover = time.Since(killed)
		}
		t.Logf("%s session taken over by %s in a call of %v", step.lang, b.Name, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("failover: %v from the SIGKILL of %s to the first result of its session on %s", failover.Round(time.Millisecond), a.Name, b.Name)
	// Later calls cost what they did on the replica that opened it.
	after := timeCalls(t, onB, 20)
	t.Logf("session calls, p50 of 20: %v on the replica that opened it, %v on the one that took it over (%.2f×); the per-call check that a replica still serves its session is one pod read, p50 %v",
		before.Round(100*time.Microsecond), after.Round(100*time.Microsecond), float64(after)/float64(before), gets[len(gets)/2].Round(10*time.Microsecond))

	// Another tenant's call of the same id is a session of its own, even
	// with alice's session pods relabelled as bob's (a forged label or
	// annotation leads nowhere: only the core's record does).
	bobs := session.InternalID("bob", "kept-python")
	recorded, err := c.admin.CoreV1().Pods(sandboxNS).List(context.Background(), metav1.ListOptions{LabelSelector: runtime.LabelRecorded + "=true"})
	if err != nil || len(recorded.Items) < 2 {
		t.Fatalf("recorded session pods: %v (%v)", recorded, err)
	}
	for _, p := range recorded.Items {
		p.Labels[runtime.LabelSession] = bobs
		p.Annotations["io.mcp-forge.session-owner"] = "bob"
		if _, err := c.admin.CoreV1().Pods(sandboxNS).Update(context.Background(), &p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("forge the labels of %s: %v", p.Name, err)
		}
	}
	bobOnB := connect(t, "http://"+b.Status.PodIP+":8080/mcp", keys["bob"])
	var o execOut
	if res := testenv.Call(t, bobOnB, "execute_python", map[string]any{"code": "'x' in globals()", "session_id": "kept-python"}, &o); res.IsError || o.ResultRepr != "False" {
		t.Fatalf("bob's kept-python: %s %+v", testenv.Text(res), o)
	}

	deadline := time.Now().Add(2 * time.Minute)
	for len(c.sandboxesOf(t, a.Name)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s's sandboxes %v are still there 2 minutes after it was killed", a.Name, c.sandboxesOf(t, a.Name))
		}
		time.Sleep(250 * time.Millisecond)
	}
	took := time.Since(killed)
	t.Logf("%d sandbox pods of the killed replica %s taken over or removed %v after the kill (the Lease lasts 15 s, a sweep every 10 s)", len(left), a.Name, took.Round(100*time.Millisecond))
	kept := map[string]bool{}
	for _, p := range c.sandboxesOf(t, b.Name) {
		kept[p] = true
	}
	var reaped []string
	for _, p := range left {
		if !kept[p] {
			reaped = append(reaped, p)
		}
	}
	if len(left)-len(reaped) < 2 {
		t.Fatalf("of %s's sandboxes %v, %s serves %v: want its two sessions'", a.Name, left, b.Name, kept)
	}
	left = reaped
	c.run(t, "-n", coreNS, "rollout", "status", "deployment/mcp-forge", "--timeout=180s")

	// Audited by whichever replica holds the Lease.
	audited := map[string]bool{}
	for _, p := range c.readyPods(t) {
		logs, err := c.admin.CoreV1().Pods(coreNS).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(logs), "\n") {
			var e struct {
				Event   string         `json:"event"`
				Details map[string]any `json:"details"`
			}
			if json.Unmarshal([]byte(line), &e) == nil && e.Event == "container.reconcile" && e.Details["left_by"] == coreNS+"/"+a.Name {
				audited[fmt.Sprint(e.Details["container_id"])] = true
			}
		}
	}
	for _, p := range left {
		if !audited[p] {
			t.Errorf("the removal of %s (left by %s) is not audited; audited: %v", p, a.Name, audited)
		}
	}

	// The checkpoint A wrote is B's to restore: z is back at what it was
	// then, x with it.
	ck.Saved = nil
	if res := testenv.Call(t, onB, "restore_session", map[string]any{"session_id": "kept-python"}, &ck); res.IsError || !slices.Contains(ck.Saved, "z") {
		t.Fatalf("restore on %s of the checkpoint made on %s: %s", b.Name, a.Name, testenv.Text(res))
	}
	if res := testenv.Call(t, onB, "execute_python", map[string]any{"code": "(x, z)", "session_id": "kept-python"}, &o); res.IsError || o.ResultRepr != "(41, 7)" {
		t.Fatalf("after the restore on %s: %s %+v", b.Name, testenv.Text(res), o)
	}
}

// A rolling restart of two replicas during a stream of calls in one
// session: each stopping replica hands the session over, the next call
// reaches it on another, and no call is lost or run twice (the session's
// counter goes up by exactly one for every result). A call that fails
// says to retry; the client then tries a replica that is up.
func TestRollingRestart(t *testing.T) {
	c := setup(t)
	tenants, keys := testenv.TenantKeys(t, "alice")
	first, second := c.replicas(t, tenants)
	var (
		conn     *mcp.ClientSession
		on       string
		n        int // the counter the session should hold
		failures = map[string]int{}
		moves    []string
	)
	reconnect := func() {
		if conn != nil {
			conn.Close()
			conn = nil
		}
		for _, p := range c.readyPods(t) {
			tr := &mcp.StreamableClientTransport{Endpoint: "http://" + p.Status.PodIP + ":8080/mcp", HTTPClient: &http.Client{Transport: testenv.Bearer{Key: keys["alice"]}}, DisableStandaloneSSE: true, MaxRetries: -1}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "forge-cluster-e2e", Version: "1"}, nil).Connect(ctx, tr, nil)
			cancel()
			if err == nil {
				if p.Name != on {
					moves = append(moves, p.Name)
				}
				conn, on = cs, p.Name
				return
			}
		}
	}
	t.Cleanup(func() {
		if conn != nil {
			conn.Close()
		}
	})
	// call runs one step; false: it failed, and the client retries it.
	call := func(code string) (string, bool) {
		if conn == nil {
			reconnect()
			if conn == nil {
				failures["no replica accepts a connection"]++
				time.Sleep(200 * time.Millisecond)
				return "", false
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := conn.CallTool(ctx, &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": code, "session_id": "stream"}})
		if err != nil {
			// The replica went away under the connection: the client
			// connects to another one.
			failures["transport: "+firstLine(err.Error())]++
			conn.Close()
			conn = nil
			return "", false
		}
		var o execOut
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &o)
		if res.IsError || !o.Success {
			text := testenv.Text(res)
			if !strings.Contains(text, "retry") {
				t.Fatalf("a call failed without saying to retry, on %s: %s %+v", on, text, o)
			}
			failures["refused: "+firstLine(text)]++
			time.Sleep(200 * time.Millisecond)
			return "", false
		}
		return o.ResultRepr, true
	}
	for {
		if _, ok := call("n = 0"); ok {
			break
		}
	}
	step := func() {
		// At the tenant's pace (quotas.executions_per_minute, 120): what
		// is retried is the restart's doing, not the rate limit's.
		time.Sleep(550 * time.Millisecond)
		for {
			got, ok := call("n += 1\nn")
			if !ok {
				continue
			}
			n++
			if got != fmt.Sprint(n) {
				t.Fatalf("after %d results the session's counter is %s: a call was lost or ran twice (moves %v, failures %v)", n, got, moves, failures)
			}
			return
		}
	}
	for range 5 {
		step()
	}
	start := time.Now()
	c.run(t, "-n", coreNS, "rollout", "restart", "deployment/mcp-forge")
	done := make(chan error, 1)
	go func() {
		out, err := exec.Command(c.kubectl, "--kubeconfig", c.adminKC, "-n", coreNS, "rollout", "status", "deployment/mcp-forge", "--timeout=300s").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%v: %s", err, out)
		}
		done <- err
	}()
	rolled := false
	for !rolled {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			rolled = true
		default:
		}
		step()
	}
	for range 5 {
		step()
	}
	old := map[string]bool{first.Name: true, second.Name: true}
	if old[on] {
		t.Fatalf("the stream ends on %s, a replica from before the restart", on)
	}
	lost := 0
	for k, v := range failures {
		lost += v
		t.Logf("retried %d×: %s", v, k)
	}
	t.Logf("rolling restart: %d results in %v, 0 lost, 0 run twice; the session moved %v; %d calls retried", n, time.Since(start).Round(time.Millisecond), moves, lost)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}

// timeCalls is the median of n calls reading x in session kept-python.
func timeCalls(t testing.TB, cs *mcp.ClientSession, n int) time.Duration {
	t.Helper()
	var calls []time.Duration
	for range n {
		var o execOut
		start := time.Now()
		if res := testenv.Call(t, cs, "execute_python", map[string]any{"code": "x", "session_id": "kept-python"}, &o); res.IsError || o.ResultRepr != "41" {
			t.Fatalf("call in kept-python: %s %+v", testenv.Text(res), o)
		}
		calls = append(calls, time.Since(start))
	}
	slices.Sort(calls)
	return calls[n/2]
}

// A client may reach either of two replicas for any call. A session's
// call that reaches the replica not serving it is forwarded to the one
// that does (the kernel stays where it runs: the first replica still
// serves it after). A tenant's quotas hold across both: each replica
// publishes what it holds in a Lease of its own and counts the other's,
// so a session or a run past the tenant's limit is refused on whichever
// replica the call reaches, saying how much of it is elsewhere, and what
// one replica lets go is free on the other at once.
func TestAnyReplica(t *testing.T) {
	c := setup(t)
	tenants, keys := testenv.TenantKeys(t, "carol")
	tenants += "max_sessions = 2\nmax_concurrent_runs = 1\nexecutions_per_minute = 600\nexecution_burst = 100\n"
	a, b := c.replicas(t, tenants)
	onA := connect(t, "http://"+a.Status.PodIP+":8080/mcp", keys["carol"])
	onB := connect(t, "http://"+b.Status.PodIP+":8080/mcp", keys["carol"])
	exec := func(cs *mcp.ClientSession, code, session string) *mcp.CallToolResult {
		args := map[string]any{"code": code}
		if session != "" {
			args["session_id"] = session
		}
		return testenv.Call(t, cs, "execute_python", args, nil)
	}
	for _, s := range []struct {
		on *mcp.ClientSession
		id string
	}{{onA, "q1"}, {onB, "q2"}} {
		if res := exec(s.on, "v = 'kept'", s.id); res.IsError {
			t.Fatalf("session %s: %s", s.id, testenv.Text(res))
		}
	}
	// q1's calls through B reach A, alternating with calls on A: had B
	// taken q1 over, A's next call would be refused (session-moved).
	var direct, forwarded []time.Duration
	for i := range 20 {
		on, took := onA, &direct
		if i%2 == 1 {
			on, took = onB, &forwarded
		}
		var o execOut
		start := time.Now()
		res := testenv.Call(t, on, "execute_python", map[string]any{"code": "v", "session_id": "q1"}, &o)
		*took = append(*took, time.Since(start))
		if res.IsError || o.ResultRepr != "'kept'" {
			t.Fatalf("q1 (opened on %s) through %s: %s %+v", a.Name, []string{a.Name, b.Name}[i%2], testenv.Text(res), o)
		}
	}
	slices.Sort(direct)
	slices.Sort(forwarded)
	t.Logf("a session's calls, p50 of 10: %v on the replica serving it, %v through the other (forwarded: +%v)",
		direct[5].Round(100*time.Microsecond), forwarded[5].Round(100*time.Microsecond), (forwarded[5] - direct[5]).Round(100*time.Microsecond))
	res := exec(onA, "1", "q3")
	if text := testenv.Text(res); !res.IsError || !strings.Contains(text, "max_sessions") || !strings.Contains(text, "1 of them through other replicas") {
		t.Fatalf("carol's third session, on %s with one on %s: %s", a.Name, b.Name, text)
	}
	if res := testenv.Call(t, onB, "destroy_session", map[string]any{"session_id": "q2"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	// admitted calls until one is, and says how long that took.
	admitted := func(what string, call func() *mcp.CallToolResult) time.Duration {
		start := time.Now()
		for {
			res := call()
			if !res.IsError {
				return time.Since(start)
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("%s: still refused %v later: %s", what, time.Since(start), testenv.Text(res))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	took := admitted("q3 on "+a.Name+" after q2 was destroyed on "+b.Name, func() *mcp.CallToolResult { return exec(onA, "1", "q3") })
	t.Logf("a session destroyed on one replica is room on the other %v later (the answer of a session's first call included)", took.Round(time.Millisecond))

	// One run at a time across both: a run on B while one runs on A is
	// refused; once A's is over, B's goes.
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := onA.CallTool(ctx, &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": "import time; time.sleep(4)"}})
		if err != nil {
			r = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		done <- r
	}()
	time.Sleep(time.Second)
	res = exec(onB, "1 + 1", "")
	if text := testenv.Text(res); !res.IsError || !strings.Contains(text, "max_concurrent_runs") || !strings.Contains(text, "1 of them through other replicas") {
		t.Fatalf("a run on %s while one runs on %s: %s", b.Name, a.Name, text)
	}
	if r := <-done; r.IsError {
		t.Fatalf("the run on %s: %s", a.Name, testenv.Text(r))
	}
	took = admitted("a run on "+b.Name+" after the one on "+a.Name+" ended", func() *mcp.CallToolResult { return exec(onB, "1 + 1", "") })
	t.Logf("a run ended on one replica is room on the other %v later (its sandbox's removal and the next run included)", took.Round(time.Millisecond))
}
