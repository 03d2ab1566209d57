package config

import (
	"testing"
)

func TestDefaultForPaths(t *testing.T) {
	sys := systemDefault()
	cases := []struct {
		name                string
		euid                int
		env                 map[string]string
		base, audit, uvPath string
	}{
		{"root keeps system paths", 0, map[string]string{"HOME": "/root", "XDG_DATA_HOME": "/x"},
			sys.Volumes.BasePath, sys.Security.AuditLog, sys.EnvironmentBuilder.UVCachePath},
		{"user without XDG uses home", 1001, map[string]string{"HOME": "/home/u"},
			"/home/u/.local/share/mcp-forge", "/home/u/.local/state/mcp-forge/audit.log", "/home/u/.cache/mcp-forge/uv"},
		{"user with XDG", 1001, map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": "/d", "XDG_STATE_HOME": "/s/", "XDG_CACHE_HOME": "/c"},
			"/d/mcp-forge", "/s/mcp-forge/audit.log", "/c/mcp-forge/uv"},
		{"relative XDG is ignored", 1001, map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": "rel"},
			"/home/u/.local/share/mcp-forge", "/home/u/.local/state/mcp-forge/audit.log", "/home/u/.cache/mcp-forge/uv"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := DefaultFor(c.euid, envOf(c.env))
			if got.Volumes.BasePath != c.base || got.Security.AuditLog != c.audit || got.EnvironmentBuilder.UVCachePath != c.uvPath {
				t.Fatalf("got %q %q %q, want %q %q %q", got.Volumes.BasePath, got.Security.AuditLog, got.EnvironmentBuilder.UVCachePath, c.base, c.audit, c.uvPath)
			}
			if errs := Validate(got); len(errs) > 0 {
				t.Fatalf("invalid: %v", errs)
			}
		})
	}
}

func envOf(m map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}
