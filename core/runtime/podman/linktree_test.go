package podman

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The staged layer is the builder's tree, modes and links included, with
// its files shared rather than copied.
func TestLinkTree(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tree")
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"", 0o755}, {"usr", 0o755}, {"usr/lib", 0o750}, {"scratch", 0o777 | os.ModeSticky}} {
		p := filepath.Join(src, d.path)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, d.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "usr/lib/mod.py"), []byte("x = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "usr/link")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "layer")
	if err := linkTree(src, dst); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{"": 0o755, "usr": 0o755, "usr/lib": 0o750, "scratch": 0o777 | os.ModeSticky} {
		st, err := os.Lstat(filepath.Join(dst, p))
		if err != nil || st.Mode()&(os.ModePerm|os.ModeSticky) != want || !st.IsDir() {
			t.Errorf("%q: %v %v, want a directory %v", p, st.Mode(), err, want)
		}
	}
	a, _ := os.Stat(filepath.Join(src, "usr/lib/mod.py"))
	b, err := os.Stat(filepath.Join(dst, "usr/lib/mod.py"))
	if err != nil || a.Sys().(*syscall.Stat_t).Ino != b.Sys().(*syscall.Stat_t).Ino {
		t.Errorf("the file is not linked: %v", err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "usr/link")); err != nil || l != "/etc/passwd" {
		t.Errorf("link: %q %v", l, err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := linkTree(src, filepath.Join(t.TempDir(), "again")); err == nil {
		t.Error("a fifo was staged")
	}
}
