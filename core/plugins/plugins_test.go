package plugins

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
	"github.com/mcp-forge/mcp-forge/sdk/pluginhost"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

func TestChecksumMismatchRefuses(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mcp-forge-plugin-x")
	os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
	sum, _ := Checksum(p)
	wrong := strings.Repeat("0", 64)
	status, err := Entry{Name: "x", Path: p, SHA256: wrong}.Verify()
	if err == nil || status != "MISMATCH" || !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), sum) {
		t.Fatalf("want a refusal naming both digests, got %q %v", status, err)
	}
	if status, err := (Entry{Name: "x", Path: p, SHA256: sum}).Verify(); err != nil || status != "verified" {
		t.Fatalf("matching digest: %q %v", status, err)
	}
}

func TestDiscover(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"mcp-forge-plugin-a", "mcp-forge-plugin-b", "other"} {
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "mcp-forge-plugin-noexec"), []byte("x"), 0o644)
	cfg := config.Default()
	cfg.Plugins["b"] = config.PluginSpec{Path: "/opt/b", SHA256: strings.Repeat("A", 64)}
	got := Discover(cfg, dir)
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" || got[1].Path != "/opt/b" || got[1].SHA256 != strings.Repeat("a", 64) {
		t.Fatalf("%+v", got)
	}
}

// A plugin that speaks only an API version this core lacks is refused, and
// the message names both sides' versions.
func TestIncompatibleAPIVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "mcp-forge-plugin-future")
	build := exec.Command("go", "build", "-o", bin, "./testdata/v3plugin")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build test plugin: %v\n%s", err, out)
	}
	_, err := pluginhost.Launch(bin, hclog.NewNullLogger(), pluginhost.Options{})
	if err == nil {
		t.Fatal("incompatible plugin launched")
	}
	msg := err.Error()
	t.Log(msg)
	if !strings.Contains(msg, "incompatible") || !strings.Contains(msg, "3") || !strings.Contains(msg, "this core speaks plugin API versions [1 2]") {
		t.Fatalf("message does not name both versions: %s", msg)
	}
}

// A plugin that is slow to start must not stall status reads or other
// plugins: the manager's lock is not held while a plugin starts.
func TestSlowStartDoesNotBlockManager(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "mcp-forge-plugin-gate")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/gateplugin").CombinedOutput(); err != nil {
		t.Fatalf("build test plugin: %v\n%s", err, out)
	}
	gate := filepath.Join(dir, "open")
	m := NewManager([]Entry{{Name: "gate", Path: bin}, {Name: "other", Path: filepath.Join(dir, "missing")}},
		func(string) host.Host { return sdktest.NewLocalHost(dir) }, func(string) map[string]any { return map[string]any{"gate": gate} },
		audit.Discard{}, hclog.NewNullLogger())
	defer m.Close()
	done := make(chan error, 1)
	go func() { _, err := m.Backend(context.Background(), "gate"); done <- err }()
	// While "gate" waits for its gate, the rest of the manager answers.
	waitFor(t, func() bool { return pluginStarted(bin) })
	if st := m.Statuses(); len(st) != 2 {
		t.Fatalf("statuses: %+v", st)
	}
	if _, err := m.Backend(context.Background(), "other"); err == nil {
		t.Fatal("a missing plugin started")
	}
	select {
	case err := <-done:
		t.Fatalf("gate plugin finished before its gate opened: %v", err)
	default:
	}
	os.WriteFile(gate, nil, 0o644)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := m.Statuses(); st[0].Version != "0.0.1" || st[0].Error != "" {
		t.Fatalf("after start: %+v", st[0])
	}
}

// pluginStarted reports whether a process runs the binary at bin.
func pluginStarted(bin string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, p := range procs {
		if target, err := os.Readlink(p); err == nil && target == bin {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not reached in 30 s")
}

// A [plugins.NAME] entry without a path configures the plugin of that name
// in the plugin directory.
func TestDiscoverConfigOnly(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "mcp-forge-plugin-r"), []byte("x"), 0o755)
	cfg := config.Default()
	cfg.Plugins["r"] = config.PluginSpec{Config: map[string]any{"image": "mcp-forge/custom:stats"}}
	got := Discover(cfg, dir)
	if len(got) != 1 || got[0].Path != filepath.Join(dir, "mcp-forge-plugin-r") || got[0].Config["image"] != "mcp-forge/custom:stats" {
		t.Fatalf("%+v", got)
	}
}

