package forge

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/sandbox"
)

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

// A rootless server's sessions are never saved whole, and say why: the
// engine then keeps their variables.
func TestRootlessSnapshotsRefuse(t *testing.T) {
	var s rootlessSnapshots
	if _, err := s.CanSnapshot("jupyter", "c1"); !errors.Is(err, sandbox.ErrNoSnapshot) || !strings.Contains(err.Error(), "not root") {
		t.Errorf("CanSnapshot: %v, want ErrNoSnapshot saying the server is not root", err)
	}
	if err := s.Snapshot(context.Background(), "jupyter", "c1", t.TempDir(), 0, true); !errors.Is(err, sandbox.ErrNoSnapshot) {
		t.Errorf("Snapshot: %v, want ErrNoSnapshot", err)
	}
}
