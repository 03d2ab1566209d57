package testenv

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/BurntSushi/toml"
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
		return nil
	}
	kubeEnv.once.Do(func() { kubeEnv.env, kubeEnv.err = readKubeEnv(os.Getenv(KubeConfigEnv)) })
	if kubeEnv.err != nil {
		t.Fatalf("%s: %v", KubeConfigEnv, kubeEnv.err)
	}
	return kubeEnv.env
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
