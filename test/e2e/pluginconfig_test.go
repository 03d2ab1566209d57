package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A key a plugin does not declare, or a value of the wrong type, in
// [plugins.NAME.config] stops both `config check` and `serve`, naming the
// key's path; a table the plugin accepts passes both. The built binaries
// (bin/) declare their schemas; config check learns them by starting each
// plugin that has a table.
func TestPluginConfigSchema(t *testing.T) {
	testenv.Require(t)
	bin := testenv.Binary(t)
	for _, c := range []struct {
		name, toml string
		want       []string // in the output; none: accepted
	}{
		{"typo", "[plugins.python.config]\nimgae = \"x\"\n", []string{"plugins.python.config.imgae: unknown key", "image", "warm"}},
		{"wrong type", "[plugins.jupyter.config]\nwarm = \"two\"\n", []string{`plugins.jupyter.config.warm: want an integer, got a string ("two")`}},
		{"array element", "[plugins.r.config]\npackages = [\"a\", 1]\n", []string{"plugins.r.config.packages[1]: want a string"}},
		{"a core setting", "[plugins.irkernel.config]\nmax_output_bytes = 1\n", []string{"plugins.irkernel.config.max_output_bytes: unknown key"}},
		{"accepted", "[plugins.python.config]\nimage = \"mcp-forge/python:3.11\"\nwarm = 0\n", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := testenv.BaseDir(t)
			path := filepath.Join(base, "forge.toml")
			if err := os.WriteFile(path, []byte(c.toml), 0o600); err != nil {
				t.Fatal(err)
			}
			env := append(os.Environ(), "FORGE_VOLUMES_BASE_PATH="+base, "FORGE_SECURITY_AUDIT_LOG="+filepath.Join(base, "audit.log"))
			for _, args := range [][]string{{"config", "check", path}, {"--config", path, "serve"}} {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Env = env
				// serve on stdio ends when its input does: an accepted
				// configuration serves until stdin closes, at once here.
				cmd.Stdin = strings.NewReader("")
				out, err := cmd.CombinedOutput()
				cancel()
				if c.want == nil {
					if err != nil {
						t.Fatalf("%v: %v\n%s", args, err, out)
					}
					continue
				}
				if err == nil {
					t.Fatalf("%v accepted the configuration:\n%s", args, out)
				}
				for _, w := range c.want {
					if !strings.Contains(string(out), w) {
						t.Errorf("%v: output does not contain %q:\n%s", args, w, out)
					}
				}
			}
		})
	}
}
