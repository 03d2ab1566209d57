package sdktest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// HostUnderTest is an implementation of the host services (host.Host)
// under RunHost: the core's (core/hostsvc, over a fake or a real runtime)
// or LocalHost on the machine. What an implementation legitimately lacks
// is declared here, and the subtests that need it say so when skipped.
//
// The commands the suite runs are those of runtimetest's tiny shell, which
// a real shell runs alike: sh -c with echo (also >&2), sleep, exit, true.
type HostUnderTest struct {
	Host host.Host
	// Image is an image Create accepts.
	Image string
	// Other is a second plugin's host over the same containers and
	// workspaces. Nil declares a host without plugin identities (LocalHost:
	// one process, whose containers anyone holding the id may touch).
	Other host.Host
	// Policy is what a confining host refuses; nil declares a host that
	// runs every intent as asked (LocalHost runs commands on the machine).
	Policy *HostPolicy
	// UnknownKind is how an operation on a container id the host never
	// made is refused: KindPolicy for the core (to the sandbox a container
	// not its own is a violation, whether or not it exists), KindNotFound
	// for LocalHost.
	UnknownKind host.Kind
	// WorkspaceOf is the host directory of a container's workspace, where
	// the suite plays the sandbox's part (listens on its sockets, plants
	// links); the plugin API has no such path.
	WorkspaceOf func(containerID string) string
}

// HostPolicy is what a confining host's security policy refuses.
type HostPolicy struct {
	DeniedImage string // an image the allowlist refuses
	OverMemory  string // a memory request above the maximum
}

