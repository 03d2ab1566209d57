package runtimetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Subject is a runtime under the contract: Spec returns a spec the runtime
// accepts (an image it has, resolved to its ID, a seccomp profile, limits,
// confinement) that runs command and carries labels.
type Subject struct {
	Runtime runtime.Runtime
	Spec    func(labels map[string]string, command ...string) runtime.Spec
	// MissingImage is an image reference the runtime does not have.
	MissingImage string
	// Lack, when set, makes the runtime report a guarantee missing from
	// then on (the fake's scripting; nil for a real runtime).
	Lack func(g runtime.Guarantee, why string)
}

// RunContract checks what the core relies on of a runtime: lifecycle, exit
// codes, output capture and caps, listing by label, exec, signals,
// timeouts and removal. The fake and the Podman runtime both pass it.
func RunContract(t *testing.T, s Subject) {
	ctx := context.Background()
	rt := s.Runtime
	tag := make([]byte, 6)
	rand.Read(tag)
	label := "io.mcp-forge.contract"
	run := hex.EncodeToString(tag)
	labels := map[string]string{runtime.LabelManaged: "true", label: run}

	start := func(t *testing.T, cmd ...string) string {
		t.Helper()
		id, err := rt.Create(ctx, s.Spec(labels, cmd...))
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		t.Cleanup(func() { rt.Remove(context.Background(), id) })
		if err := rt.Start(ctx, id); err != nil {
			t.Fatalf("Start: %v", err)
		}
		return id
	}
	notRunning := func(t *testing.T, id string) int {
		t.Helper()
		running, code, err := rt.State(ctx, id)
		if err != nil {
			t.Fatalf("State: %v", err)
		}
		if running {
			t.Fatal("State says running after the container ended")
		}
		return code
	}

	t.Run("info", func(t *testing.T) {
		info, err := rt.Info(ctx)
		if err != nil || info.Version == "" {
			t.Fatalf("Info = %+v, %v", info, err)
		}
	})
	t.Run("guarantees", func(t *testing.T) {
		rep, err := rt.Guarantees(ctx)
		if err != nil {
			t.Fatalf("Guarantees: %v", err)
		}
		if err := rep.Check(); err != nil {
			t.Fatal(err)
		}
		for _, g := range rep.Gaps {
			if g.Why == "" || g.Fix == "" {
				t.Errorf("gap %s without a reason or a fix: %+v", g.Guarantee, g)
			}
		}
		if s.Lack == nil {
			return
		}
		s.Lack(runtime.Pids, "scripted by the contract")
		rep, err = rt.Guarantees(ctx)
		if err != nil || rep.Enforces(runtime.Pids) {
			t.Fatalf("after Lack(pids): %+v, %v; want pids missing", rep, err)
		}
	})
	t.Run("image", func(t *testing.T) {
		spec := s.Spec(nil, "true")
		im, ok, err := rt.Image(ctx, spec.Image)
		if err != nil || !ok || im.ID == "" {
			t.Fatalf("Image(%q) = %+v, %v, %v", spec.Image, im, ok, err)
		}
		if _, ok, err := rt.Image(ctx, s.MissingImage); ok || err != nil {
			t.Fatalf("Image(%q) of a missing image = %v, %v; want false, nil", s.MissingImage, ok, err)
		}
		for name, breakIt := range map[string]func(*runtime.Spec){
			"a missing image":      func(sp *runtime.Spec) { sp.Image, sp.ImageID = s.MissingImage, s.MissingImage },
			"no resolved image ID": func(sp *runtime.Spec) { sp.ImageID = "" },
			"no seccomp profile":   func(sp *runtime.Spec) { sp.SeccompProfile = "" },
		} {
			bad := s.Spec(labels, "true")
			breakIt(&bad)
			if id, err := rt.Create(ctx, bad); err == nil {
				rt.Remove(ctx, id)
				t.Errorf("Create with %s succeeded; the runtime must refuse it", name)
			}
		}
	})
	t.Run("exit code and output", func(t *testing.T) {
		id := start(t, "sh", "-c", "echo out; echo err >&2; exit 3")
		code, err := rt.Wait(ctx, id, time.Minute)
		if err != nil || code != 3 {
			t.Fatalf("Wait = %d, %v; want 3", code, err)
		}
		if c := notRunning(t, id); c != 3 {
			t.Errorf("State exit code %d, want 3", c)
		}
		out, err := rt.Logs(ctx, id, 1<<20)
		if err != nil || string(out.Stdout) != "out\n" || string(out.Stderr) != "err\n" {
			t.Fatalf("Logs = %q %q, %v", out.Stdout, out.Stderr, err)
		}
		out, err = rt.Logs(ctx, id, 2)
		if err != nil || string(out.Stdout) != "ou" || out.StdoutTotal != 4 {
			t.Fatalf("capped Logs = %q (total %d), %v; want \"ou\" of 4", out.Stdout, out.StdoutTotal, err)
		}
		if v, err := rt.OOMKilled(ctx, id); err != nil || v == runtime.OOMKill {
			t.Fatalf("OOMKilled of a plain exit = %v, %v", v, err)
		}
	})
	t.Run("list by label and remove", func(t *testing.T) {
		id := start(t, "sh", "-c", "exit 0")
		rt.Wait(ctx, id, time.Minute)
		list, err := rt.List(ctx, map[string]string{label: run})
		if err != nil || !has(list, id) {
			t.Fatalf("List by label = %v, %v; want %s in it", ids(list), err, id)
		}
		if list, _ := rt.List(ctx, map[string]string{label: run + "-other"}); has(list, id) {
			t.Fatal("List matched a container whose label has another value")
		}
		if err := rt.Remove(ctx, id); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if list, _ := rt.List(ctx, map[string]string{label: run}); has(list, id) {
			t.Fatal("List still has a removed container")
		}
		if err := rt.Remove(ctx, id); err != nil {
			t.Fatalf("Remove of a removed container = %v; it counts as removed", err)
		}
		if _, _, err := rt.State(ctx, id); err == nil {
			t.Fatal("State of a removed container succeeded")
		}
	})
	t.Run("timeout kills", func(t *testing.T) {
		id := start(t, "sh", "-c", "sleep 60")
		began := time.Now()
		_, err := rt.Wait(ctx, id, 300*time.Millisecond)
		if !errors.Is(err, runtime.ErrTimeout) {
			t.Fatalf("Wait past its timeout = %v, want ErrTimeout", err)
		}
		if time.Since(began) > 30*time.Second {
			t.Fatalf("Wait took %v for a 300 ms timeout", time.Since(began))
		}
		notRunning(t, id)
	})
	t.Run("signal", func(t *testing.T) {
		id := start(t, "sh", "-c", "sleep 60")
		if err := rt.Signal(ctx, id, "KILL"); err != nil {
			t.Fatalf("Signal: %v", err)
		}
		code, err := rt.Wait(ctx, id, time.Minute)
		if err != nil || code != 137 {
			t.Fatalf("Wait after SIGKILL = %d, %v; want 137", code, err)
		}
	})
	t.Run("exec", func(t *testing.T) {
		id := start(t, "sh", "-c", "sleep 60")
		res, err := rt.Exec(ctx, id, runtime.ExecRequest{Command: []string{"sh", "-c", "echo hi; exit 4"}, Max: 1 << 20})
		if err != nil || res.ExitCode != 4 || string(res.Stdout) != "hi\n" {
			t.Fatalf("Exec = %+v, %v; want hi and 4", res, err)
		}
		var live strings.Builder
		res, err = rt.Exec(ctx, id, runtime.ExecRequest{Command: []string{"sh", "-c", "echo streamed"}, Max: 3, Stdout: &live})
		if err != nil || string(res.Stdout) != "str" || res.StdoutTotal != 9 || live.String() != "streamed\n" {
			t.Fatalf("capped, streamed Exec = %+v (live %q), %v", res, live.String(), err)
		}
		if err := rt.Stop(ctx, id, time.Second); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if _, err := rt.Wait(ctx, id, time.Minute); err != nil {
			t.Fatalf("Wait after Stop: %v", err)
		}
		notRunning(t, id)
		if _, err := rt.Exec(ctx, id, runtime.ExecRequest{Command: []string{"true"}}); err == nil {
			t.Fatal("Exec in a stopped container succeeded")
		}
	})
}

func has(list []runtime.Container, id string) bool {
	for _, c := range list {
		if c.ID == id {
			return true
		}
	}
	return false
}

func ids(list []runtime.Container) []string {
	var out []string
	for _, c := range list {
		out = append(out, c.ID)
	}
	return out
}
