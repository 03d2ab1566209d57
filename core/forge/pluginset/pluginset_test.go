package pluginset

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// Builders start in <base_path>/builds/<name>; environment_builder's
// uv_cache_path and find_links reach builders (only) as settings under
// their own keys, and builders of API v1 as request fields; the bridge
// keeps its servers.
func TestBuilderPlugins(t *testing.T) {
	cfg := config.Default()
	cfg.Volumes.BasePath = "/srv/forge"
	cfg.EnvironmentBuilder.UVCachePath = "/var/cache/uv"
	cfg.EnvironmentBuilder.FindLinks = []string{"/srv/wheels"}
	cfg.MCPTools = map[string]config.MCPTool{"m": {Command: "npx"}}
	pm := plugins.NewManager(nil, func(string) host.Host { return nil }, func(string) map[string]any { return nil }, audit.Discard{}, hclog.NewNullLogger())
	pm.TypeSettings, _ = BridgeSettings(cfg)
	ConfigureBuilders(cfg, pm)

	if got, want := pm.WorkDir("uv"), filepath.Join("/srv/forge", "builds", "uv"); got != want {
		t.Errorf("work directory %s, want %s", got, want)
	}
	if got := pm.TypeSettings("uv", plugin.TypeBuilder); !reflect.DeepEqual(got, map[string]any{"uv_cache_path": "/var/cache/uv", "find_links": []string{"/srv/wheels"}}) {
		t.Errorf("a builder's settings: %v", got)
	}
	if got := pm.TypeSettings("python", plugin.TypeBackend); got != nil {
		t.Errorf("a backend got %v", got)
	}
	if got := pm.TypeSettings("mcpbridge", plugin.TypeBridge); got["servers"] == nil {
		t.Errorf("the bridge lost its servers: %v", got)
	}
	if v1 := pm.V1Builder; v1.CacheDir != "/var/cache/uv" || !reflect.DeepEqual(v1.FindLinks, []string{"/srv/wheels"}) {
		t.Errorf("what v1 builders are told: %+v", v1)
	}

	// Unset aliases are not sent: the builder's defaults apply.
	cfg.EnvironmentBuilder.UVCachePath, cfg.EnvironmentBuilder.FindLinks = "", nil
	ConfigureBuilders(cfg, pm)
	if got := pm.TypeSettings("uv", plugin.TypeBuilder); len(got) != 0 {
		t.Errorf("unset aliases sent: %v", got)
	}
}

// The core tells every plugin the same thing: nothing depends on which
// plugin it is, and no image (a backend's image is its own setting).
func TestSettingsNameNoPlugin(t *testing.T) {
	cfg := config.Default()
	cfg.Execution.MaxOutput = 2 << 10
	settings := Settings(cfg)
	a, b := settings("python"), settings("anything")
	if !reflect.DeepEqual(a, b) || a["max_output_bytes"] != int64(2048) || a["image"] != nil {
		t.Fatalf("%v / %v", a, b)
	}
}
