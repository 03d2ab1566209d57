package doctor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
)

func TestEnvironmentsCheck(t *testing.T) {
	noTrivy := func(string) (string, error) { return "", errors.New("not found") }
	trivy := func(string) (string, error) { return "/usr/bin/trivy", nil }
	for _, tc := range []struct {
		name     string
		mod      func(*config.EnvironmentBuilder)
		builders []BuilderStatus
		look     func(string) (string, error)
		want     []string
	}{
		{"builder loaded, no trivy", nil, []BuilderStatus{{Name: "uv", Version: "0.2.0"}}, noTrivy,
			[]string{"ok builder: plugin uv 0.2.0", "warn security scan: trivy is not on PATH"}},
		{"builder missing", nil, []BuilderStatus{{Name: "debian", Version: "0.1.0"}}, trivy,
			[]string{"warn builder: no builder plugin of that name is found (installed builders: debian)", "ok security scan: trivy at /usr/bin/trivy"}},
		{"builder broken", nil, []BuilderStatus{{Name: "uv", Error: "checksum mismatch"}}, trivy,
			[]string{"FAIL builder: checksum mismatch"}},
		{"scan required", func(b *config.EnvironmentBuilder) { b.SecurityScan = "required" }, nil, noTrivy,
			[]string{"warn builder: none is installed", "FAIL security scan: every build is refused"}},
		{"disabled", func(b *config.EnvironmentBuilder) { b.Enabled = false }, nil, noTrivy, []string{"ok environments: disabled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.DefaultFor(0, nil)
			if tc.mod != nil {
				tc.mod(&cfg.EnvironmentBuilder)
			}
			var got []string
			for _, r := range Environments(cfg, tc.builders, tc.look)(context.Background()) {
				got = append(got, string(r.Status)+" "+r.Name+" "+r.Detail)
			}
			all := strings.Join(got, "\n")
			for _, w := range tc.want {
				// w is "<status> <name>: <detail substring>".
				head, detail, _ := strings.Cut(w, ": ")
				found := false
				for _, line := range got {
					found = found || (strings.HasPrefix(line, head+" ") && strings.Contains(line, detail))
				}
				if !found {
					t.Errorf("want %q in:\n%s", w, all)
				}
			}
		})
	}
}

func TestUVCheck(t *testing.T) {
	none := func(string) (string, error) { return "", errors.New("not found") }
	onPath := func(n string) (string, error) {
		if n == "uv" {
			return "/usr/bin/uv", nil
		}
		return "", errors.New("not found")
	}
	ok := func(context.Context, string) (string, error) { return "uv 0.6.14\n", nil }
	broken := func(context.Context, string) (string, error) { return "", errors.New("exec format error") }
	for _, tc := range []struct {
		name    string
		uvPath  string
		look    func(string) (string, error)
		version func(context.Context, string) (string, error)
		want    string
	}{
		{"on PATH", "", onPath, ok, "ok uv: uv 0.6.14 at /usr/bin/uv (from PATH)"},
		{"configured", "/opt/uv", none, ok, "ok uv: uv 0.6.14 at /opt/uv (from plugins.uv.config.uv_path)"},
		{"none found", "", none, ok, "warn uv: no uv found"},
		{"pip chosen", "none", onPath, ok, "warn uv: plugins.uv.config.uv_path = \"none\""},
		{"does not run", "", onPath, broken, "FAIL uv: uv at /usr/bin/uv (PATH) does not run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.EnvironmentBuilder.Builder = "uv"
			if tc.uvPath != "" {
				cfg.Plugins = map[string]config.PluginSpec{"uv": {Config: map[string]any{"uv_path": tc.uvPath}}}
			}
			res := UV(cfg, tc.look, tc.version)(context.Background())
			if len(res) != 1 || !strings.Contains(fmt.Sprintf("%s %s: %s", res[0].Status, res[0].Name, res[0].Detail), tc.want) {
				t.Fatalf("%+v, want %q", res, tc.want)
			}
		})
	}
}
