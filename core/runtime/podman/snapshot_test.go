package podman

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
	"github.com/mcp-forge/mcp-forge/core/seccomp"
)

// The wrapper restores a marked container on `start`, once, and passes
// every other call through; an id that is not hex is never a path.
func TestWrapperRestoresMarkedStart(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "runsc")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	marks := filepath.Join(dir, "marks")
	w, err := writeWrapper(dir, fake, []string{"--root=/r"}, marks)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(marks, 0o700)
	os.WriteFile(filepath.Join(marks, "abc123"), []byte("/snap/one"), 0o600)
	os.WriteFile(filepath.Join(marks, "abc124"), []byte("/snap/two"), 0o600)
	run := func(args ...string) string {
		out, err := exec.Command(w, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"start", "abc123"}, "--root=/r restore --detach --image-path=/snap/one abc123"},
		{[]string{"start", "abc123"}, "--root=/r start abc123"}, // the mark is used once
		{[]string{"start", "../marks/x"}, "--root=/r start ../marks/x"},
		{[]string{"kill", "abc123", "15"}, "--root=/r kill abc123 15"},
		// Podman puts its runtime flags first: they go to the restore too.
		{[]string{"--systemd-cgroup", "start", "abc124"}, "--root=/r --systemd-cgroup restore --detach --image-path=/snap/two abc124"},
	} {
		if got := run(c.args...); got != c.want {
			t.Errorf("%v: ran %q, want %q", c.args, got, c.want)
		}
	}
}

// A gVisor sandbox saved whole (Snapshot) and restored into a new Podman
// container (RestoreOnStart) holds what its process held in memory, its
// listening socket in the Sentry answers through the agent's relay
// (DialSocket), and the two diverge from then on; the restored one is an
// ordinary container (exec, stop, remove).
func TestGVisorSnapshotRestore(t *testing.T) {
	if os.Getenv("FORGE_E2E") != "1" || os.Getenv("FORGE_TEST_ISOLATION") != "gvisor" {
		t.Skip("a gVisor end-to-end test: make test's gVisor leg runs it (FORGE_E2E=1 FORGE_TEST_ISOLATION=gvisor; needs Podman, runsc and the mcp-forge/python:3.11 image)")
	}
	const runsc = "/usr/local/lib/mcp-forge/runsc"
	agentBin, _ := filepath.Abs(filepath.Join("..", "..", "..", "bin", agent.Binary))
	if _, err := os.Stat(agentBin); err != nil {
		t.Skipf("%s is not built (make build)", agentBin)
	}
	base := t.TempDir()
	os.Chmod(base, 0o755)
	c := New("").WithAgent(agentBin).WithGVisor(runsc, base, "/run/mcp-forge/runsc", "none")
	if _, err := seccomp.Install(base); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const image = "mcp-forge/python:3.11"
	im, ok, err := c.Image(ctx, image)
	if err != nil || !ok {
		t.Fatalf("image %s: %v (make setup builds it)", image, err)
	}
	server := `import secrets, socket
tok, n = secrets.token_hex(8), 0
s = socket.socket(socket.AF_UNIX); s.bind("/work/s"); s.listen(4)
while True:
    c, _ = s.accept(); n += 1; c.sendall(("%s %d\n" % (tok, n)).encode()); c.close()
`
	spec := func(ws string) runtime.Spec {
		return runtime.Spec{
			Image: image, ImageID: im.ID, SeccompProfile: seccomp.GVisorPath(base), Command: []string{"python3", "-c", server},
			Labels: map[string]string{"io.mcp-forge.test": "snapshot"}, User: "1000:1000", Network: "none", Isolation: runtime.IsolationGVisor,
			ReadOnlyRoot: true, TmpfsSize: 1 << 20, NoNewPrivileges: true, CapDrop: []string{"ALL"}, Init: true,
			Mounts: []runtime.Mount{{Source: ws, Target: "/work"}},
			Limits: runtime.Limits{MemoryBytes: 256 << 20, CPUQuota: 100000, Pids: 64, NoFile: 256, Timeout: 4 * time.Minute},
		}
	}
	workspace := func(name string) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o777)
		return d
	}
	start := func(ws string, snapshot string) string {
		id, err := c.Create(ctx, spec(ws))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Remove(context.Background(), id) })
		if snapshot != "" {
			if err := c.RestoreOnStart(id, snapshot); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	ask := func(id string) (tok, n string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			conn, err := c.DialSocket(ctx, id, "/work/s")
			if err != nil {
				if time.Now().Before(deadline) {
					continue
				}
				t.Fatalf("dial /work/s in %s: %v", shortID(id), err)
			}
			line, err := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			f := strings.Fields(line)
			if err != nil || len(f) != 2 {
				t.Fatalf("answer %q: %v", line, err)
			}
			return f[0], f[1]
		}
	}
	first := start(workspace("first"), "")
	tok, n := ask(first)
	if n != "1" {
		t.Fatalf("first answer %s %s", tok, n)
	}
	if entries, _ := os.ReadDir(filepath.Join(base, "first")); len(entries) != 0 {
		t.Errorf("the sandbox's socket is on the host: %v", entries)
	}
	snap := filepath.Join(base, "snap")
	os.Mkdir(snap, 0o700)
	t0 := time.Now()
	if err := c.Snapshot(ctx, first, snap, false); err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot in %s", time.Since(t0))
	if tok2, n2 := ask(first); tok2 != tok || n2 != "2" {
		t.Fatalf("the original after its snapshot answered %s %s, want %s 2", tok2, n2, tok)
	}
	t0 = time.Now()
	restored := start(workspace("second"), snap)
	if tok3, n3 := ask(restored); tok3 != tok || n3 != "2" {
		t.Fatalf("the restored sandbox answered %s %s, want %s 2 (its memory as saved)", tok3, n3, tok)
	}
	t.Logf("restore to first answer in %s", time.Since(t0))
	if _, n4 := ask(first); n4 != "3" {
		t.Errorf("the original answered %s after the restore, want 3", n4)
	}
	if _, n5 := ask(restored); n5 != "3" {
		t.Errorf("the restored answered %s, want 3", n5)
	}
	res, err := c.Exec(ctx, restored, runtime.ExecRequest{Command: []string{"cat", "/proc/version"}, Max: 4096})
	if err != nil || !strings.Contains(string(res.Output.Stdout), "gvisor") {
		t.Errorf("exec in the restored sandbox: %+v %v", res, err)
	}
	if err := c.Stop(ctx, restored, time.Second); err != nil {
		t.Errorf("stop the restored sandbox: %v", err)
	}
	if err := c.Remove(ctx, restored); err != nil {
		t.Errorf("remove the restored sandbox: %v", err)
	}
	// A second start of a container made afresh without a mark runs the
	// command: the mark was used once.
	fresh := start(workspace("third"), "")
	if tok6, n6 := ask(fresh); tok6 == tok || n6 != "1" {
		t.Errorf("a container without a mark answered %s %s: want a new process", tok6, n6)
	}
}
