package config

import (
	"strings"
	"testing"
)

// A host root is named, absolute, and apart from volumes.base_path, where
// every session's files are: neither inside it nor holding it.
func TestHostRootValidation(t *testing.T) {
	for _, tc := range []struct {
		name, root, path, msg string
	}{
		{"apart", "data", "/srv/data", ""},
		{"a sibling with the base path's prefix", "data", "/var/lib/mcp-forge-data", ""},
		{"relative", "data", "data", "must be an absolute path"},
		{"inside the base path", "data", "/var/lib/mcp-forge/sessions", "overlaps volumes.base_path"},
		{"the base path", "data", "/var/lib/mcp-forge/", "overlaps volumes.base_path"},
		{"holding the base path", "data", "/var/lib", "overlaps volumes.base_path"},
		{"a bad name", "my data", "/srv/data", ""},
		{"a bad claim", "data", "/srv/data", "is not a PersistentVolumeClaim name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Volumes.BasePath = "/var/lib/mcp-forge"
			c.Volumes.HostRoots = map[string]HostRoot{tc.root: {Path: tc.path}}
			if tc.name == "a bad claim" {
				c.Volumes.HostRoots[tc.root] = HostRoot{Path: tc.path, Claim: "Data_Claim"}
				errs := Validate(c)
				if len(errs) != 1 || errs[0].Path != "volumes.host_roots.data.claim" || !strings.Contains(errs[0].Msg, tc.msg) {
					t.Fatalf("a bad claim: %v", errs)
				}
				return
			}
			errs := Validate(c)
			want := tc.msg
			if tc.name == "a bad name" {
				if len(errs) != 1 || errs[0].Path != "volumes.host_roots.my data" {
					t.Fatalf("a bad name: %v", errs)
				}
				return
			}
			if want == "" {
				if len(errs) > 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Path != "volumes.host_roots."+tc.root+".path" || !strings.Contains(errs[0].Msg, want) {
				t.Fatalf("got %v; want volumes.host_roots.%s.path: ...%s...", errs, tc.root, want)
			}
		})
	}
}

// A tenant cannot be named as the stdio client's owner or a connection,
// whose sessions, checkpoints and host roots it would get.
func TestReservedTenantNames(t *testing.T) {
	for _, name := range []string{"local", "conn-1"} {
		c := Default()
		c.Tenants = map[string]Tenant{name: {APIKeySHA256: []string{strings.Repeat("a", 64)}}}
		errs := Validate(c)
		if len(errs) != 1 || errs[0].Path != "tenants."+name || !strings.Contains(errs[0].Msg, "reserved") {
			t.Errorf("tenant %q: %v", name, errs)
		}
	}
}
