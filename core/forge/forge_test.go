package forge

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
