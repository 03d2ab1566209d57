package workspace

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sparseTree is a working directory of n sparse files of size bytes each
// (what f.truncate(size) leaves: no block allocated).
func sparseTree(t *testing.T, n int, size int64) *Files {
	t.Helper()
	root := t.TempDir()
	for i := range n {
		f, err := os.Create(filepath.Join(root, "s"+string(rune('a'+i%26))+string(rune('a'+i/26))))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return NewFiles(root)
}

func usageOf(t *testing.T, p string) (apparent, allocated int64) {
	t.Helper()
	filepath.Walk(p, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			apparent += fi.Size()
			allocated += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return
}

// The defect: 24 sparse files of 63 MiB in a 64 MiB workspace made the
// copy write 1.5 GB to the host. The copy now counts each file at its
// apparent size as it goes and stops at the limit: the host copy never
// holds more than the limit, apparent or allocated.
func TestCopyOutStopsAtTheLimit(t *testing.T) {
	const limit = 64 << 20
	for _, c := range []struct {
		name  string
		tree  func(t *testing.T) *Files
		limit int64
		over  bool
	}{
		{"24 sparse files of 63 MiB, limit 64 MiB", func(t *testing.T) *Files { return sparseTree(t, 24, 63<<20) }, limit, true},
		{"one sparse file of 65 MiB", func(t *testing.T) *Files { return sparseTree(t, 1, 65<<20) }, limit, true},
		{"one sparse file of 63 MiB fits", func(t *testing.T) *Files { return sparseTree(t, 1, 63<<20) }, limit, false},
		{"sparse 1 TiB, refused before it is read", func(t *testing.T) *Files { return sparseTree(t, 1, 1<<40) }, limit, true},
		{"no limit", func(t *testing.T) *Files { return sparseTree(t, 3, 1<<20) }, 0, false},
		{"allocated past the end counts", func(t *testing.T) *Files {
			root := t.TempDir()
			f, err := os.Create(filepath.Join(root, "prealloc"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, 8<<20); err != nil {
				t.Skipf("fallocate: %v", err)
			}
			return NewFiles(root)
		}, 4 << 20, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := c.tree(t)
			dst := filepath.Join(t.TempDir(), "work")
			_, used, err := f.CopyOut(dst, c.limit, nil)
			if c.over != errors.Is(err, ErrOverLimit) {
				t.Fatalf("over the limit: want %v, got %v", c.over, err)
			}
			if !c.over && err != nil {
				t.Fatal(err)
			}
			app, alloc := usageOf(t, dst)
			if c.limit > 0 && (app > c.limit || alloc > c.limit || DiskUsage(dst, nil) > c.limit+64<<10) {
				t.Fatalf("the copy holds %d bytes apparent, %d allocated, over the limit %d", app, alloc, c.limit)
			}
			if c.limit > 0 && !c.over && used > c.limit {
				t.Fatalf("used %d over the limit %d without an error", used, c.limit)
			}
			t.Logf("copy: %d bytes apparent, %d allocated, used %d, %v", app, alloc, used, err)
		})
	}
}

// Files are streamed (a 63 MiB file is never a 63 MiB buffer), holes stay
// holes both ways, and data, directories and sizes come back as they were.
func TestCopyOutStreamsAndKeepsHoles(t *testing.T) {
	root := t.TempDir()
	data := make([]byte, 300<<10)
	rand.Read(data)
	f, err := os.Create(filepath.Join(root, "big"))
	if err != nil {
		t.Fatal(err)
	}
	// data, a 62 MiB hole, data again, a hole to the end.
	f.WriteAt(data, 0)
	f.WriteAt(data, 62<<20)
	f.Truncate(63 << 20)
	f.Close()
	os.MkdirAll(filepath.Join(root, "d/e"), 0o755)
	os.WriteFile(filepath.Join(root, "d/e/small.txt"), []byte("hello"), 0o644)
	os.WriteFile(filepath.Join(root, "empty"), nil, 0o644)
	os.Symlink("/etc/passwd", filepath.Join(root, "link"))
	unix.Mkfifo(filepath.Join(root, "pipe"), 0o644)

	dst := filepath.Join(t.TempDir(), "work")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	left, used, err := NewFiles(root).CopyOut(dst, 64<<20, nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if a := after.TotalAlloc - before.TotalAlloc; a > 8<<20 {
		t.Errorf("the copy allocated %d bytes: files are read whole, not streamed", a)
	}
	if len(left) != 2 {
		t.Errorf("left out: %q, want the link and the pipe", left)
	}
	if used < 63<<20 || used > 64<<20 {
		t.Errorf("used %d: the sparse file counts at its apparent size", used)
	}
	app, alloc := usageOf(t, dst)
	if app != 63<<20+5 || alloc > 2<<20 {
		t.Errorf("the copy: %d bytes apparent, %d allocated: want the sizes kept and the holes too", app, alloc)
	}

	// And back into a fresh working directory.
	back := t.TempDir()
	if err := NewFiles(back).CopyIn(dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(back, "big"))
	if err != nil || len(got) != 63<<20 || !bytes.Equal(got[:len(data)], data) || !bytes.Equal(got[62<<20:62<<20+len(data)], data) ||
		!bytes.Equal(got[len(data):62<<20], make([]byte, 62<<20-len(data))) {
		t.Fatalf("big after the round trip: %d bytes, %v", len(got), err)
	}
	if s, _ := os.ReadFile(filepath.Join(back, "d/e/small.txt")); string(s) != "hello" {
		t.Errorf("small.txt: %q", s)
	}
	if fi, err := os.Stat(filepath.Join(back, "empty")); err != nil || fi.Size() != 0 {
		t.Errorf("empty: %v %v", fi, err)
	}
	if _, alloc := usageOf(t, back); alloc > 2<<20 {
		t.Errorf("restored with %d bytes allocated: the holes were filled", alloc)
	}
}

// An upload is written whole: zeros take their size of the quota (only a
// checkpoint's copy and restore keep holes).
func TestWriteFileIsDense(t *testing.T) {
	root := t.TempDir()
	if err := NewFiles(root).WriteFile("zeros", make([]byte, 2<<20)); err != nil {
		t.Fatal(err)
	}
	if app, alloc := usageOf(t, root); app != 2<<20 || alloc < 2<<20 {
		t.Fatalf("%d bytes apparent, %d allocated: want every byte written", app, alloc)
	}
}

// A copy out and back keeps the files' and directories' modification
// times, and empty directories (a gVisor snapshot restores only over
// files as they were, and a kernel's directories must be there).
func TestCopyKeepsTimesAndEmptyDirectories(t *testing.T) {
	root := t.TempDir()
	old := time.Date(2020, 1, 2, 3, 4, 5, 600, time.UTC)
	for _, d := range []string{"a/b", "empty"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "a/b/f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a/b/f", "a/b", "a", "empty"} {
		if err := os.Chtimes(filepath.Join(root, p), old, old); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "copy")
	if _, _, err := NewFiles(root).CopyOut(out, 0, nil); err != nil {
		t.Fatal(err)
	}
	back := t.TempDir()
	if err := NewFiles(back).CopyIn(out); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{out, back} {
		for _, p := range []string{"a/b/f", "a/b", "a", "empty"} {
			fi, err := os.Stat(filepath.Join(dir, p))
			if err != nil {
				t.Fatalf("%s in %s: %v", p, dir, err)
			}
			if !fi.ModTime().Equal(old) {
				t.Errorf("%s in %s: modified %v, want %v", p, dir, fi.ModTime(), old)
			}
		}
	}
}