// The exit event fires when the process ends, not before, and within a
// bound of its death.
func TestExitEvent(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited, unwatch := exitEvent(cmd.Process.Pid)
	defer unwatch()
	if exited == nil {
		t.Fatal("cannot watch a child process (pidfd_open failed)")
	}
	select {
	case <-exited:
		t.Fatal("exit event before the process ended")
	case <-time.After(100 * time.Millisecond):
	}
	start := time.Now()
	cmd.Process.Kill()
	select {
	case <-exited:
	case <-time.After(2 * time.Second):
		t.Fatal("no exit event 2 s after SIGKILL")
	}
	t.Logf("exit event %v after the kill", time.Since(start))
	cmd.Wait()
	// A process that is already gone is reported at once.
	gone, unwatch2 := exitEvent(cmd.Process.Pid)
	defer unwatch2()
	select {
	case <-gone:
	case <-time.After(time.Second):
		t.Fatal("an exited process is not reported as exited")
	}
}

// A builder plugin found in plugin_dir is started as a builder: asking
// for it as a backend is refused with a reason, and the manager goes on.
func TestBuilderPluginTyped(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "mcp-forge-plugin-builder")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/builderplugin").CombinedOutput(); err != nil {
		t.Fatalf("build test plugin: %v\n%s", err, out)
	}
	m := NewManager([]Entry{{Name: "builder", Path: bin}},
		func(string) host.Host { return sdktest.NewLocalHost(dir) }, func(string) map[string]any { return nil },
		audit.Discard{}, hclog.NewNullLogger())
	defer m.Close()
	_, err := m.Backend(context.Background(), "builder")
	if err == nil || !strings.Contains(err.Error(), "plugin builder is a builder plugin, not a backend plugin") {
		t.Fatalf("want a clear refusal of the builder plugin as a backend, got %v", err)
	}
	if _, err := m.Builder(context.Background(), "builder"); err != nil {
		t.Fatalf("Builder: %v", err)
	}
	if got := m.Typed("builder"); len(got) != 1 || got[0] != "builder" {
		t.Fatalf("Typed(builder) = %v", got)
	}
	if _, err := m.Bridge(context.Background(), "builder"); err == nil {
		t.Fatal("a builder was handed out as a bridge")
	}
	m.Close()
	waitFor(t, func() bool { return !pluginStarted(bin) })
}

// A plugin starts in the work directory WorkDir names, created 0700 (and
// tightened if it existed looser): a builder's layers and caches live
// there, and no request of API v2 names it.
func TestPluginStartsInItsWorkDir(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "mcp-forge-plugin-builder")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/builderplugin").CombinedOutput(); err != nil {
		t.Fatalf("build test plugin: %v\n%s", err, out)
	}
	work := filepath.Join(dir, "state", "builds", "builder")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	m := NewManager([]Entry{{Name: "builder", Path: bin}},
		func(string) host.Host { return sdktest.NewLocalHost(dir) }, func(string) map[string]any { return nil },
		audit.Discard{}, hclog.NewNullLogger())
	m.WorkDir = func(name string) string { return filepath.Join(dir, "state", "builds", name) }
	defer m.Close()
	if _, err := m.Builder(context.Background(), "builder"); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	pid := m.running["builder"].client.Pid()
	m.mu.Unlock()
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		t.Fatal(err)
	}
	if cwd != work {
		t.Errorf("the plugin runs in %s, not its work directory %s", cwd, work)
	}
	if st, err := os.Stat(work); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("work directory: %v, mode %v; want 0700", err, st.Mode().Perm())
	}
}

func buildShutdownPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcp-forge-plugin-shut")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/shutdownplugin").CombinedOutput(); err != nil {
		t.Fatalf("build test plugin: %v\n%s", err, out)
	}
	return bin
}

