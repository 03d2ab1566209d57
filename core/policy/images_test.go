package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config/loader"
)

func TestCheckConfigImages(t *testing.T) {
	cases := []struct {
		name, toml string
		want       []string
	}{
		{"defaults", "", nil},
		{"image not allowed", "[plugins.python]\npath = \"/x\"\nconfig = { image = \"docker.io/python:3\" }\n", []string{`plugins.python.config.image: "docker.io/python:3" is not matched by images.allowed`}},
		{"digest not pinned", "[plugins.python]\npath = \"/x\"\nconfig = { image = \"mcp-forge/python:3.11@sha256:" + strings.Repeat("a", 64) + "\" }\n", []string{`plugins.python.config.image: "mcp-forge/python:3.11@sha256:aaaa`, "is not matched by images.allowed"}},
		{"pattern without tag", "[images]\nallowed = [\"mcp-forge/python:*\", \"mcp-forge/r:*\", \"mcp-forge/*\"]\n", []string{`images.allowed[2]: "mcp-forge/*": it has no tag`}},
		{"pattern bad digest", "[images]\nallowed = [\"mcp-forge/python:*\", \"mcp-forge/r@sha256:xyz\"]\n", []string{`images.allowed[1]: "mcp-forge/r@sha256:xyz"`, "not a digest"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "forge.toml")
			os.WriteFile(path, []byte(c.toml), 0o600)
			cfg, err := loader.LoadWith(path, func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			got := CheckConfig(cfg).Error()
			if len(c.want) == 0 && got != "" {
				t.Fatalf("unexpected errors: %s", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("errors %q lack %q", got, w)
				}
			}
		})
	}
}
