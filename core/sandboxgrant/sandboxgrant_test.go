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
	g.Created("c1")
	if err != nil || len(ms) != 2 || g.Mounted() != 1 || !g.Holds("c1") || g.Isolation() != "gvisor" {
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

// A grant of an isolation alone has a standing twin, one per plugin and
// isolation, that outlives every run; a pooled container created with it
// serves one run of the class once claimed, and nothing else may be
// claimed: a container created otherwise, twice, or for a grant holding
// roots.
func TestStandingGrantAndClaim(t *testing.T) {
	dir := t.TempDir()
	rs, err := hostroots.New(map[string]config.HostRoot{"data": {Path: dir}}, "local")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := rs.Get("local", "data", false)
	reg := New()
	a, _ := reg.Issue("python", Spec{Isolation: "gvisor"})
	b, _ := reg.Issue("python", Spec{Isolation: "gvisor"})
	r, _ := reg.Issue("r", Spec{Isolation: "gvisor"})
	roots, _ := reg.Issue("python", Spec{Roots: []*hostroots.Root{d}, Target: "/mnt", Isolation: "gvisor"})
	plain, _ := reg.Issue("python", Spec{})
	if a.PoolToken() == "" || a.PoolToken() != b.PoolToken() || a.PoolToken() == r.PoolToken() {
		t.Fatalf("pool tokens: %q %q %q; want one per plugin and isolation", a.PoolToken(), b.PoolToken(), r.PoolToken())
	}
	if roots.PoolToken() != "" || plain.PoolToken() != "" {
		t.Errorf("a grant of roots or of nothing has a pool token")
	}
	st, err := reg.Lookup("python", a.PoolToken())
	if err != nil || st.Isolation() != "gvisor" || len(st.Names()) != 0 {
		t.Fatalf("standing grant: %v", err)
	}
	if _, err := reg.Lookup("r", a.PoolToken()); err == nil {
		t.Error("another plugin looked up a standing grant")
	}
	reg.Close(a)
	reg.Close(st) // ends with no run
	if _, err := reg.Lookup("python", b.PoolToken()); err != nil {
		t.Fatalf("the standing grant ended with a run: %v", err)
	}
	other, _ := reg.Issue("python", Spec{Isolation: "gvisor"})
	for _, tc := range []struct {
		name    string
		g       *Grant
		from    *Grant
		claimed bool
		ok      bool
	}{
		{"a pooled container of the class", b, st, false, true},
		{"one claimed already", other, st, true, false},
		{"one created with another run's grant", other, b, false, false},
		{"one created with no grant", other, nil, false, false},
		{"for a grant holding roots", roots, st, false, false},
		{"for the standing grant itself", st, st, false, false},
	} {
		err := tc.g.Claim("ctr-"+tc.name, tc.from, tc.claimed)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
		if held := tc.g.Holds("ctr-" + tc.name); held != tc.ok {
			t.Errorf("%s: holds %v after the claim", tc.name, held)
		}
	}
	st.Created("pooled-2")
	if st.Mounted() != 0 {
		t.Error("a standing grant keeps the containers created with it")
	}
}
