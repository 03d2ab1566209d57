package forge

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
)

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
