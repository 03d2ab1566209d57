package forge

import (
	"context"
	"errors"
	"fmt"
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
// sandbox's own reason first (a runc sandbox), else the server's; the
// engine then keeps their variables.
func TestRootlessSnapshotsRefuse(t *testing.T) {
	runc := fmt.Errorf("%w: it runs under runc", sandbox.ErrNoSnapshot)
	for _, c := range []struct {
		name  string
		whole error
		want  string
	}{
		{"gVisor sandbox", nil, "not root"},
		{"runc sandbox", runc, "runs under runc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := rootlessSnapshots{whole: canSnapshot(func(string, string) (int64, error) { return 1 << 30, c.whole })}
			if _, err := s.CanSnapshot("jupyter", "c1"); !errors.Is(err, sandbox.ErrNoSnapshot) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("CanSnapshot: %v, want ErrNoSnapshot saying %q", err, c.want)
			}
		})
	}
	if err := (rootlessSnapshots{}).Snapshot(context.Background(), "jupyter", "c1", t.TempDir(), 0, true); !errors.Is(err, sandbox.ErrNoSnapshot) {
		t.Errorf("Snapshot: %v, want ErrNoSnapshot", err)
	}
}

type canSnapshot func(plugin, container string) (int64, error)

func (f canSnapshot) CanSnapshot(plugin, container string) (int64, error) {
	return f(plugin, container)
}
