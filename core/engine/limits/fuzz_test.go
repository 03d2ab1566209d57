package limits

import (
	"errors"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// FuzzEnv: an accepted environment has names a process can hold,
// none reserved, values without NUL and within the limits; a refusal is a
// RequestError with an env-* rule whose message never holds a value, and
// whose audit text holds neither names nor values.
func FuzzEnv(f *testing.F) {
	cfg := config.Default()
	cfg.Execution.MaxEnvValue, cfg.Execution.MaxEnvTotal = 1<<10, 2<<10
	l := Limits{cfg: cfg.Execution, envValue: 1 << 10, envTotal: 2 << 10}
	for _, s := range [][2]string{{"A", "1"}, {"FORGE_X", "v"}, {"1A", "v"}, {"A=B", "v"}, {"A\x00", "v"}, {"A", "v\x00w"},
		{"TOKEN", strings.Repeat("s", 1100)}, {"É", "v"}, {"_", ""}, {strings.Repeat("N", 129), "v"}} {
		f.Add(s[0], s[1], "SECOND", "x")
	}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		env := map[string]string{k1: v1, k2: v2}
		err := l.Env(env)
		if err == nil {
			total := 0
			for k, v := range env {
				if !envName.MatchString(k) || strings.HasPrefix(k, "FORGE_") || strings.IndexByte(v, 0) >= 0 || len(v) > 1<<10 {
					t.Fatalf("accepted %q=%q", k, v)
				}
				total += len(k) + len(v) + 2
			}
			if total > 2<<10 {
				t.Fatalf("accepted %d bytes over the 2k total", total)
			}
			return
		}
		var re *refusal.Error
		if !errors.As(err, &re) || !strings.HasPrefix(re.Rule, "env-") {
			t.Fatalf("refusal %v (%T) has no env rule", err, err)
		}
		// The same refusal with every value blanked (NULs kept, so the same
		// rule fires): text that appears only with the real values is an echo.
		blank := map[string]string{}
		for k, v := range env {
			blank[k] = strings.Map(func(r rune) rune {
				if r == 0 {
					return 0
				}
				return '\x02'
			}, v)
		}
		var bre *refusal.Error
		errors.As(l.Env(blank), &bre)
		for k, v := range env {
			if v == "" {
				continue
			}
			if strings.Contains(re.Msg, v) && (bre == nil || !strings.Contains(bre.Msg, v)) {
				t.Fatalf("the refusal echoes the value of %q: %s", k, re.Msg)
			}
			if strings.Contains(re.Audit, v) && (bre == nil || !strings.Contains(bre.Audit, v)) {
				t.Fatalf("the audit text %q holds a value", re.Audit)
			}
		}
		if re.Audit == "" || strings.Contains(re.Audit, "\"") {
			t.Fatalf("the audit text %q may name a variable", re.Audit)
		}
	})
}
