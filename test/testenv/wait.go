package testenv

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/forge"
)

// WaitFor polls cond until it holds, failing the test after timeout: tests
// wait on the thing they need, never on a fixed sleep.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// Containers lists the ids of containers of the server instance at base
// matching the extra label filters ("key=value"); running only if asked.
func Containers(t testing.TB, base string, running bool, labels ...string) []string {
	t.Helper()
	args := []string{"ps", "-q", "--filter", "label=io.mcp-forge.instance=" + forge.Instance(base)}
	if !running {
		args = append(args, "-a")
	}
	for _, l := range labels {
		args = append(args, "--filter", "label="+l)
	}
	out, err := exec.Command("podman", args...).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}
