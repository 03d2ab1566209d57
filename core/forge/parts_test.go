package forge

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/runtimetest"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// statuses are plugins as an inspection reports them: a Python backend
// with sessions, an R backend whose image is not built, a builder, and a
// plugin that did not load.
func statuses() []plugins.Status {
	return []plugins.Status{
		{Identity: plugins.Identity{Name: "python", Type: plugin.TypeBackend, Version: "1.0", APIVersion: 1, Checksum: "verified"},
			Capabilities: backend.Capabilities{Languages: []string{"python"}, Stateful: true, Image: image}},
		{Identity: plugins.Identity{Name: "r", Type: plugin.TypeBackend, Version: "1.0", APIVersion: 1, Checksum: "verified"},
			Capabilities: backend.Capabilities{Languages: []string{"r"}, Image: "mcp-forge/r:4.2"}, Restarts: 2},
		{Identity: plugins.Identity{Name: "podman-builder", Type: plugin.TypeBuilder, Version: "0.1", APIVersion: 1}},
		{Identity: plugins.Identity{Name: "broken"}, Error: "checksum MISMATCH"},
	}
}

func withStatuses(tb *testbed) {
	tb.parts.inspect = func(context.Context, config.Config) []plugins.Status { return statuses() }
}

// doctor and images report each plugin as it loaded and each image as
// it is on this machine.
func TestCommandsReportPlugins(t *testing.T) {
	t.Parallel()
	tb := newTestbed(t)
	withStatuses(tb)
	cases := []struct {
		name string
		run  func(Options) error
		want []string
	}{
		{"doctor", func(o Options) error { return runDoctor(context.Background(), tb.cfg, o, tb.parts) }, []string{
			"ok    plugin python    backend 1.0, API v1, checksum verified: python (sessions), image " + image,
			"ok    plugin r         backend 1.0, API v1, checksum verified: r (stateless), image mcp-forge/r:4.2",
			"FAIL  plugin broken    checksum MISMATCH",
			"ok    execute_python   stateless: none (no loaded backend runs python without a session", "; sessions: python",
			"ok    execute_r        stateless: r; sessions: none (",
		}},
		{"images", func(o Options) error { return listImages(context.Background(), tb.cfg, o, tb.parts) }, []string{
			image + "           0 MB  recipe   packages   (used by python)",
			"mcp-forge/r:4.2              missing: run `make images` (used by r)",
			"plugin broken is not loaded, so its image is unknown: checksum MISMATCH",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			if err := c.run(Options{Stdout: &out}); !errors.Is(err, ErrFailed) {
				t.Errorf("error %v, want ErrFailed", err)
			}
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output does not contain %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// A routing that does not fit the plugins fails doctor the way it fails
// the start.
func TestDoctorReportsRouting(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Execution.DefaultBackend = map[string]string{"python": "missing"}
	var routing string
	for _, r := range pluginCheck(cfg, statuses())(context.Background()) {
		if r.Name == "routing" {
			routing = r.Detail
		}
	}
	if !strings.Contains(routing, `execution.default_backend.python = "missing": no such plugin`) {
		t.Errorf("routing: %q", routing)
	}
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	down := runtimetest.New()
	down.FailAlways("Info", errors.New("connection refused"))
	imageDown := runtimetest.New()
	imageDown.FailAlways("Image", errors.New("timeout"))
	up := runtimetest.New(runtime.ImageInfo{Names: []string{image}}, runtime.ImageInfo{Names: []string{"mcp-forge/r:4.2"}})
	loaded := statuses()[:2]
	lacking := runtimetest.New(runtime.ImageInfo{Names: []string{image}})
	lacking.Lack(runtime.Pids, "cgroups v1")
	lacking.Lack(runtime.Memory, "cgroups v1")
	cases := []struct {
		name string
		rt   *runtimetest.Runtime
		sts  []plugins.Status
		want []httpserver.Check
	}{
		{"ready", up, loaded, []httpserver.Check{
			{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
			{Name: "guarantees", OK: true, Detail: "every guarantee enforced", Age: "0s"},
			{Name: "plugins", OK: true, Detail: "loaded: python, r"},
			{Name: "image " + image, OK: true, Detail: "present"},
			{Name: "image mcp-forge/r:4.2", OK: true, Detail: "present"},
		}},
		{"podman down", down, statuses(), []httpserver.Check{
			{Name: "podman", Detail: "connection refused"},
			{Name: "plugins", OK: true, Detail: "loaded: podman-builder, python, r; failed: broken: checksum MISMATCH"},
			{Name: "image " + image, Detail: "not checked: Podman unreachable"},
			{Name: "image mcp-forge/r:4.2", Detail: "not checked: Podman unreachable"},
		}},
		{"image missing", runtimetest.New(runtime.ImageInfo{Names: []string{image}}), loaded[1:], []httpserver.Check{
			{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
			{Name: "guarantees", OK: true, Detail: "every guarantee enforced", Age: "0s"},
			{Name: "plugins", OK: true, Detail: "loaded: r"},
			{Name: "image mcp-forge/r:4.2", Detail: "missing: run `make images`"},
		}},
		{"image lookup fails", imageDown, loaded[:1], []httpserver.Check{
			{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
			{Name: "guarantees", OK: true, Detail: "every guarantee enforced", Age: "0s"},
			{Name: "plugins", OK: true, Detail: "loaded: python"},
			{Name: "image " + image, Detail: "timeout"},
		}},
		{"a guarantee missing, another waived", lacking, loaded[:1], []httpserver.Check{
			{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
			{Name: "guarantees", Detail: (&policy.GuaranteeError{Missing: []runtime.Gap{{Guarantee: runtime.Pids, Why: "cgroups v1", Fix: "(fake runtime: scripted by Lack)"}}}).Error(), Age: "0s"},
			{Name: "plugins", OK: true, Detail: "loaded: python"},
			{Name: "image " + image, OK: true, Detail: "present"},
		}},
		{"waived", lacking, nil, []httpserver.Check{
			{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
			{Name: "guarantees", OK: true, Detail: "waived, not enforced: memory, pids", Age: "0s"},
			{Name: "plugins", Detail: "loaded: "},
		}},
		{"no plugin", up, nil, []httpserver.Check{
			{Name: "podman", OK: true, Detail: "Podman 5.0.0 at unix:///fake/podman.sock"},
			{Name: "guarantees", OK: true, Detail: "every guarantee enforced", Age: "0s"},
			{Name: "plugins", Detail: "loaded: "},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			waive := map[runtime.Guarantee]string{runtime.Memory: "security.waive[0]"}
			if c.name == "waived" {
				waive[runtime.Pids] = "security.waive[1]"
			}
			pol := policy.New(policy.Settings{Waived: waive}, nil)
			if d := cmp.Diff(c.want, (&readyProbe{}).readiness(context.Background(), "podman", fakeRuntime{c.rt}, pol, c.sts)); d != "" {
				t.Errorf("checks (-want +got):\n%s", d)
			}
		})
	}
}

// A crashed plugin's containers are removed and their workspaces released
// (no live session holds them).
func TestCrashReleasesThePluginsContainers(t *testing.T) {
	t.Parallel()
	tb := newTestbed(t)
	tb.warmPool(t)
	f, err := build(context.Background(), tb.cfg, hclog.NewNullLogger(), tb.parts)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(tb.rt.Live()) != 1 {
		t.Fatalf("live containers %v", tb.rt.Live())
	}
	f.Plugins.OnCrash("warm")
	if live := tb.rt.Live(); len(live) != 0 {
		t.Errorf("the crashed plugin's containers are left: %v", live)
	}
	tb.quota.mu.Lock()
	released := len(tb.quota.released)
	tb.quota.mu.Unlock()
	if released != 1 {
		t.Errorf("released %d workspaces, want the warm pool's 1", released)
	}
}

// The crash handler runs before the engine exists: nothing is kept.
func TestCrashBeforeTheEngine(t *testing.T) {
	t.Parallel()
	tb := newTestbed(t)
	tb.warmPool(t)
	load := tb.parts.loadPlugins
	tb.parts.loadPlugins = func(ctx context.Context, m *plugins.Manager, hostFor plugins.HostFactory) []error {
		errs := load(ctx, m, hostFor)
		m.OnCrash("warm")
		if live := tb.rt.Live(); len(live) != 0 {
			t.Errorf("containers left after a crash during start: %v", live)
		}
		return errs
	}
	f, err := build(context.Background(), tb.cfg, hclog.NewNullLogger(), tb.parts)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	tb.released(t)
}

// Tool grants: none before the tool bridge is resolved, the bridge's own
// answer after.
func TestGrants(t *testing.T) {
	t.Parallel()
	var g grants
	if _, err := g.Grant("python", "tok"); err == nil || !strings.Contains(err.Error(), "no bridge plugin") {
		t.Errorf("grant without a bridge: %v", err)
	}
	cfg := config.Default()
	svc, err := toolbridge.New(cfg, "mcpbridge", nil, filepath.Join(t.TempDir(), "tools"), audit.Discard{}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	g.resolve(svc)
	if _, err := g.Grant("python", "tok"); err == nil || strings.Contains(err.Error(), "no bridge plugin") {
		t.Errorf("an unknown token through the bridge: %v", err)
	}
}

// Custom environments set up at start when enabled, without a builder
// plugin (builds then refuse; list and delete work).
func TestEnvironmentsWithoutABuilder(t *testing.T) {
	t.Parallel()
	tb := newTestbed(t)
	tb.cfg.EnvironmentBuilder.Enabled = true
	f, err := build(context.Background(), tb.cfg, hclog.NewNullLogger(), tb.parts)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Environments == nil {
		t.Error("no environments service")
	}
}

// An inspected plugin's host refuses everything, saying why.
func TestInspectedHostRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := noHost{}.Sandbox()
	calls := map[string]func() error{
		"Record": func() error { return noHost{}.Audit().Record(ctx, host.Event{}) },
		"Create": func() error { _, err := s.Create(ctx, host.Intent{}); return err },
		"Start":  func() error { return s.Start(ctx, "c") },
		"Wait":   func() error { _, err := s.Wait(ctx, "c", 0); return err },
		"State":  func() error { _, err := s.State(ctx, "c"); return err },
		"Logs":   func() error { _, err := s.Logs(ctx, "c", 0); return err },
		"Exec":   func() error { _, err := s.Exec(ctx, "c", host.ExecRequest{}); return err },
		"Signal": func() error { return s.Signal(ctx, "c", "TERM", 0) },
		"Stop":   func() error { return s.Stop(ctx, "c", 0) },
		"Remove": func() error { return s.Remove(ctx, "c") },
		"ReadFiles": func() error {
			_, err := s.ReadFiles(ctx, "c", "/", 0, 0)
			return err
		},
		"PutFile":         func() error { return s.PutFile(ctx, "c", "/x", nil) },
		"GetFile":         func() error { _, err := s.GetFile(ctx, "c", "/x", 0); return err },
		"RemoveWorkspace": func() error { return s.RemoveWorkspace(ctx, "s") },
	}
	for name, call := range calls {
		err := call()
		var he *host.Error
		if !errors.As(err, &he) || he.Kind != host.KindUnavailable || !strings.Contains(err.Error(), "only inspects plugins") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestBuilders(t *testing.T) {
	t.Parallel()
	var names []string
	for _, b := range Builders(statuses()) {
		names = append(names, b.Name)
	}
	if d := cmp.Diff([]string{"podman-builder", "broken"}, names); d != "" {
		t.Errorf("builders (-want +got):\n%s", d)
	}
}
