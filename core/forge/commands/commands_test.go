package commands

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/runtimetest"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

const image = "mcp-forge/python:3.11"

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

// testCore is a core on a fresh base path, with no plugin binaries, over
// a scripted runtime that has image built; sts are its plugins.
func testCore(t *testing.T, sts []plugins.Status) Core {
	t.Helper()
	cfg := config.Default()
	cfg.Volumes.BasePath = t.TempDir()
	cfg.Server.PluginDir = t.TempDir()
	rt := runtimetest.New(runtime.ImageInfo{Names: []string{image}})
	return Core{Config: cfg, Instance: "test",
		Runtime: func(hclog.Logger) (runtime.Runtime, error) { return rt, nil },
		Plugins: func(context.Context) []plugins.Status { return sts },
	}
}

// doctor and images report each plugin as it loaded and each image as
// it is on this machine.
func TestCommandsReportPlugins(t *testing.T) {
	t.Parallel()
	c := testCore(t, statuses())
	cases := []struct {
		name string
		run  func(IO) error
		want []string
	}{
		{"doctor", func(o IO) error { return Doctor(context.Background(), c, o) }, []string{
			"ok    plugin python    backend 1.0, API v1, checksum verified: python (sessions), image " + image,
			"ok    plugin r         backend 1.0, API v1, checksum verified: r (stateless), image mcp-forge/r:4.2",
			"FAIL  plugin broken    checksum MISMATCH",
			"ok    execute_python   stateless: none (no loaded backend runs python without a session", "; sessions: python",
			"ok    execute_r        stateless: r; sessions: none (",
		}},
		{"images", func(o IO) error { return ListImages(context.Background(), c, o) }, []string{
			image + "           0 MB  recipe   packages   (used by python)",
			"mcp-forge/r:4.2              missing: run `make images` (used by r)",
			"plugin broken is not loaded, so its image is unknown: checksum MISMATCH",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			if err := tc.run(IO{Stdout: &out}); !errors.Is(err, ErrFailed) {
				t.Errorf("error %v, want ErrFailed", err)
			}
			for _, w := range tc.want {
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

func TestTenantKeys(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := NewTenantKey(IO{Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`key:    (\S+)\nsha256: ([0-9a-f]{64})\n`).FindStringSubmatch(out.String())
	if m == nil || tenant.HashKey(m[1]) != m[2] || !strings.Contains(out.String(), `api_key_sha256 = ["`+m[2]+`"]`) {
		t.Fatalf("new-key printed %q", out.String())
	}
	for _, c := range []struct{ in, out, err string }{
		{m[1] + "\n", m[2] + "\n", ""},
		{m[1] + "\r\n", m[2] + "\n", ""},
		{m[1], m[2] + "\n", ""},
		{"", "", "no key on stdin"},
		{"\n", "", "no key on stdin"},
	} {
		var out, errOut bytes.Buffer
		err := HashTenantKey(IO{Stdin: strings.NewReader(c.in), Stdout: &out, Stderr: &errOut})
		if out.String() != c.out || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("hash-key %q: %q, %v", c.in, out.String(), err)
		}
		if !strings.Contains(errOut.String(), "reading the key from stdin") {
			t.Errorf("hash-key does not say it reads stdin: %q", errOut.String())
		}
	}
}
