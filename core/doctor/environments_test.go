package doctor

import (
	"context"
	"errors"
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
