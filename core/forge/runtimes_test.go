package forge

import "testing"

// root's runsc keeps its state under /run; a rootless user's, which cannot
// write there, in its own runtime directory.
func TestRunscRoot(t *testing.T) {
	for _, c := range []struct {
		euid int
		xdg  string
		want string
	}{
		{0, "/run/user/0", "/run/mcp-forge/runsc"},
		{1001, "/run/user/1001", "/run/user/1001/mcp-forge/runsc"},
		{1001, "", "/run/user/1001/mcp-forge/runsc"},
		{1001, "/tmp/xdg-u", "/tmp/xdg-u/mcp-forge/runsc"},
	} {
		if got := RunscRoot(c.euid, func(k string) string { return map[string]string{"XDG_RUNTIME_DIR": c.xdg}[k] }); got != c.want {
			t.Errorf("RunscRoot(%d, XDG_RUNTIME_DIR=%q) = %q, want %q", c.euid, c.xdg, got, c.want)
		}
	}
}
