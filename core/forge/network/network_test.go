package network

import (
	"context"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/doctor"
)

// doctor checks credentials as serve will: nothing to say without any,
// OK when each is usable, FAIL naming the field when one is not.
func TestCredentialsCheck(t *testing.T) {
	t.Setenv("FORGE_TEST_DOCTOR_TOKEN", "a-token-long-enough")
	cred := config.Credential{Hosts: []string{"api.example.org"}, ValueEnv: "FORGE_TEST_DOCTOR_TOKEN"}
	for _, tc := range []struct {
		name   string
		edit   func(*config.Config)
		status doctor.Status // "" for no result
		detail string
	}{
		{"none", func(*config.Config) {}, "", ""},
		{"usable", func(c *config.Config) {
			c.Network.AllowedHosts = []string{"api.example.org"}
			c.Network.Credentials = map[string]config.Credential{"api": cred}
		}, doctor.OK, "1 configured, values readable, hosts allowed: api"},
		{"host not allowed", func(c *config.Config) { c.Network.Credentials = map[string]config.Credential{"api": cred} }, doctor.Fail,
			"network.credentials.api.hosts[0]: api.example.org:443 is not allowed"},
		{"value unset", func(c *config.Config) {
			c.Network.AllowedHosts = []string{"api.example.org"}
			bad := cred
			bad.ValueEnv = "FORGE_TEST_DOCTOR_UNSET"
			c.Network.Credentials = map[string]config.Credential{"api": bad}
		}, doctor.Fail, "network.credentials.api: value_env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			tc.edit(&cfg)
			res := CredentialsCheck(cfg)(context.Background())
			if tc.status == "" {
				if len(res) != 0 {
					t.Fatalf("%+v, want nothing", res)
				}
				return
			}
			if len(res) == 0 || res[0].Status != tc.status || !strings.Contains(res[0].Detail, tc.detail) {
				t.Fatalf("%+v, want %s with %q", res, tc.status, tc.detail)
			}
		})
	}
}
