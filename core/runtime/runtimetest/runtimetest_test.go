package runtimetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

func fakeSubject() (*Runtime, Subject) {
	rt := New(runtime.ImageInfo{Names: []string{"mcp-forge/python:3.11"}})
	return rt, Subject{
		Runtime: rt,
		Spec: func(labels map[string]string, cmd ...string) runtime.Spec {
			return runtime.Spec{Image: "mcp-forge/python:3.11", ImageID: "sha256:" + strings.Repeat("0", 63) + "1", SeccompProfile: "/fake/seccomp.json", Command: cmd, Labels: labels}
		},
		MissingImage: "mcp-forge/none:0",
		Lack:         rt.Lack,
	}
}

func TestFakePassesTheContract(t *testing.T) {
	_, s := fakeSubject()
	RunContract(t, s)
}

// An image looked up by the name it was added as reports its qualified
// names, as Podman does: the policy compares those with the allowlist.
func TestImageNamesAreQualified(t *testing.T) {
	t.Parallel()
	rt := New(runtime.ImageInfo{Names: []string{"mcp-forge/python:3.11", "quay.io/x/y:1"}})
	want := []string{"localhost/mcp-forge/python:3.11", "quay.io/x/y:1"}
	for _, name := range []string{"mcp-forge/python:3.11", "localhost/mcp-forge/python:3.11", "quay.io/x/y:1"} {
		im, ok, err := rt.Image(context.Background(), name)
		if err != nil || !ok || strings.Join(im.Names, " ") != strings.Join(want, " ") {
			t.Errorf("Image(%q) = %v, %v, %v; want names %v", name, im.Names, ok, err, want)
		}
	}
}

func TestScriptedFailures(t *testing.T) {
	rt, s := fakeSubject()
	ctx := context.Background()
	boom := errors.New("boom")
	rt.FailNext("Create", boom)
	if _, err := rt.Create(ctx, s.Spec(nil, "true")); !errors.Is(err, boom) {
		t.Fatalf("Create = %v, want the scripted failure", err)
	}
	id, err := rt.Create(ctx, s.Spec(map[string]string{"k": "v"}, "sleep", "60"))
	if err != nil {
		t.Fatalf("the failure was for one call only: %v", err)
	}
	rt.FailAlways("Start", boom)
	for i := 0; i < 2; i++ {
		if err := rt.Start(ctx, id); !errors.Is(err, boom) {
			t.Fatalf("Start #%d = %v", i, err)
		}
	}
	rt.Heal()
	if err := rt.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := rt.Exit(id, 137, true); err != nil {
		t.Fatal(err)
	}
	if code, err := rt.Wait(ctx, id, time.Second); code != 137 || err != nil {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	if v, _ := rt.OOMKilled(ctx, id); v != runtime.OOMKill {
		t.Fatalf("OOMKilled = %v after a scripted OOM", v)
	}
	if got := len(rt.Specs()); got != 2 {
		t.Fatalf("%d specs recorded, want 2 (the refused one too)", got)
	}
	if rt.Count("Start") != 3 || len(rt.Live()) != 1 {
		t.Fatalf("calls %v, live %v", rt.Calls(), rt.Live())
	}
}

func TestShell(t *testing.T) {
	cases := []struct {
		cmd            []string
		code           int
		stdout, stderr string
	}{
		{[]string{"sh", "-c", "echo a b; echo c >&2; exit 5"}, 5, "a b\n", "c\n"},
		{[]string{"true"}, 0, "", ""},
		{[]string{"sh", "-c", "python3 -c 1"}, 127, "", "sh: python3: not found\n"},
		{[]string{"sh", "-c", "sleep 0.01\necho done"}, 0, "done\n", ""},
		{[]string{"timeout", "-k", "2", "-s", "TERM", "0.050", "sh", "-c", "echo a; sleep 60; echo b"}, 124, "a\n", ""},
		{[]string{"timeout", "-s", "TERM", "30", "sh", "-c", "echo quick; exit 3"}, 3, "quick\n", ""},
		{[]string{"timeout", "x"}, 125, "", "timeout: invalid arguments\n"},
		{[]string{"sh", "-c", "kill -s TERM -- -1"}, 127, "", "sh: kill: not found\n"}, // a container's command has no kill
	}
	for _, c := range cases {
		code, out := shell(c.cmd, make(chan struct{}), nil)
		if code != c.code || string(out.Stdout) != c.stdout || string(out.Stderr) != c.stderr {
			t.Errorf("%q = %d %q %q", c.cmd, code, out.Stdout, out.Stderr)
		}
	}
}

// kill -s SIG -- -1 in an exec (how the sandbox signals every process of a
// container) ends the container's command as Signal does.
func TestExecKillReachesTheContainer(t *testing.T) {
	t.Parallel()
	rt, s := fakeSubject()
	ctx := context.Background()
	id, err := rt.Create(ctx, s.Spec(nil, "sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	res, err := rt.Exec(ctx, id, runtime.ExecRequest{Command: []string{"/bin/sh", "-c", "kill -s TERM -- -1"}, Max: 4096})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec kill = %+v, %v", res, err)
	}
	if code, err := rt.Wait(ctx, id, time.Second); code != 143 || err != nil {
		t.Fatalf("Wait after kill -s TERM -- -1 = %d, %v; want 143", code, err)
	}
}
