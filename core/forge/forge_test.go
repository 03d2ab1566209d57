package forge

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// The core tells every plugin the same thing: nothing depends on which
// plugin it is, and no image (a backend's image is its own setting).
func TestPluginSettingsNameNoPlugin(t *testing.T) {
	cfg := config.Default()
	cfg.Execution.MaxOutput = 2 << 10
	settings := PluginSettings(cfg)
	a, b := settings("python"), settings("anything")
	if !reflect.DeepEqual(a, b) || a["max_output_bytes"] != int64(2048) || a["image"] != nil {
		t.Fatalf("%v / %v", a, b)
	}
}

// A configured plugin image outside images.allowed is a configuration error
// with its field path.
func TestLoadConfigChecksPluginImages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "forge.toml")
	os.WriteFile(path, []byte("[plugins.python]\npath = \"/x\"\nconfig = { image = \"docker.io/library/python:3\" }\n"), 0o600)
	_, err := LoadConfig(path)
	if err == nil || !strings.Contains(err.Error(), `plugins.python.config.image: "docker.io/library/python:3" is not matched by images.allowed`) {
		t.Fatal(err)
	}
	os.WriteFile(path, []byte("[plugins.python]\npath = \"/x\"\nconfig = { image = \"mcp-forge/custom:sci\" }\n"), 0o600)
	if _, err := LoadConfig(path); err != nil {
		t.Fatal(err)
	}
}
