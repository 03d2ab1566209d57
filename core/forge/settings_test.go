package forge

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// A third-party plugin is not handed the Python image: its spec's default
// image stays in force (it used to be overridden for every plugin).
func TestPluginSettingsImages(t *testing.T) {
	cfg := config.Default()
	cfg.Images.Python, cfg.Images.R = "py:1", "r:1"
	settings := PluginSettings(cfg)
	for name, want := range map[string]any{"python": "py:1", "jupyter": "py:1", "r": "r:1", "irkernel": "r:1", "shout": nil} {
		if got := settings(name)["image"]; got != want {
			t.Errorf("%s: image %v, want %v", name, got, want)
		}
	}
}
