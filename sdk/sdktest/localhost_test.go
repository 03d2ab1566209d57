package sdktest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

func startLocal(t *testing.T, in host.Intent) (*LocalHost, string) {
	t.Helper()
	h := NewLocalHost(t.TempDir())
	c, err := h.Create(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background(), c.ID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Remove(context.Background(), c.ID) })
	return h, c.ID
}

// A timeout ends the whole process group: a shell's child sleeping 60 s
// must not hold Wait (it did when only the first process was killed).
func TestLocalHostTimeoutKillsGroup(t *testing.T) {
	h, id := startLocal(t, host.Intent{Command: []string{"sh", "-c", "sleep 60 & sleep 60; wait"}})
	start := time.Now()
	w, err := h.Wait(context.Background(), id, 500*time.Millisecond)
	if err != nil || !w.TimedOut {
		t.Fatalf("%+v %v", w, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("wait took %s after a 500ms timeout", d)
	}
	start = time.Now()
	h2, id2 := startLocal(t, host.Intent{Command: []string{"sleep", "60"}})
	r, err := h2.Exec(context.Background(), id2, host.ExecRequest{Command: []string{"sh", "-c", "sleep 60 & sleep 60; wait"}, Timeout: 500 * time.Millisecond})
	if err != nil || !r.TimedOut {
		t.Fatalf("exec: %+v %v", r, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("exec took %s after a 500ms timeout", d)
	}
}

// The host's environment stays out; the intent's Env and WorkDir apply to
// the command and to Exec; only whole-path arguments are rewritten.
func TestLocalHostEnvWorkdirRewrite(t *testing.T) {
	t.Setenv("SDKTEST_HOST_SECRET", "leak")
	h, id := startLocal(t, host.Intent{Command: []string{"sleep", "60"}, Env: map[string]string{"GREETING": "hi"},
		WorkDir: "/forge/work", Mounts: []host.Mount{{Subdir: "work", Target: "/forge/work"}}})
	r, err := h.Exec(context.Background(), id, host.ExecRequest{
		Command: []string{"sh", "-c", "echo $SDKTEST_HOST_SECRET/$GREETING/$EXTRA; pwd; echo '/forge/work/x'", "/forge/work/y"},
		Env:     map[string]string{"EXTRA": "more"}, MaxBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(r.Stdout)), "\n")
	if len(lines) != 3 || lines[0] != "/hi/more" || filepath.Base(lines[1]) != "work" || lines[2] != "/forge/work/x" {
		t.Fatalf("got %q", r.Stdout)
	}
	var chunks []string
	r, err = h.Exec(context.Background(), id, host.ExecRequest{Command: []string{"cat"}, Stdin: []byte("fed"), MaxBytes: 2,
		Output: func(stream host.Stream, data []byte) { chunks = append(chunks, string(stream)+":"+string(data)) }})
	if err != nil || string(r.Stdout) != "fe" || r.StdoutTotal != 3 || strings.Join(chunks, "") != "stdout:fed" {
		t.Fatalf("stdin/stream/cap: %+v %q %v", r, chunks, err)
	}
}

func TestLocalHostFilesAndWorkspace(t *testing.T) {
	ctx := context.Background()
	h := NewLocalHost(t.TempDir())
	c, err := h.Create(ctx, host.Intent{Command: []string{"sleep", "60"}, SessionID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.PutFile(ctx, c.ID, "a/b.txt", []byte("data")); err != nil {
		t.Fatal(err)
	}
	if got, err := h.GetFile(ctx, c.ID, "a/b.txt", 10); err != nil || string(got) != "data" {
		t.Fatalf("%q %v", got, err)
	}
	if _, err := h.GetFile(ctx, c.ID, "../x", 10); err == nil {
		t.Fatal("a path leaving the workspace was accepted")
	}
	if err := h.RemoveWorkspace(ctx, "s1"); err == nil {
		t.Fatal("a workspace in use was removed")
	}
	h.Remove(ctx, c.ID)
	if err := h.RemoveWorkspace(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(h.Base); len(entries) != 0 {
		t.Fatalf("left: %v", entries)
	}
}