// RunHost checks the contract of sdk/host that backends rely on: lifecycle,
// exit codes and logs, Wait and Exec timeouts, signals, Exec and its
// refusals, the workspace files (Intent.Files, PutFile, GetFile,
// ReadFiles) and their refusals, workspaces of sessions and of one-shot
// containers, audit records, and, as declared, confinement and ownership.
func RunHost(t *testing.T, s HostUnderTest) {
	sb := s.Host.Sandbox()
	ctx := context.Background()
	intent := func(cmd ...string) host.Intent {
		return host.Intent{Image: s.Image, Command: cmd, WorkDir: "/forge/work",
			Mounts: []host.Mount{{Subdir: "work", Target: "/forge/work"}}}
	}
	create := func(t *testing.T, in host.Intent) host.Container {
		t.Helper()
		c, err := sb.Create(ctx, in)
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		t.Cleanup(func() { sb.Remove(context.Background(), c.ID) })
		return c
	}
	start := func(t *testing.T, in host.Intent) host.Container {
		t.Helper()
		c := create(t, in)
		if err := sb.Start(ctx, c.ID); err != nil {
			t.Fatalf("Start: %v", err)
		}
		return c
	}
	wait := func(t *testing.T, id string) host.WaitResult {
		t.Helper()
		w, err := sb.Wait(ctx, id, time.Minute)
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		return w
	}
	stopped := func(t *testing.T, id string) host.State {
		t.Helper()
		st, err := sb.State(ctx, id)
		if err != nil || st.Running {
			t.Fatalf("State = %+v, %v; want ended", st, err)
		}
		return st
	}
	// wsOf is where the suite plays the sandbox's part on the host.
	wsOf := func(t *testing.T, id string) string {
		t.Helper()
		if s.WorkspaceOf == nil {
			t.Skip("declared: no WorkspaceOf, so the suite cannot look into workspaces")
		}
		return s.WorkspaceOf(id)
	}
	session := func() string {
		b := make([]byte, 4)
		rand.Read(b)
		return "contract-" + hex.EncodeToString(b)
	}

	t.Run("lifecycle, exit code and logs", func(t *testing.T) {
		t.Parallel()
		c := create(t, intent("sh", "-c", "echo out; echo err >&2; exit 3"))
		if c.ID == "" {
			t.Fatalf("Create = %+v; want an id", c)
		}
		if err := sb.Start(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
		if w := wait(t, c.ID); w.ExitCode != 3 || w.TimedOut || w.OOMKilled {
			t.Fatalf("Wait = %+v; want exit 3", w)
		}
		if st := stopped(t, c.ID); st.ExitCode != 3 || st.Message == "" {
			t.Errorf("State = %+v; want exit 3 and a message saying so", st)
		}
		out, err := sb.Logs(ctx, c.ID, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		want := host.Output{Stdout: []byte("out\n"), Stderr: []byte("err\n"), StdoutTotal: 4, StderrTotal: 4}
		if d := cmp.Diff(want, out); d != "" {
			t.Errorf("Logs (-want +got):\n%s", d)
		}
		out, err = sb.Logs(ctx, c.ID, 2)
		want = host.Output{Stdout: []byte("ou"), Stderr: []byte("er"), StdoutTotal: 4, StderrTotal: 4}
		if d := cmp.Diff(want, out); err != nil || d != "" {
			t.Errorf("Logs capped at 2 (-want +got):\n%s%v", d, err)
		}
	})
	t.Run("wait timeout is an outcome", func(t *testing.T) {
		t.Parallel()
		c := start(t, intent("sleep", "60"))
		if st, err := sb.State(ctx, c.ID); err != nil || !st.Running {
			t.Fatalf("State of a sleeping container = %+v, %v", st, err)
		}
		began := time.Now()
		w, err := sb.Wait(ctx, c.ID, 300*time.Millisecond)
		if err != nil || !w.TimedOut || w.Message == "" {
			t.Fatalf("Wait past its timeout = %+v, %v; want TimedOut with a message, no error", w, err)
		}
		if d := time.Since(began); d > 20*time.Second {
			t.Fatalf("Wait took %s for a 300ms timeout", d)
		}
		stopped(t, c.ID)
	})
	t.Run("signals", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			sig   host.Signal
			scope host.SignalScope
			code  int
		}{{"TERM", host.SignalInit, 143}, {"SIGINT", host.SignalInit, 130}, {"term", host.SignalAll, 143}} {
			c := start(t, intent("sleep", "60"))
			if err := sb.Signal(ctx, c.ID, tc.sig, tc.scope); err != nil {
				t.Fatalf("Signal %s (scope %d): %v", tc.sig, tc.scope, err)
			}
			if w := wait(t, c.ID); w.ExitCode != tc.code {
				t.Errorf("after %s (scope %d) the exit code is %d, want %d", tc.sig, tc.scope, w.ExitCode, tc.code)
			}
		}
		c := start(t, intent("sleep", "60"))
		for _, bad := range []host.Signal{"STOP", "", "9", "SEGV"} {
			if err := sb.Signal(ctx, c.ID, bad, host.SignalInit); kindOf(err) != host.KindInvalid {
				t.Errorf("Signal %q = %v; want an invalid-request refusal", bad, err)
			}
		}
		if st, err := sb.State(ctx, c.ID); err != nil || !st.Running {
			t.Fatalf("a refused signal ended the container: %+v, %v", st, err)
		}
		if err := sb.Stop(ctx, c.ID, time.Second); err != nil {
			t.Fatal(err)
		}
		sb.Wait(ctx, c.ID, time.Minute)
		stopped(t, c.ID)
	})
	t.Run("exec", func(t *testing.T) {
		t.Parallel()
		c := start(t, intent("sleep", "60"))
		var streamed [2]bytes.Buffer
		r, err := sb.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"sh", "-c", "echo hello; echo oops >&2; exit 4"}, MaxBytes: 3,
			Output: func(stream host.Stream, data []byte) {
				switch stream {
				case "stdout":
					streamed[0].Write(data)
				case "stderr":
					streamed[1].Write(data)
				default:
					t.Errorf("Output got stream %q", stream)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		want := host.ExecResult{ExitCode: 4, Output: host.Output{Stdout: []byte("hel"), Stderr: []byte("oop"), StdoutTotal: 6, StderrTotal: 5}}
		if d := cmp.Diff(want, r); d != "" {
			t.Errorf("Exec capped at 3 bytes (-want +got):\n%s", d)
		}
		if streamed[0].String() != "hello\n" || streamed[1].String() != "oops\n" {
			t.Errorf("Output saw %q and %q; want every byte of both streams", streamed[0].String(), streamed[1].String())
		}
		for name, req := range map[string]host.ExecRequest{
			"no command":         {},
			"a negative timeout": {Command: []string{"true"}, Timeout: -time.Second},
			"stdin over the cap": {Command: []string{"true"}, Stdin: make([]byte, host.MaxFileBytes+1)},
		} {
			if _, err := sb.Exec(ctx, c.ID, req); kindOf(err) != host.KindInvalid {
				t.Errorf("Exec with %s = %v; want an invalid-request refusal", name, err)
			}
		}
		if err := sb.Stop(ctx, c.ID, time.Second); err != nil {
			t.Fatal(err)
		}
		sb.Wait(ctx, c.ID, time.Minute)
		if _, err := sb.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"true"}}); err == nil {
			t.Error("Exec in a stopped container succeeded")
		}
	})
	t.Run("exec timeout is an outcome", func(t *testing.T) {
		t.Parallel()
		c := start(t, intent("sleep", "60"))
		began := time.Now()
		r, err := sb.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"sh", "-c", "echo started; sleep 60"}, Timeout: 300 * time.Millisecond})
		if err != nil || !r.TimedOut || string(r.Stdout) != "started\n" {
			t.Fatalf("Exec past its timeout = %+v, %v; want TimedOut with the output so far", r, err)
		}
		if d := time.Since(began); d > 20*time.Second {
			t.Fatalf("Exec took %s for a 300ms timeout", d)
		}
		if st, err := sb.State(ctx, c.ID); err != nil || !st.Running {
			t.Fatalf("the container ended with its exec's timeout: %+v, %v", st, err)
		}
		r, err = sb.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"sh", "-c", "echo quick"}, Timeout: time.Minute})
		if err != nil || r.TimedOut || r.ExitCode != 0 || string(r.Stdout) != "quick\n" {
			t.Fatalf("Exec within its timeout = %+v, %v", r, err)
		}
	})
	t.Run("files", func(t *testing.T) {
		t.Parallel()
		in := intent("sleep", "60")
		in.Files = map[string][]byte{"work/in.txt": []byte("given")}
		c := create(t, in)
		ws := wsOf(t, c.ID)
		get := func(path string, max int64) ([]byte, error) { return sb.GetFile(ctx, c.ID, path, max) }
		if got, err := get("work/in.txt", 100); err != nil || string(got) != "given" {
			t.Fatalf("GetFile of an intent's file = %q, %v", got, err)
		}
		if err := sb.PutFile(ctx, c.ID, "work/deep/er/out.txt", []byte("put")); err != nil {
			t.Fatal(err)
		}
		if err := sb.PutFile(ctx, c.ID, "work/deep/er/out.txt", []byte("again")); err != nil {
			t.Fatalf("PutFile over a file: %v", err)
		}
		if got, err := get("work/deep/er/out.txt", 100); err != nil || string(got) != "again" {
			t.Fatalf("GetFile = %q, %v; want what PutFile wrote last", got, err)
		}
		if data, err := os.ReadFile(filepath.Join(ws, "work", "deep", "er", "out.txt")); err != nil || string(data) != "again" {
			t.Fatalf("the file is not in the workspace on the host: %q, %v", data, err)
		}
		outside := filepath.Join(t.TempDir(), "outside")
		if err := os.WriteFile(outside, []byte("host"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(ws, "work", "link")); err != nil {
			t.Fatal(err)
		}
		refusals := []struct {
			name string
			err  error
			want host.Kind
		}{
			{"PutFile ../", sb.PutFile(ctx, c.ID, "../escape", []byte("x")), host.KindInvalid},
			{"PutFile of an absolute path", sb.PutFile(ctx, c.ID, "/tmp/abs", []byte("x")), host.KindInvalid},
			{"PutFile of an empty path", sb.PutFile(ctx, c.ID, "", []byte("x")), host.KindInvalid},
			{"PutFile over MaxFileBytes", sb.PutFile(ctx, c.ID, "work/big", make([]byte, host.MaxFileBytes+1)), host.KindInvalid},
			{"PutFile through a link", sb.PutFile(ctx, c.ID, "work/link", []byte("x")), host.KindPolicy},
			{"GetFile ../", second(get("../escape", 10)), host.KindInvalid},
			{"GetFile of a missing file", second(get("work/none", 10)), host.KindNotFound},
			{"GetFile over max", second(get("work/in.txt", 2)), host.KindInvalid},
			{"GetFile of a directory", second(get("work/deep", 10)), host.KindPolicy},
			{"GetFile through a link", second(get("work/link", 10)), host.KindPolicy},
		}
		for _, r := range refusals {
			if kindOf(r.err) != r.want {
				t.Errorf("%s = %v; want a %s refusal", r.name, r.err, r.want)
			}
		}
		if data, _ := os.ReadFile(outside); string(data) != "host" {
			t.Fatalf("a write through a link changed a file outside the workspace: %q", data)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(ws), "escape")); err == nil {
			t.Fatal("PutFile ../escape wrote beside the workspace")
		}
		sb.PutFile(ctx, c.ID, "work/out/a.txt", []byte("aaa"))
		sb.PutFile(ctx, c.ID, "work/out/big.bin", bytes.Repeat([]byte("b"), 100))
		files, err := sb.ReadFiles(ctx, c.ID, "work/out", 10, 1000)
		if err != nil {
			t.Fatal(err)
		}
		want := []host.File{{Name: "a.txt", Data: []byte("aaa"), Size: 3}, {Name: "big.bin", Size: 100, Skipped: true}}
		if d := cmp.Diff(want, files); d != "" {
			t.Errorf("ReadFiles with a 10-byte cap (-want +got):\n%s", d)
		}
		if files, err := sb.ReadFiles(ctx, c.ID, "work/none", 10, 1000); err != nil || len(files) != 0 {
			t.Errorf("ReadFiles of a missing directory = %v, %v; want none", files, err)
		}
	})
	t.Run("workspaces", func(t *testing.T) {
		t.Parallel()
		one := create(t, intent("true"))
		oneWS := wsOf(t, one.ID)
		if _, err := os.Stat(oneWS); err != nil {
			t.Fatalf("a one-shot container's workspace: %v", err)
		}
		if err := sb.Remove(ctx, one.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(oneWS); !os.IsNotExist(err) {
			t.Fatalf("a one-shot container's workspace outlived it: %v", err)
		}
		sid := session()
		in := intent("true")
		in.SessionID = sid
		c := create(t, in)
		cWS := wsOf(t, c.ID)
		if err := sb.PutFile(ctx, c.ID, "work/kept", []byte("k")); err != nil {
			t.Fatal(err)
		}
		if err := sb.RemoveWorkspace(ctx, sid); kindOf(err) != host.KindInvalid {
			t.Fatalf("RemoveWorkspace while a container uses it = %v; want an invalid-request refusal", err)
		}
		if err := sb.Remove(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
		again := create(t, in)
		if againWS := wsOf(t, again.ID); againWS != cWS {
			t.Fatalf("a session's second container has workspace %s, the first had %s", againWS, cWS)
		}
		if got, err := sb.GetFile(ctx, again.ID, "work/kept", 10); err != nil || string(got) != "k" {
			t.Fatalf("a session's files did not outlive its container: %q, %v", got, err)
		}
		sb.Remove(ctx, again.ID)
		if err := sb.RemoveWorkspace(ctx, sid); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(cWS); !os.IsNotExist(err) {
			t.Fatalf("RemoveWorkspace left the directory: %v", err)
		}
		if err := sb.RemoveWorkspace(ctx, sid); kindOf(err) != host.KindNotFound {
			t.Fatalf("RemoveWorkspace of a removed workspace = %v; want not-found", err)
		}
		for _, bad := range []string{"../up", "a/b", ".hidden", strings.Repeat("x", 129)} {
			bi := intent("true")
			bi.SessionID = bad
			if c, err := sb.Create(ctx, bi); kindOf(err) != host.KindInvalid {
				if err == nil {
					sb.Remove(ctx, c.ID)
				}
				t.Errorf("Create with session id %q = %v; want an invalid-request refusal", bad, err)
			}
		}
	})
	t.Run("removed and unknown containers", func(t *testing.T) {
		t.Parallel()
		c := create(t, intent("true"))
		if err := sb.Remove(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
		if err := sb.Remove(ctx, c.ID); err != nil {
			t.Errorf("Remove of a removed container = %v; it is removed, which is what was asked", err)
		}
		if err := sb.Start(ctx, c.ID); err == nil {
			t.Error("Start of a removed container succeeded")
		}
		if _, err := sb.GetFile(ctx, c.ID, "x", 1); kindOf(err) != host.KindNotFound {
			t.Errorf("GetFile in a removed container = %v; want not-found", err)
		}
		unknown := strings.Repeat("ab", 32)
		for name, err := range map[string]error{
			"Start":  sb.Start(ctx, unknown),
			"Remove": sb.Remove(ctx, unknown),
			"Stop":   sb.Stop(ctx, unknown, 0),
			"Signal": sb.Signal(ctx, unknown, "TERM", host.SignalInit),
			"State":  second(sb.State(ctx, unknown)),
			"Logs":   second(sb.Logs(ctx, unknown, 10)),
			"Exec":   second(sb.Exec(ctx, unknown, host.ExecRequest{Command: []string{"true"}})),
		} {
			if kindOf(err) != s.UnknownKind {
				t.Errorf("%s of a container the host never made = %v; want a %s refusal", name, err, s.UnknownKind)
			}
		}
		for name, err := range map[string]error{
			"PutFile":   sb.PutFile(ctx, unknown, "x", nil),
			"GetFile":   second(sb.GetFile(ctx, unknown, "x", 1)),
			"ReadFiles": second(sb.ReadFiles(ctx, unknown, "", 1, 1)),
		} {
			if kindOf(err) != host.KindNotFound {
				t.Errorf("%s in a container the host never made = %v; want not-found", name, err)
			}
		}
	})
	t.Run("audit", func(t *testing.T) {
		t.Parallel()
		err := s.Host.Audit().Record(ctx, host.Event{Event: "contract.check", Severity: "info", Success: true, Details: map[string]any{"k": "v"}})
		if err != nil {
			t.Fatalf("Record: %v", err)
		}
	})
	t.Run("confinement", func(t *testing.T) {
		t.Parallel()
		if s.Policy == nil {
			t.Skip("declared: this host confines nothing (HostUnderTest.Policy is nil)")
		}
		for _, tc := range []struct {
			name   string
			change func(*host.Intent)
			want   host.Kind
		}{
			{"an image the allowlist refuses", func(in *host.Intent) { in.Image = s.Policy.DeniedImage }, host.KindPolicy},
			{"memory over the maximum", func(in *host.Intent) { in.Memory = s.Policy.OverMemory }, host.KindInvalid},
			{"a mount over a system directory", func(in *host.Intent) { in.Mounts = []host.Mount{{Subdir: "etc", Target: "/etc"}} }, host.KindPolicy},
			{"a mount leaving the workspace", func(in *host.Intent) { in.Mounts = []host.Mount{{Subdir: "../..", Target: "/forge/up"}} }, host.KindInvalid},
			{"a file leaving the workspace", func(in *host.Intent) { in.Files = map[string][]byte{"../x": nil} }, host.KindInvalid},
		} {
			in := intent("true")
			tc.change(&in)
			c, err := sb.Create(ctx, in)
			if kindOf(err) != tc.want {
				if err == nil {
					sb.Remove(ctx, c.ID)
				}
				t.Errorf("Create with %s = %v; want a %s refusal", tc.name, err, tc.want)
			}
		}
	})
	t.Run("dial", func(t *testing.T) {
		t.Parallel()
		runDial(t, s, start)
	})
	t.Run("ownership", func(t *testing.T) {
		t.Parallel()
		if s.Other == nil {
			t.Skip("declared: this host has no plugin identities (HostUnderTest.Other is nil)")
		}
		other := s.Other.Sandbox()
		sid := session()
		in := intent("sleep", "60")
		in.SessionID = sid
		c := start(t, in)
		sb.PutFile(ctx, c.ID, "work/mine", []byte("m"))
		for name, err := range map[string]error{
			"Start":  other.Start(ctx, c.ID),
			"Wait":   second(other.Wait(ctx, c.ID, time.Millisecond)),
			"State":  second(other.State(ctx, c.ID)),
			"Logs":   second(other.Logs(ctx, c.ID, 10)),
			"Exec":   second(other.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"true"}})),
			"Signal": other.Signal(ctx, c.ID, "KILL", host.SignalInit),
			"Stop":   other.Stop(ctx, c.ID, 0),
			"Remove": other.Remove(ctx, c.ID),
		} {
			if kindOf(err) != host.KindPolicy {
				t.Errorf("another plugin's %s = %v; want a policy refusal", name, err)
			}
		}
		for name, err := range map[string]error{
			"PutFile":         other.PutFile(ctx, c.ID, "work/theirs", []byte("t")),
			"GetFile":         second(other.GetFile(ctx, c.ID, "work/mine", 10)),
			"ReadFiles":       second(other.ReadFiles(ctx, c.ID, "work", 10, 10)),
			"RemoveWorkspace": other.RemoveWorkspace(ctx, sid),
		} {
			if kindOf(err) != host.KindNotFound {
				t.Errorf("another plugin's %s = %v; want not-found", name, err)
			}
		}
		if st, err := sb.State(ctx, c.ID); err != nil || !st.Running {
			t.Fatalf("another plugin's refused calls ended the container: %+v, %v", st, err)
		}
		if got, err := sb.GetFile(ctx, c.ID, "work/mine", 10); err != nil || string(got) != "m" {
			t.Fatalf("the owner's file after another plugin's calls: %q, %v", got, err)
		}
		if _, err := os.Stat(filepath.Join(wsOf(t, c.ID), "work", "theirs")); err == nil {
			t.Fatal("another plugin wrote into the workspace")
		}
		sb.Remove(ctx, c.ID)
		if err := sb.RemoveWorkspace(ctx, sid); err != nil {
			t.Fatal(err)
		}
	})
}

func second[T any](_ T, err error) error { return err }

// kindOf is the host.Error kind of err, "" for nil or another error.
func kindOf(err error) host.Kind {
	var he *host.Error
	if errors.As(err, &he) {
		return he.Kind
	}
	if err != nil {
		return "(not a host.Error)"
	}
	return ""
}
