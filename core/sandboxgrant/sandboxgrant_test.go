package sandboxgrant

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/hostroots"
)

// A grant is its plugin's until closed; its mounts are the roots, read-only
// host-root binds at target/<name>; a root replaced since the start (by a
// link, by another directory) is neither granted nor mounted.
func TestGrant(t *testing.T) {
	dir := t.TempDir()
	data, logs := filepath.Join(dir, "data"), filepath.Join(dir, "logs")
	os.Mkdir(data, 0o755)
	os.Mkdir(logs, 0o755)
	rs, err := hostroots.New(map[string]config.HostRoot{"data": {Path: data}, "logs": {Path: logs}}, "local")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := rs.Get("local", "data", false)
	l, _ := rs.Get("local", "logs", false)
	reg := New()
	g, err := reg.Issue("python", Spec{Roots: []*hostroots.Root{d, l}, Target: "/mnt", Isolation: "gvisor"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Lookup("r", g.Token()); err == nil {
		t.Error("another plugin's grant was looked up")
	}
	if _, err := reg.Lookup("python", "nope"); err == nil {
		t.Error("an unknown token was looked up")
	}
	got, err := reg.Lookup("python", g.Token())
	if err != nil || got != g {
		t.Fatalf("lookup: %v", err)
	}
	ms, err := g.Mounts()
	if err != nil || len(ms) != 2 || g.Mounted() != 1 || g.Isolation() != "gvisor" {
		t.Fatalf("mounts %+v, %v, mounted %d", ms, err, g.Mounted())
	}
	for i, want := range []struct{ src, target string }{{data, "/mnt/data"}, {logs, "/mnt/logs"}} {
		if m := ms[i]; m.Source != want.src || m.Target != want.target || !m.ReadOnly || !m.HostRoot {
			t.Errorf("mount %d: %+v, want %s read-only host root at %s", i, m, want.src, want.target)
		}
	}
	reg.Close(g)
	if _, err := reg.Lookup("python", g.Token()); err == nil {
		t.Error("a closed grant was looked up")
	}

	// logs becomes another directory, data a link.
	os.Rename(logs, logs+".old")
	os.Mkdir(logs, 0o755)
	if _, err := reg.Issue("python", Spec{Roots: []*hostroots.Root{l}, Target: "/mnt"}); !errors.Is(err, hostroots.ErrChanged) {
		t.Errorf("a replaced root granted: %v", err)
	}
	g2, err := reg.Issue("python", Spec{Roots: []*hostroots.Root{d}, Target: "/mnt"})
	if err != nil {
		t.Fatal(err)
	}
	os.Rename(data, data+".old")
	os.Symlink(dir, data)
	if _, err := g2.Mounts(); !errors.Is(err, hostroots.ErrChanged) {
		t.Errorf("a root that became a link mounted: %v", err)
	}
}
