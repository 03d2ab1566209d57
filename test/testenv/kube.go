package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes"
	"github.com/mcp-forge/mcp-forge/core/runtime/podman"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
)

// KubeConfigEnv names the forge.toml `make kube-up` printed (its
// FORGE_CONFIG line): set, the servers of the end-to-end tests run their
// sandboxes on that cluster instead of Podman. The same tests, the other
// runtime: scripts/test.sh runs the Kubernetes leg this way.
const KubeConfigEnv = "FORGE_TEST_KUBE_CONFIG"

// Kube reports whether this run's servers use the Kubernetes runtime.
func Kube() bool { return os.Getenv(KubeConfigEnv) != "" }

// PodmanOnly skips a test of what only the Podman runtime does (its
// containers inspected with podman, host workspaces, loop devices).
func PodmanOnly(t testing.TB, why string) {
	t.Helper()
	if Kube() {
		t.Skip("Podman runtime only: " + why)
	}
}

var kubeEnv struct {
	once sync.Once
	env  []string
	err  error
}

// runtimeEnv is the environment that points a server at the cluster of
// KubeConfigEnv: its [runtime] settings and the guarantees it waives, as
// FORGE_* overrides, so that a test's own TOML may open any table.
func runtimeEnv(t testing.TB) []string {
	t.Helper()
	if !Kube() {
		return isolationEnv()
	}
	kubeEnv.once.Do(func() { kubeEnv.env, kubeEnv.err = readKubeEnv(os.Getenv(KubeConfigEnv)) })
	if kubeEnv.err != nil {
		t.Fatalf("%s: %v", KubeConfigEnv, kubeEnv.err)
	}
	return append(kubeEnv.env, isolationEnv()...)
}

func readKubeEnv(path string) ([]string, error) {
	var f struct {
		Runtime struct {
			Kind       string         `toml:"kind"`
			Kubernetes map[string]any `toml:"kubernetes"`
		} `toml:"runtime"`
		Security struct {
			Waive []string `toml:"waive"`
		} `toml:"security"`
	}
	if _, err := toml.DecodeFile(path, &f); err != nil {
		return nil, err
	}
	if f.Runtime.Kind != "kubernetes" {
		return nil, fmt.Errorf("%s has runtime.kind %q, not kubernetes", path, f.Runtime.Kind)
	}
	env := []string{"FORGE_RUNTIME_KIND=kubernetes"}
	for k, v := range f.Runtime.Kubernetes {
		switch v.(type) {
		case string, int64, bool:
			env = append(env, fmt.Sprintf("FORGE_RUNTIME_KUBERNETES_%s=%v", strings.ToUpper(k), v))
		default:
			return nil, fmt.Errorf("%s: runtime.kubernetes.%s is a table or list, which the tests cannot pass on", path, k)
		}
	}
	if len(f.Security.Waive) > 0 {
		env = append(env, "FORGE_SECURITY_WAIVE="+strings.Join(f.Security.Waive, ","))
	}
	return env, nil
}

// applyKube points cfg at the cluster of KubeConfigEnv (a core built in
// the test process, as NewCore makes).
func applyKube(t testing.TB, cfg *config.Config) {
	t.Helper()
	f := struct {
		Runtime  *config.Runtime `toml:"runtime"`
		Security struct {
			Waive []string `toml:"waive"`
		} `toml:"security"`
	}{Runtime: &cfg.Runtime}
	if _, err := toml.DecodeFile(os.Getenv(KubeConfigEnv), &f); err != nil {
		t.Fatalf("%s: %v", KubeConfigEnv, err)
	}
	cfg.Security.Waive = append(cfg.Security.Waive, f.Security.Waive...)
}

// kubeEngine is the runtime a test core's manager runs on, and how it
// reaches its workspaces (nil on Podman).
func kubeEngine(t testing.TB, cfg config.Config) (sandbox.Engine, *kubernetes.Client) {
	t.Helper()
	k, err := kubernetes.New(cfg.Runtime.Kubernetes, kubernetes.Options{Quota: int64(cfg.Volumes.SessionQuota)})
	if err != nil {
		t.Fatal(err)
	}
	return k, k
}

// requireKube fails when the cluster of KubeConfigEnv does not answer.
func requireKube(ctx context.Context, t testing.TB) {
	t.Helper()
	var cfg config.Config
	cfg.Runtime = config.Default().Runtime
	applyKube(t, &cfg)
	k, err := kubernetes.New(cfg.Runtime.Kubernetes, kubernetes.Options{})
	if err == nil {
		_, err = k.Info(ctx)
	}
	if err != nil {
		t.Fatalf("the cluster of %s is required for the Kubernetes leg: %v (`make kube-up` starts it)", KubeConfigEnv, err)
	}
}

// Sandboxes lists the sandboxes (containers or pods) carrying every one of
// labels, on the runtime this run's servers use.
func Sandboxes(t testing.TB, labels map[string]string) []runtime.Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := sandboxRuntime(t, Kube()).List(ctx, labels)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// SandboxExec runs cmd in a sandbox (a container's id or a pod's name, as
// its hostname gives them) as its own user, on the cluster of
// KubeConfigEnv (kube) or Podman: a measurement from inside, beside a
// server's figures (StartServerOn's kube).
func SandboxExec(t testing.TB, kube bool, id string, cmd ...string) runtime.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := sandboxRuntime(t, kube).Exec(ctx, id, runtime.ExecRequest{Command: cmd, Max: 1 << 20})
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, id, err)
	}
	return res
}

// sandboxRuntime is the cluster of KubeConfigEnv (kube) or Podman.
func sandboxRuntime(t testing.TB, kube bool) interface {
	List(context.Context, map[string]string) ([]runtime.Container, error)
	Exec(context.Context, string, runtime.ExecRequest) (runtime.ExecResult, error)
} {
	t.Helper()
	if kube {
		return kubeClient(t)
	}
	return podman.New("")
}

// kubeClient is a client of the cluster of KubeConfigEnv.
func kubeClient(t testing.TB) *kubernetes.Client {
	t.Helper()
	var cfg config.Config
	cfg.Runtime = config.Default().Runtime
	applyKube(t, &cfg)
	k, err := kubernetes.New(cfg.Runtime.Kubernetes, kubernetes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// RuntimeEnv is the environment a test's own `mcp-forge serve` needs to
// run its sandboxes where this run's servers do (none on Podman).
func RuntimeEnv(t testing.TB) []string { return runtimeEnv(t) }

// ImageStore is where custom environments are built: Podman's local
// images, or the cluster's registry (runtime.kubernetes.image_registry).
type ImageStore interface {
	runtime.ImageBuilder
	runtime.Images
}

// Images is the image store of the runtime this run's servers use.
func Images(t testing.TB) ImageStore {
	t.Helper()
	if !Kube() {
		return podman.New("")
	}
	return kubeClient(t)
}
