package policy

import (
	"maps"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// security.waive takes guarantees by name, each once; a wrong one is a
// config error at its index (config check and serve refuse it).
func TestWaiveValidation(t *testing.T) {
	for _, c := range []struct {
		name  string
		waive []string
		path  string // "" valid
		msg   string
	}{
		{"none", nil, "", ""},
		{"every guarantee", strings.Split(runtime.GuaranteeNames(), ", "), "", ""},
		{"unknown", []string{"memory", "memroy"}, "security.waive[1]", `"memroy" is not a guarantee; use one of no-network,`},
		{"twice", []string{"pids", "cpu", "pids"}, "security.waive[2]", "already waived by security.waive[0]"},
		{"case matters", []string{"Memory"}, "security.waive[0]", "is not a guarantee"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Security.Waive = c.waive
			var got []config.FieldError
			for _, e := range CheckConfig(cfg) {
				if strings.HasPrefix(e.Path, "security.waive") {
					got = append(got, e)
				}
			}
			if c.path == "" {
				if len(got) > 0 {
					t.Fatalf("valid waive refused: %v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Path != c.path || !strings.Contains(got[0].Msg, c.msg) {
				t.Fatalf("got %v, want one error at %s containing %q", got, c.path, c.msg)
			}
		})
	}
}

// The old keys are aliases: each waives what it used to turn off, names
// itself as the source, and config check says the current form.
func TestWaiversAndAliases(t *testing.T) {
	for _, c := range []struct {
		name  string
		set   func(*config.Config)
		want  map[runtime.Guarantee]string
		notes int
	}{
		{"defaults", func(*config.Config) {}, map[runtime.Guarantee]string{}, 0},
		{"by name", func(c *config.Config) { c.Security.Waive = []string{"seccomp", "pids"} },
			map[runtime.Guarantee]string{runtime.Seccomp: "security.waive[0]", runtime.Pids: "security.waive[1]"}, 0},
		{"enforce_resource_limits = false", func(c *config.Config) { c.Security.EnforceResourceLimits = false }, map[runtime.Guarantee]string{
			runtime.Memory: "security.enforce_resource_limits = false", runtime.CPU: "security.enforce_resource_limits = false", runtime.Pids: "security.enforce_resource_limits = false"}, 1},
		{"enforce_quota = false", func(c *config.Config) { c.Volumes.EnforceQuota = false },
			map[runtime.Guarantee]string{runtime.WorkspaceQuota: "volumes.enforce_quota = false"}, 1},
		{"allow_network turns no-network off", func(c *config.Config) { c.Security.AllowNetwork = true },
			map[runtime.Guarantee]string{runtime.NoNetwork: "security.allow_network = true"}, 0},
		{"host userns turns user-namespace off", func(c *config.Config) { c.Security.UserNS = "host" },
			map[runtime.Guarantee]string{runtime.UserNamespace: `security.userns = "host"`}, 0},
		{"name wins over alias", func(c *config.Config) { c.Volumes.EnforceQuota = false; c.Security.Waive = []string{"workspace-quota"} },
			map[runtime.Guarantee]string{runtime.WorkspaceQuota: "security.waive[0]"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config.Default()
			c.set(&cfg)
			if got := Waivers(cfg); !maps.Equal(got, c.want) {
				t.Fatalf("Waivers = %v, want %v", got, c.want)
			}
			notes := AliasNotes(cfg)
			if len(notes) != c.notes {
				t.Fatalf("notes %q, want %d", notes, c.notes)
			}
			for _, n := range notes {
				if !strings.Contains(n, "old form of security.waive = [") {
					t.Fatalf("note %q does not give the current form", n)
				}
			}
		})
	}
}

// A guarantee the configuration turns off is a gap of every sandbox even
// on a runtime that enforces everything, waived by that setting: runs go
// ahead and every result says so.
func TestConfigTurnsGuaranteesOff(t *testing.T) {
	cfg := config.Default()
	cfg.Security.AllowNetwork = true
	cfg.Security.UserNS = "host"
	p := New(FromConfig(cfg), nil)
	without, err := p.Guarantees(runtime.Report{})
	if err != nil || len(without) != 2 {
		t.Fatalf("Guarantees = %+v, %v; want no-network and user-namespace gone without", without, err)
	}
	n := p.WaivedNotice(without)
	for _, want := range []string{"no-network (sandboxes are given a network by configuration; waived by security.allow_network = true: sandboxed code may reach the network)",
		`user-namespace (sandboxes share the host user namespace by configuration; waived by security.userns = "host"`} {
		if !strings.Contains(n, want) {
			t.Errorf("notice %q lacks %q", n, want)
		}
	}
}
