package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestCleanPath(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{"data.csv", "data.csv", nil},
		{"a/b/c.txt", "a/b/c.txt", nil},
		{"./a//b/./c", "a/b/c", nil},
		{"output/", "output", nil},
		{".", ".", nil},
		{"ünïcode файл.txt", "ünïcode файл.txt", nil},
		{"..hidden", "..hidden", nil}, // a name starting with dots is a name
		{"", "", ErrPath},
		{"/etc/passwd", "", ErrPath},
		{"//etc/passwd", "", ErrPath},
		{"..", "", ErrPath},
		{"../x", "", ErrPath},
		{"a/../../x", "", ErrPath},
		{"a/..", "", ErrPath},
		{"a/b/..", "", ErrPath},
		{"a\x00b", "", ErrPath},
		{"a\nb", "", ErrPath},
		{"a\x7fb", "", ErrPath},
		{`..\..\windows`, "", ErrPath},
		{"\xff\xfe", "", ErrPath},
		{strings.Repeat("a", 256), "", ErrPath},
		{strings.Repeat("a/", 600), "", ErrPath},
	} {
		got, err := CleanPath(c.in)
		if !errors.Is(err, c.err) || got != c.want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
}

// hostileTree is a working directory as hostile code could leave it.
func hostileTree(t *testing.T) (*Files, string) {
	t.Helper()
	top := t.TempDir()
	root := filepath.Join(top, "work")
	outside := filepath.Join(top, "secret")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(root, 0o755))
	must(os.WriteFile(outside, []byte("secret"), 0o600))
	must(os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	must(os.WriteFile(filepath.Join(root, "sub", "ok.txt"), []byte("fine"), 0o644))
	must(os.Symlink(outside, filepath.Join(root, "abs-link")))
	must(os.Symlink("../secret", filepath.Join(root, "rel-link")))
	must(os.Symlink("sub/ok.txt", filepath.Join(root, "inner-link")))
	must(os.Symlink(top, filepath.Join(root, "dir-link")))
	must(os.Symlink("/proc/self/root", filepath.Join(root, "magic")))
	must(syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	return NewFiles(root), outside
}

func TestReadFileNeverLeaves(t *testing.T) {
	f, _ := hostileTree(t)
	for _, c := range []struct {
		path string
		err  error
	}{
		{"sub/ok.txt", nil},
		{"abs-link", ErrLink},
		{"rel-link", ErrLink},
		{"inner-link", ErrLink}, // even a link within: no links at all
		{"dir-link/secret", ErrLink},
		{"magic/etc/passwd", ErrLink},
		{"../secret", ErrPath},
		{"/etc/passwd", ErrPath},
		{"fifo", ErrNotRegular},
		{"sub", ErrNotRegular},
		{"missing.txt", ErrNotFound},
		{"sub/ok.txt/x", ErrNotFound},
	} {
		data, err := f.ReadFile(c.path, 1<<20)
		if !errors.Is(err, c.err) {
			t.Errorf("ReadFile(%q): %v, want %v", c.path, err, c.err)
		}
		if c.err == nil && string(data) != "fine" {
			t.Errorf("ReadFile(%q) = %q", c.path, data)
		}
		if c.err != nil && data != nil {
			t.Errorf("ReadFile(%q) returned data with error", c.path)
		}
	}
	if _, err := f.ReadFile("sub/ok.txt", 3); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the cap: %v", err)
	}
}

