package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/fsquota"
)

func TestFullSlack(t *testing.T) {
	for _, c := range []struct{ size, want int64 }{
		{1 << 20, 128 << 10}, {8 << 20, 1 << 20}, {20 << 20, 2560 << 10}, {1 << 30, 4 << 20}, {256 << 10, 64 << 10},
	} {
		if got := fullSlack(c.size); got != c.want {
			t.Errorf("fullSlack(%d) = %d, want %d", c.size, got, c.want)
		}
	}
}

// A workspace on its own filesystem is reported full once per fill: the
// check that finds it full first, not the ones after, and again after it
// was freed and filled anew. Needs root and loop devices (a real mount).
func TestCheckFullOncePerFill(t *testing.T) {
	// A loop-mounted workspace is the end-to-end tier's: make test-unit
	// touches no loop device and mounts nothing.
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("attaches a loop device and mounts a filesystem: end-to-end tier, set FORGE_E2E=1 (make test does)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: workspaces are loop-mounted filesystems")
	}
	base := t.TempDir()
	q, err := fsquota.New(base, nil, fsquota.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !q.Enforced() {
		t.Skipf("no kernel-enforced quota here: %s", q.Mechanism())
	}
	const quota = 8 << 20
	m := New(base, "t", quota, q)
	if err := os.MkdirAll(m.Root(), 0o711); err != nil {
		t.Fatal(err)
	}
	w, err := m.Create("s1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Remove(w) })
	fill := func() {
		t.Helper()
		f, err := os.Create(filepath.Join(w.Path, "big"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		chunk := make([]byte, 1<<20)
		for {
			if _, err := f.Write(chunk); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				return
			}
		}
	}
	steps := []struct {
		name string
		do   func()
		want bool
	}{
		{"empty", func() {}, false},
		{"filled", fill, true},
		{"still full", func() {}, false},
		{"freed", func() { os.Remove(filepath.Join(w.Path, "big")) }, false},
		{"filled again", fill, true},
	}
	for _, s := range steps {
		s.do()
		f, got := m.CheckFull(w.Path)
		if got != s.want {
			t.Fatalf("%s: CheckFull = %v (%+v), want %v", s.name, got, f, s.want)
		}
		if got && (f.Name != w.Name || f.Size > quota || f.Free >= fullSlack(f.Size)) {
			t.Errorf("%s: fill %+v", s.name, f)
		}
	}
	if _, got := m.CheckFull(filepath.Join(m.Root(), "not-a-workspace")); got {
		t.Error("a path that is no workspace is reported full")
	}
	// A manager without a kernel-enforced quota never reports: its walk does.
	plain := New(base, "u", quota, nil)
	pw, err := plain.Create("s2")
	if err != nil {
		t.Fatal(err)
	}
	if _, got := plain.CheckFull(pw.Path); got {
		t.Error("a plain directory was reported full")
	}
}
