package loader

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// server.tenants_file adds [tenants.NAME] tables kept apart (a mounted
// Kubernetes Secret); anything else in it, a tenant named twice or a file
// that cannot be read is an error naming the field.
func TestTenantsFile(t *testing.T) {
	t.Parallel()
	const (
		h1 = "1111111111111111111111111111111111111111111111111111111111111111"
		h2 = "2222222222222222222222222222222222222222222222222222222222222222"
	)
	for _, c := range []struct {
		name, main, file, want string
		tenants                []string
	}{
		{name: "adds", file: "[tenants.alice]\napi_key_sha256 = [\"" + h1 + "\"]\n", tenants: []string{"alice"}},
		{name: "beside forge.toml's", main: "[tenants.bob]\napi_key_sha256 = [\"" + h2 + "\"]\n",
			file: "[tenants.alice]\napi_key_sha256 = [\"" + h1 + "\"]\nmax_sessions = 2\n", tenants: []string{"alice", "bob"}},
		{name: "twice", main: "[tenants.alice]\napi_key_sha256 = [\"" + h2 + "\"]\n",
			file: "[tenants.alice]\napi_key_sha256 = [\"" + h1 + "\"]\n", want: `server.tenants_file: ` + "FILE" + `: tenant "alice" is also in forge.toml's [tenants]`},
		{name: "other keys", file: "[server]\nport = 1\n[tenants.alice]\napi_key_sha256 = [\"" + h1 + "\"]\n",
			want: "unknown key server.port (the file holds [tenants.NAME] tables only)"},
		{name: "validated", file: "[tenants.alice]\napi_key_sha256 = [\"not-a-hash\"]\n", want: "tenants.alice.api_key_sha256[0]: must be the sha256"},
		{name: "syntax", file: "[tenants.alice\n", want: "server.tenants_file: FILE:"},
		{name: "missing", want: "server.tenants_file: stat FILE: no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			file := filepath.Join(dir, "tenants.toml")
			if c.name != "missing" {
				if err := os.WriteFile(file, []byte(c.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			main := filepath.Join(dir, "forge.toml")
			if err := os.WriteFile(main, []byte("[server]\ntenants_file = \""+file+"\"\n"+c.main), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := LoadWith(main, envOf(nil))
			want := strings.ReplaceAll(c.want, "FILE", file)
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("error %v, want one with %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Tenants) != len(c.tenants) {
				t.Fatalf("tenants %v, want %v", cfg.Tenants, c.tenants)
			}
			for _, n := range c.tenants {
				if len(cfg.Tenants[n].APIKeySHA256) != 1 {
					t.Errorf("tenant %s: %+v", n, cfg.Tenants[n])
				}
			}
		})
	}
	for path, want := range map[string]string{"tenants.toml": "must be an absolute path", "/dev/zero": "/dev/zero is not a regular file", "/": "/ is not a regular file"} {
		if _, err := LoadWith("", envOf(map[string]string{"FORGE_SERVER_TENANTS_FILE": path})); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("tenants_file %s: %v, want %q", path, err, want)
		}
	}
}
