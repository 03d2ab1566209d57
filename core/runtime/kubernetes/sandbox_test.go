package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podspec"
)

// runningPod is a pod whose sandbox container runs command under the pod's
// init script, started as the kubelet would once the workspace is in.
func (cl *cluster) runningPod(t *testing.T, command ...string) string {
	t.Helper()
	s := specIn(hostWorkspace(t))
	s.Command = command
	ctx := context.Background()
	id, err := cl.c.Create(ctx, s)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	cl.status(id, seedRunning)
	start := async(func() error { return cl.c.Start(ctx, id) })
	waitFor(t, "the workspace sent", 10*time.Second, func() bool { return cl.attaches(id) == 1 })
	cl.startSandbox(id)
	if err := returned(t, "Start", 10*time.Second, start); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return id
}

// ready waits for the sandbox's command to print line on stdout (its init
// writes it to the run directory).
func (cl *cluster) ready(t *testing.T, id, line string) {
	t.Helper()
	waitFor(t, "the command says "+line, 10*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(cl.root(id), podspec.RunDir, "stdout"))
		return bytes.Contains(b, []byte(line))
	})
}

// The sandbox's init script, run as the pod's command: the command's exit
// code is the container's, its two streams are kept apart and counted,
// its environment is the spec's without the API server's address.
func TestSandboxInit(t *testing.T) {
	cl := newCluster(t, testKube())
	ctx := context.Background()
	big := int64(5 << 20) // over the init's 4 MiB cap (podspec.MaxLog)
	const missing = "exec no-such-command: No such file or directory\n"
	cases := []struct {
		name           string
		command        []string
		code           int
		max            int64
		stdout, stderr string // prefixes
		outTotal       int64
		errTotal       int64
		check          func(t *testing.T, id string, out runtime.Output)
	}{
		{"exit code, streams apart", []string{"sh", "-c", "printf out; printf err >&2; printf more; exit 3"}, 3, 1 << 20, "outmore", "err", 7, 3, nil},
		{"killed by a signal", []string{"sh", "-c", "printf bye; kill -TERM $$"}, 143, 1 << 20, "bye", "", 3, 0, nil},
		{"missing command", []string{"no-such-command"}, 127, 1 << 20, "", missing, 0, int64(len(missing)), nil},
		{"working directory", []string{"pwd"}, 0, 1 << 20, "", "", 0, 0, func(t *testing.T, id string, out runtime.Output) {
			if !strings.HasSuffix(strings.TrimSpace(string(out.Stdout)), "/forge/ws/out") {
				t.Errorf("ran in %q; want the spec's /work, the workspace's out directory", out.Stdout)
			}
		}},
		{"environment", []string{"env"}, 0, 1 << 20, "", "", 0, 0, func(t *testing.T, id string, out runtime.Output) {
			env := "\n" + string(out.Stdout)
			for _, want := range []string{"\nMPLBACKEND=Agg\n", "\nHOSTNAME=" + id + "\n"} {
				if !strings.Contains(env, want) {
					t.Errorf("the spec's %q is not in the command's environment:%s", strings.TrimSpace(want), env)
				}
			}
			for _, gone := range []string{"\nKUBERNETES_", "\nFORGE_LOG_MAX="} {
				if strings.Contains(env, gone) {
					t.Errorf("%s... reached the command:%s", strings.TrimSpace(gone), env)
				}
			}
		}},
		// /proc/1/environ is what PID 1 was started with, whatever it
		// deleted from its own environment since: the sandbox reads it.
		{"the init's own environment", []string{"sh", "-c", `tr '\0' '\n' < /proc/$PPID/environ; echo; tr '\0' ' ' < /proc/$PPID/cmdline`}, 0, 1 << 20, "", "", 0, 0, func(t *testing.T, id string, out runtime.Output) {
			env, cmdline, _ := strings.Cut(string(out.Stdout), "\n\n")
			if strings.Contains("\n"+env, "\nKUBERNETES_") || !strings.Contains(env, "MPLBACKEND=Agg") {
				t.Errorf("the init's environment holds the API server's address, or lost the spec's:\n%s", env)
			}
			if !strings.HasSuffix(strings.TrimSpace(cmdline), "-- sh -c "+`tr '\0' '\n' < /proc/$PPID/environ; echo; tr '\0' ' ' < /proc/$PPID/cmdline`) {
				t.Errorf("the init executed itself again with other arguments: %q", cmdline)
			}
		}},
		{"output over the cap", []string{"sh", "-c", "head -c 5242880 /dev/zero; printf e >&2"}, 0, 1 << 20, "\x00\x00", "e", big, 1, func(t *testing.T, id string, out runtime.Output) {
			if int64(len(out.Stdout)) != 1<<20 {
				t.Errorf("Logs(1 MiB) returned %d bytes", len(out.Stdout))
			}
			fi, err := os.Stat(filepath.Join(cl.root(id), podspec.RunDir, "stdout"))
			if err != nil || fi.Size() != podspec.MaxLog {
				t.Errorf("the init kept %v bytes (%v); want its cap %d", fi.Size(), err, podspec.MaxLog)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := cl.runningPod(t, tc.command...)
			code, err := cl.c.Wait(ctx, id, 20*time.Second)
			if err != nil || code != tc.code {
				t.Fatalf("Wait: %d, %v; want %d", code, err, tc.code)
			}
			if v, err := cl.c.OOMKilled(ctx, id); err != nil || v != runtime.NoOOMKill {
				t.Errorf("OOMKilled: %v, %v; want no OOM kill", v, err)
			}
			out, err := cl.c.Logs(ctx, id, tc.max)
			if err != nil {
				t.Fatalf("Logs: %v", err)
			}
			if !bytes.HasPrefix(out.Stdout, []byte(tc.stdout)) || !bytes.HasPrefix(out.Stderr, []byte(tc.stderr)) {
				t.Errorf("Logs: stdout %.60q stderr %.60q; want them to begin %q and %q", out.Stdout, out.Stderr, tc.stdout, tc.stderr)
			}
			if tc.outTotal+tc.errTotal > 0 && (out.StdoutTotal != tc.outTotal || out.StderrTotal != tc.errTotal) {
				t.Errorf("totals %d %d; want %d %d", out.StdoutTotal, out.StderrTotal, tc.outTotal, tc.errTotal)
			}
			if tc.check != nil {
				tc.check(t, id, out)
			}
		})
	}
}

// Signal reaches the command through the init; Stop ends a command that
// ignores SIGTERM with SIGKILL past its grace; Wait past its timeout
// kills the command and the init reports it (137), the pod stays.
func TestSandboxSignals(t *testing.T) {
	cl := newCluster(t, testKube())
	ctx := context.Background()

	t.Run("signal forwarded", func(t *testing.T) {
		id := cl.runningPod(t, "sh", "-c", `trap 'echo got TERM; exit 5' TERM; echo ready; while :; do sleep 0.05; done`)
		cl.ready(t, id, "ready")
		if err := cl.c.Signal(ctx, id, "TERM"); err != nil {
			t.Fatalf("Signal: %v", err)
		}
		if code, err := cl.c.Wait(ctx, id, 10*time.Second); err != nil || code != 5 {
			t.Errorf("Wait after SIGTERM: %d, %v; want the trap's 5", code, err)
		}
		if out, _ := cl.c.Logs(ctx, id, 100); !strings.Contains(string(out.Stdout), "got TERM") {
			t.Errorf("the command's trap did not run: %q", out.Stdout)
		}
	})
	t.Run("stop past grace", func(t *testing.T) {
		id := cl.runningPod(t, "sh", "-c", `trap '' TERM; echo ready; sleep 60`)
		cl.ready(t, id, "ready")
		t0 := time.Now()
		if err := cl.c.Stop(ctx, id, 500*time.Millisecond); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if code, err := cl.c.Wait(ctx, id, 10*time.Second); err != nil || code != 137 {
			t.Errorf("Wait after Stop: %d, %v; want 137 (SIGKILL)", code, err)
		}
		if d := time.Since(t0); d < 500*time.Millisecond || d > 5*time.Second {
			t.Errorf("Stop with 500ms grace of a command ignoring SIGTERM took %s", d)
		}
	})
	t.Run("wait timeout", func(t *testing.T) {
		id := cl.runningPod(t, "sleep", "60")
		if _, err := cl.c.Wait(ctx, id, 300*time.Millisecond); !errors.Is(err, runtime.ErrTimeout) {
			t.Fatalf("Wait: %v; want ErrTimeout", err)
		}
		// The kill ended the command; its init exits as it did.
		waitFor(t, "the sandbox ends", 10*time.Second, func() bool { run, _, _ := cl.c.State(ctx, id); return !run })
		if run, code, err := cl.c.State(ctx, id); err != nil || run || code != 137 {
			t.Errorf("State after the timeout's kill: %v, %d, %v; want ended 137", run, code, err)
		}
		if _, err := cl.c.ReadFile(ctx, id, "a.txt", 100); err != nil {
			t.Errorf("the workspace after the timeout: %v; want it still readable", err)
		}
		// Stopping what ended sends nothing.
		n := len(cl.served())
		if err := cl.c.Stop(ctx, id, time.Second); err != nil || len(cl.served()) != n {
			t.Errorf("Stop of an ended sandbox: %v, sent %+v; want nil and nothing sent", err, cl.served()[n:])
		}
	})
}
