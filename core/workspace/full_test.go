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

// fakeFS is a kernel-enforced quota that only makes directories: what a
// Kubernetes core's staging copies are (the pod's emptyDir is the bound).
type fakeFS struct{}

func (fakeFS) Provision(path string, _ int64, _, _ int) error { return os.MkdirAll(path, 0o711) }
func (fakeFS) Release(string) error                           { return nil }
func (fakeFS) Enforced() bool                                 { return true }

// A workspace measured where its sandbox runs (a pod's tmpfs) is reported
// full once per fill as a local one is; a filesystem larger than the
// quota (a disk-backed emptyDir: the node's disk) is not the workspace's.
func TestCheckFullOf(t *testing.T) {
	const quota = 8 << 20
	m := New(t.TempDir(), "t", quota, fakeFS{})
	if err := os.MkdirAll(m.Root(), 0o711); err != nil {
		t.Fatal(err)
	}
	w, err := m.Create("s1")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		size, free int64
		noInodes   bool
		want       bool
	}{
		{"empty", quota, quota, false, false},
		{"filled", quota, 512 << 10, false, true},
		{"still full", quota, 0, false, false},
		{"freed", quota, quota / 2, false, false},
		{"out of inodes", quota, quota / 2, true, true},
		{"freed again", quota, quota, false, false},
		{"the node's disk", 100 << 30, 0, false, false},
		{"nothing measured", 0, 0, false, false},
	} {
		f, got := m.CheckFullOf(w.Path, c.size, c.free, c.noInodes)
		if got != c.want || (got && (f.Path != w.Path || f.Free != c.free || f.Inodes != c.noInodes)) {
			t.Errorf("%s: CheckFullOf = %+v, %v; want %v", c.name, f, got, c.want)
		}
	}
	if _, got := m.CheckFullOf(w.Path+"-other", quota, 0, false); got {
		t.Error("a workspace this manager did not provision was reported")
	}
}
