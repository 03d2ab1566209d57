package e2e

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// procs lists the container's command lines (the image has no ps).
const procs = `for p in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $p; echo; done 2>/dev/null `

func startSleeper(t *testing.T, session string, cmd ...string) (host.Sandbox, host.Container, string) {
	t.Helper()
	core := testenv.NewCore(t, nil)
	h, root, _ := core.PluginHost(t, "hosttest")
	sb := h.Sandbox()
	ctx := context.Background()
	if len(cmd) == 0 {
		cmd = []string{"sleep", "300"}
	}
	c, err := sb.Create(ctx, host.Intent{Image: "mcp-forge/python:3.11", Command: cmd, SessionID: session,
		Timeout: 10 * time.Minute, Env: map[string]string{"BASE": "b"}, WorkDir: "/w", Mounts: []host.Mount{{Target: "/w"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background(), c.ID) })
	if err := sb.Start(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	return sb, c, root
}

// Exec takes stdin, environment, working directory and a timeout that
// ends the whole process group, and streams output while it runs.
func TestHostExec(t *testing.T) {
	testenv.Require(t)
	sb, c, _ := startSleeper(t, "")
	ctx := context.Background()
	var mu sync.Mutex
	var chunks []string
	r, err := sb.Exec(ctx, c.ID, host.ExecRequest{
		Command: []string{"sh", "-c", `cat; echo " $BASE$EXTRA $(pwd)"; echo err >&2`},
		Stdin:   []byte("fed"), Env: map[string]string{"EXTRA": "x"}, WorkDir: "/tmp", MaxBytes: 1 << 10,
		Output: func(stream host.Stream, p []byte) {
			mu.Lock()
			chunks = append(chunks, string(stream)+":"+string(p))
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Stdout) != "fed bx /tmp\n" || string(r.Stderr) != "err\n" || r.ExitCode != 0 || r.TimedOut {
		t.Fatalf("%+v", r)
	}
	all := strings.Join(chunks, "|")
	if !strings.Contains(all, "stdout:") || !strings.Contains(all, "stderr:err") {
		t.Fatalf("streamed %q", all)
	}
	// A shell whose child sleeps: the timeout must end both, promptly.
	start := time.Now()
	r, err = sb.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"sh", "-c", "sleep 60 & sleep 60; wait"}, Timeout: time.Second})
	if err != nil || !r.TimedOut {
		t.Fatalf("timeout: %+v %v", r, err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("a 1 s exec timeout took %s", d)
	}
	ps, err := sb.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"sh", "-c", procs + "| grep -c '^sleep 60' || true"}, MaxBytes: 100})
	if err != nil || strings.TrimSpace(string(ps.Stdout)) != "0" {
		t.Fatalf("processes left after the timeout: %q %v", ps.Stdout, err)
	}
}

// SignalAll reaches the program a shell waits for; the init scope reaches
// only the shell (through catatonit), which runs its trap only once that
// program ends.
func TestHostSignalAll(t *testing.T) {
	testenv.Require(t)
	sb, c, _ := startSleeper(t, "", "sh", "-c", "trap 'echo interrupted > /w/flag' INT; sleep 300; sleep 300")
	ctx := context.Background()
	flagAfter := func(d time.Duration) bool {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if b, err := sb.GetFile(ctx, c.ID, "flag", 100); err == nil && string(b) == "interrupted\n" {
				return true
			}
		}
		return false
	}
	// Wait until the shell is in its first sleep.
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, err := sb.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"sh", "-c", procs + "| grep -c '^sleep 300' || true"}, MaxBytes: 100})
		if err == nil && strings.TrimSpace(string(r.Stdout)) == "1" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the shell never started sleeping: %+v %v", r, err)
		}
	}
	if err := sb.Signal(ctx, c.ID, "INT", host.SignalInit); err != nil {
		t.Fatal(err)
	}
	if flagAfter(2 * time.Second) {
		t.Fatal("an init-scoped INT reached the shell's child")
	}
	if err := sb.Signal(ctx, c.ID, "INT", host.SignalAll); err != nil {
		t.Fatal(err)
	}
	if !flagAfter(15 * time.Second) {
		t.Fatal("SignalAll INT did not interrupt the shell's child")
	}
}

// Files go in and out of a running container's workspace; links planted by
// the sandboxed code are never followed; a session workspace can be removed
// by the plugin once its container is gone, and then nothing is left.
func TestHostFiles(t *testing.T) {
	testenv.Require(t)
	sb, c, root := startSleeper(t, "files1")
	ctx := context.Background()
	if err := sb.PutFile(ctx, c.ID, "sub/in.txt", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	r, err := sb.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"sh", "-c", "cat sub/in.txt; echo more >> sub/in.txt; echo out > out.txt; ln -s /etc/passwd link; ln -s /etc ldir"}, MaxBytes: 100})
	if err != nil || string(r.Stdout) != "hello" || r.ExitCode != 0 {
		t.Fatalf("the container cannot read or change a put file: %+v %v", r, err)
	}
	if got, err := sb.GetFile(ctx, c.ID, "out.txt", 100); err != nil || string(got) != "out\n" {
		t.Fatalf("get: %q %v", got, err)
	}
	var he *host.Error
	for _, p := range []string{"link", "ldir/passwd", "../x", "/etc/passwd"} {
		if _, err := sb.GetFile(ctx, c.ID, p, 100); !errors.As(err, &he) || he.Kind == host.KindInternal {
			t.Errorf("get %s: want a refusal, got %v", p, err)
		}
		if err := sb.PutFile(ctx, c.ID, p, []byte("x")); err == nil {
			t.Errorf("put %s was accepted", p)
		}
	}
	if _, err := sb.GetFile(ctx, c.ID, "out.txt", 2); err == nil {
		t.Error("a file over the cap was returned")
	}
	if err := sb.PutFile(ctx, c.ID, "big", make([]byte, host.MaxFileBytes+1)); !errors.As(err, &he) || he.Kind != host.KindInvalid {
		t.Errorf("a file over MaxFileBytes: want an invalid-request error, got %v", err)
	}
	if err := sb.RemoveWorkspace(ctx, "files1"); err == nil {
		t.Fatal("a workspace in use was removed")
	}
	if err := sb.Remove(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if err := sb.RemoveWorkspace(ctx, "files1"); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("left under %s: %v", root, entries)
	}
	if err := sb.RemoveWorkspace(ctx, "other"); err == nil {
		t.Fatal("removed a workspace this plugin never made")
	}
}
