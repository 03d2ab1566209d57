package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// host.ExecRequest.Timeout is the core's to enforce, through the real host
// services and Podman: a command that finds no timeout(1) (PATH leads
// nowhere, so neither a wrapper nor a kill binary could be run) still ends
// at its deadline, TimedOut, and the children its shell started end with
// it (the whole process group); a command that ends in time is not marked.
func TestExecTimeoutNeedsNothingInTheImage(t *testing.T) {
	testenv.Require(t)
	core := testenv.NewCore(t, nil)
	h, _, _ := core.PluginHost(t, "exectimeout")
	sb := h.Sandbox()
	ctx := context.Background()
	c, err := sb.Create(ctx, host.Intent{Image: "mcp-forge/python:3.11", Command: []string{"/bin/sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background(), c.ID) })
	if err := sb.Start(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	nowhere := map[string]string{"PATH": "/nonexistent"}
	exec := func(script string, timeout time.Duration) (host.ExecResult, time.Duration) {
		t.Helper()
		start := time.Now()
		r, err := sb.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"/bin/sh", "-c", script}, Env: nowhere, Timeout: timeout})
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return r, time.Since(start)
	}
	// Found on main: the command ran inside `timeout`, which PATH hides.
	r, took := exec("/bin/sleep 120 & /bin/sleep 121; echo never", 2*time.Second)
	t.Logf("timed-out exec: exit %d, timed out %v, took %v, stderr %q", r.ExitCode, r.TimedOut, took, r.Stderr)
	if !r.TimedOut || took < 2*time.Second || took > 10*time.Second || strings.Contains(string(r.Stdout), "never") {
		t.Fatalf("want an exec ended at its 2 s deadline: %+v after %v", r, took)
	}
	// The background sleep was in the group: nothing of it is left.
	// (Every sleep's arguments, read with the shell's builtins; the
	// container's own command is the one sleeping 300.)
	left, _ := exec(`for p in /proc/[0-9]*; do read -r c < $p/comm 2>/dev/null && [ "$c" = sleep ] && echo $(/usr/bin/tr '\0' ' ' < $p/cmdline); done`, 0)
	sleeps := strings.Fields(strings.ReplaceAll(string(left.Stdout), "/bin/sleep", ""))
	if len(sleeps) != 1 || sleeps[0] != "300" {
		t.Fatalf("sleeps in the container: %q, want only the container's own (300): the timed-out exec's children are left", sleeps)
	}
	if r, _ := exec("echo quick", 10*time.Second); r.TimedOut || r.ExitCode != 0 || strings.TrimSpace(string(r.Stdout)) != "quick" {
		t.Fatalf("an exec that ends in time: %+v", r)
	}
}
