package hostroots

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"golang.org/x/sys/unix"
)

// A root is bound read-only under the base path from what was checked: a
// link swapped in for its path later changes nothing the sandboxes mount;
// a root holding the base path, or a bind mount of one inside it, is
// refused by filesystem, not by path; Unstage leaves no mount.
func TestStage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("binds need root")
	}
	top := t.TempDir()
	base, data, other := filepath.Join(top, "base"), filepath.Join(top, "data"), filepath.Join(top, "other")
	for _, d := range []string{base, data, other} {
		os.Mkdir(d, 0o755)
	}
	os.WriteFile(filepath.Join(data, "f.txt"), []byte("the user's"), 0o644)
	os.WriteFile(filepath.Join(other, "f.txt"), []byte("someone else's"), 0o644)
	rs, err := New(map[string]config.HostRoot{"data": {Path: data}}, "local")
	if err != nil {
		t.Fatal(err)
	}
	staged, err := rs.Stage(base)
	if err != nil || !staged {
		t.Fatalf("stage: %v %v", staged, err)
	}
	t.Cleanup(rs.Unstage)
	src := rs.byName["data"].MountSource()
	if src != filepath.Join(StageDir(base), "data") {
		t.Fatalf("mount source %s", src)
	}
	// The path is swapped for a link to another directory.
	os.Rename(data, data+".old")
	os.Symlink(other, data)
	if got, _ := os.ReadFile(filepath.Join(src, "f.txt")); string(got) != "the user's" {
		t.Errorf("the staged root shows %q after its path was swapped", got)
	}
	if err := os.WriteFile(filepath.Join(src, "new.txt"), nil, 0o644); err == nil {
		t.Error("the staged root is writable")
	}
	rs.Unstage()
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), StageDir(base)) {
		t.Error("a bind is left after Unstage")
	}

	// A root that holds the base path, and one that reaches it through a
	// bind mount of a directory of base, are refused.
	inner := filepath.Join(top, "inner")
	os.Mkdir(inner, 0o755)
	if err := unix.Mount(base, inner, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(inner, unix.MNT_DETACH) })
	for name, path := range map[string]string{"holding": top, "bound": inner} {
		rs, err := New(map[string]config.HostRoot{name: {Path: path}}, "local")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rs.Stage(base); err == nil || !strings.Contains(err.Error(), "same filesystem tree as volumes.base_path") {
			t.Errorf("%s: %v, want a refusal", name, err)
			rs.Unstage()
		}
	}
}
