package sdktest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/jupyter"
)

// StartKernel runs a real kernel with the podman CLI (no forge core in
// between) and connects sdk/jupyter to it over ipc: the raw baseline for
// kernel tests and benchmarks. command receives the in-container path of the
// connection file. It needs FORGE_E2E=1, Podman and the image.
func StartKernel(t testing.TB, image string, command func(connFile string) []string) *jupyter.Client {
	t.Helper()
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("needs Podman and the sandbox images: set FORGE_E2E=1 (make test does)")
	}
	dir, err := os.MkdirTemp("/var/tmp", "jk-")
	if err != nil {
		t.Fatal(err)
	}
	conn := jupyter.NewConnection("/k/k")
	b, _ := json.Marshal(conn)
	os.WriteFile(filepath.Join(dir, "kernel.json"), b, 0o644)
	args := append([]string{"run", "-d", "--rm", "--init", "--network", "none", "--uidmap", "0:2147483647:65536", "--gidmap", "0:2147483647:65536", "-v", dir + ":/k:U", image}, command("/k/kernel.json")...)
	out, err := exec.Command("podman", args...).CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	stop := func() {
		exec.Command("podman", "rm", "-f", "-t", "0", id).Run()
		os.RemoveAll(dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := jupyter.Dial(ctx, conn, filepath.Join(dir, "k"))
	if err != nil {
		logs, _ := exec.Command("podman", "logs", id).CombinedOutput()
		stop()
		t.Fatalf("dial: %v\n%s", err, logs)
	}
	t.Cleanup(func() { c.Close(); stop() })
	return c
}

// IPyKernel is the command line of ipykernel in the forge Python image.
func IPyKernel(conn string) []string {
	return []string{"python3", "-m", "ipykernel_launcher", "-f", conn}
}

// IRKernel is the command line of IRkernel in the forge R image.
func IRKernel(conn string) []string {
	return []string{"R", "--slave", "--no-save", "--no-restore", "-e", "IRkernel::main()", "--args", conn}
}