func TestWriteFileNeverLeaves(t *testing.T) {
	f, outside := hostileTree(t)
	for _, c := range []struct {
		path string
		err  error
	}{
		{"new.txt", nil},
		{"deep/er/new.txt", nil},
		{"abs-link", nil}, // the link itself is replaced, never written through
		{"dir-link/secret", ErrLink},
		{"dir-link/new", ErrLink},
		{"sub/ok.txt/x", ErrNotRegular},
		{"sub", ErrNotRegular},
		{"../secret", ErrPath},
		{".", ErrPath},
	} {
		err := f.WriteFile(c.path, []byte("new"))
		if !errors.Is(err, c.err) {
			t.Errorf("WriteFile(%q): %v, want %v", c.path, err, c.err)
			continue
		}
		if c.err == nil {
			if got, err := f.ReadFile(c.path, 0); err != nil || string(got) != "new" {
				t.Errorf("read back %q: %q, %v", c.path, got, err)
			}
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret" {
		t.Fatalf("the file outside was changed: %q", b)
	}
	entries, _ := os.ReadDir(f.Root())
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".forge-upload-") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

func TestListNeverFollows(t *testing.T) {
	f, _ := hostileTree(t)
	entries, truncated, err := f.List(".", 100)
	if err != nil || truncated {
		t.Fatal(err, truncated)
	}
	types := map[string]string{}
	for _, e := range entries {
		types[e.Path] = e.Type
	}
	want := map[string]string{"sub": "directory", "sub/ok.txt": "file", "abs-link": "symlink", "dir-link": "symlink", "fifo": "fifo", "magic": "symlink"}
	for p, ty := range want {
		if types[p] != ty {
			t.Errorf("%s: %q, want %q", p, types[p], ty)
		}
	}
	for p := range types {
		if strings.HasPrefix(p, "dir-link/") || strings.HasPrefix(p, "magic/") {
			t.Errorf("listed through a link: %s", p)
		}
	}
	if _, truncated, _ := f.List(".", 2); !truncated {
		t.Error("a listing over max is not marked truncated")
	}
	if _, _, err := f.List("dir-link", 10); !errors.Is(err, ErrLink) {
		t.Errorf("listing a link: %v", err)
	}
}

func TestSnapshotSeesChanges(t *testing.T) {
	f, _ := hostileTree(t)
	before := f.Snapshot(".", 100)
	if _, ok := before["sub/ok.txt"]; !ok || len(before) != 1 {
		t.Fatalf("snapshot %v: want only the regular file", before)
	}
	if err := f.WriteFile("sub/ok.txt", []byte("changed!")); err != nil {
		t.Fatal(err)
	}
	after := f.Snapshot(".", 100)
	if after["sub/ok.txt"] == before["sub/ok.txt"] {
		t.Fatal("a rewritten file has the same stamp")
	}
}

// The output directory is stamped before and after every session run.
func BenchmarkSnapshot(b *testing.B) {
	for _, n := range []int{0, 100} {
		dir := b.TempDir()
		os.Mkdir(filepath.Join(dir, "output"), 0o755)
		for i := 0; i < n; i++ {
			os.WriteFile(filepath.Join(dir, "output", strings.Repeat("f", 1+i%50)+string(rune('a'+i%26))), []byte("x"), 0o644)
		}
		f := NewFiles(dir)
		b.Run(strings.Repeat("n", 1)+"="+string(rune('0'+n/100)), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				f.Snapshot("output", 1000)
			}
		})
	}
}

// SessionHasDir is true only for a real directory: a link to one, a file
// and a missing name are false (a walk would find nothing there).
func TestSessionHasDir(t *testing.T) {
	m := New(t.TempDir(), "t", 0, nil)
	work := filepath.Join(m.SessionPath("s1"), SessionWorkDir)
	if m.SessionHasDir("s1", "output") {
		t.Fatal("a session without a workspace has an output directory")
	}
	for _, d := range []string{"output", "real"} {
		if err := os.MkdirAll(filepath.Join(work, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("real", filepath.Join(work, "link"))
	os.WriteFile(filepath.Join(work, "file"), nil, 0o644)
	for name, want := range map[string]bool{"output": true, "real": true, "link": false, "file": false, "missing": false} {
		if got := m.SessionHasDir("s1", name); got != want {
			t.Errorf("SessionHasDir(%q) = %v, want %v", name, got, want)
		}
	}
}