// Close (the server stopping) calls each plugin's shutdown hook before it
// ends the process, and bounds a hook that never returns by ShutdownGrace.
func TestCloseRunsShutdownHook(t *testing.T) {
	bin := buildShutdownPlugin(t)
	for _, c := range []struct {
		name    string
		hang    bool
		wantHad bool
	}{
		{"hook runs", false, true},
		{"hung hook is bounded", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			marker := filepath.Join(dir, "marker")
			m := NewManager([]Entry{{Name: "shut", Path: bin, Config: map[string]any{"marker": marker, "hang": c.hang}}},
				func(string) host.Host { return sdktest.NewLocalHost(dir) }, func(string) map[string]any { return nil },
				audit.Discard{}, hclog.NewNullLogger())
			if errs := m.LoadAll(context.Background()); len(errs) > 0 {
				t.Fatal(errs)
			}
			pid := m.running["shut"].client.Pid()
			start := time.Now()
			m.Close()
			took := time.Since(start)
			b, err := os.ReadFile(marker)
			if had := err == nil && string(b) == "shut down"; had != c.wantHad {
				t.Fatalf("marker written: %v (%q, %v), want %v", had, b, err, c.wantHad)
			}
			if took > ShutdownGrace+3*time.Second {
				t.Fatalf("Close took %v: the shutdown call is not bounded", took)
			}
			// The process is gone either way (the kill follows the hook).
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err != nil {
					return
				}
			}
			t.Fatalf("plugin process %d still runs after Close", pid)
		})
	}
}

// A key the plugin does not declare, or a wrong type, is refused before
// Configure, as a *ConfigError naming every key's path.
func TestLoadRefusesUndeclaredConfig(t *testing.T) {
	bin := buildShutdownPlugin(t)
	dir := t.TempDir()
	m := NewManager([]Entry{{Name: "shut", Path: bin, Config: map[string]any{"markr": "x", "hang": "yes"}}},
		func(string) host.Host { return sdktest.NewLocalHost(dir) }, func(string) map[string]any { return map[string]any{"max_output_bytes": 1} },
		audit.Discard{}, hclog.NewNullLogger())
	defer m.Close()
	errs := m.LoadAll(context.Background())
	var ce *ConfigError
	if len(errs) != 1 || !errors.As(errs[0], &ce) {
		t.Fatalf("want one *ConfigError, got %v", errs)
	}
	for _, w := range []string{"plugins.shut.config.hang: want a boolean, got a string", "plugins.shut.config.markr: unknown key (the plugin accepts hang, marker)"} {
		if !strings.Contains(ce.Error(), w) {
			t.Errorf("%q does not say %q", ce, w)
		}
	}
}

// A plugin started by hand with -debug prints a reattach line; a manager
// given it (FORGE_REATTACH_PLUGINS) connects to that process instead of
// starting the binary, configures it, calls it, runs its shutdown hook at
// Close, and leaves the process to whoever started it.
func TestReattachDebugPlugin(t *testing.T) {
	bin := buildShutdownPlugin(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "-debug")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var line string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), plugin.ReattachEnv+"="); ok {
			line = strings.Trim(v, "'")
			break
		}
	}
	go io.Copy(io.Discard, out)
	ra, err := pluginhost.ParseReattach(line)
	if err != nil || ra["shut"].Pid != cmd.Process.Pid {
		t.Fatalf("reattach line %q: %+v, %v", line, ra, err)
	}
	marker := filepath.Join(dir, "marker")
	// The entry's path does not exist: nothing is started.
	m := NewManager([]Entry{{Name: "shut", Path: filepath.Join(dir, "missing"), Config: map[string]any{"marker": marker}}},
		func(string) host.Host { return sdktest.NewLocalHost(dir) }, func(string) map[string]any { return nil },
		audit.Discard{}, hclog.NewNullLogger())
	m.Reattach = ra
	if errs := m.LoadAll(context.Background()); len(errs) > 0 {
		t.Fatal(errs)
	}
	b, err := m.Backend(context.Background(), "shut")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "x"}); err != nil || !r.Success {
		t.Fatalf("execute through the reattached plugin: %+v %v", r, err)
	}
	if st := m.Statuses()[0]; !strings.Contains(st.Checksum, "reattached") || st.APIVersion != 2 {
		t.Errorf("status %+v", st)
	}
	m.Close()
	if b, err := os.ReadFile(marker); err != nil || string(b) != "shut down" {
		t.Errorf("the shutdown hook did not run: %q %v", b, err)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the core ended a plugin it did not start: %v", err)
	}
}

// Run by hand without -debug, a plugin says what it is and how to debug it.
func TestPluginByHand(t *testing.T) {
	out, err := exec.Command(buildShutdownPlugin(t)).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "-debug") {
		t.Fatalf("exit %v, output %q", err, out)
	}
}
