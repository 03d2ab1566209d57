package workspace

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// tarOf is a tar a hostile sandbox could send: any names, any types.
func tarOf(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	return b.Bytes()
}

func TestUntar(t *testing.T) {
	reg := func(name string, size int64) tar.Header {
		return tar.Header{Name: name, Typeflag: tar.TypeReg, Size: size, Mode: 0o644}
	}
	cases := []struct {
		name    string
		entries []tar.Header
		limit   int64
		files   []string // regular files in dst afterwards
		left    []string
		over    bool
	}{
		{"files and directories", []tar.Header{{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, reg("d/a", 3), reg("./b", 1)}, 0, []string{"b", "d/a"}, nil, false},
		{"links are named, never made", []tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, reg("l/x", 1), {Name: "h", Typeflag: tar.TypeLink, Linkname: "b"}}, 0, []string{"l/x"}, []string{"l (symlink)", "h (link)"}, false},
		{"names kept beneath", []tar.Header{reg("../../escape", 1), reg("/abs", 1)}, 0, []string{"abs", "escape"}, nil, false},
		{"pipes and devices", []tar.Header{{Name: "p", Typeflag: tar.TypeFifo}, {Name: "c", Typeflag: tar.TypeChar}}, 0, nil, []string{"p (fifo)", "c (device)"}, false},
		{"over the limit", []tar.Header{reg("a", 600), reg("b", 600)}, 1000, nil, nil, true},
		{"skipped", []tar.Header{reg("keep", 1), reg("skip-me", 1)}, 0, []string{"keep"}, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out")
			left, _, err := Untar(bytes.NewReader(tarOf(t, tc.entries...)), dst, tc.limit, func(p string) bool { return p == "skip-me" })
			if tc.over {
				if !errors.Is(err, ErrOverLimit) {
					t.Fatalf("want ErrOverLimit, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(left, tc.left) {
				t.Errorf("left %q, want %q", left, tc.left)
			}
			var files []string
			filepath.Walk(dst, func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode()&os.ModeSymlink != 0 {
					t.Errorf("a link was made: %s", p)
				}
				if err == nil && fi.Mode().IsRegular() {
					rel, _ := filepath.Rel(dst, p)
					files = append(files, filepath.ToSlash(rel))
				}
				return nil
			})
			slices.Sort(files)
			if !slices.Equal(files, tc.files) {
				t.Errorf("files %q, want %q", files, tc.files)
			}
		})
	}
}

func TestReplace(t *testing.T) {
	m := New(t.TempDir(), "tag", 0, nil)
	w, err := m.Create("s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.Path, "old"), []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := w.Path + ".sync"
	os.MkdirAll(tmp, 0o700)
	os.WriteFile(filepath.Join(tmp, "new"), []byte("2"), 0o600)
	if err := m.Replace(w.Path, tmp); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(w.Path, "new")); err != nil {
		t.Errorf("the new tree is not in place: %v", err)
	}
	if _, err := os.Stat(filepath.Join(w.Path, "old")); err == nil {
		t.Error("the old tree is still there")
	}
	// Removed meanwhile: the replacement must not bring it back.
	if err := m.Remove(w); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(tmp, 0o700)
	if err := m.Replace(w.Path, tmp); !errors.Is(err, ErrNotFound) {
		t.Errorf("replacing a removed workspace: %v, want ErrNotFound", err)
	}
	for _, p := range []string{w.Path, tmp} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is there after the workspace was removed", p)
		}
	}
}

// A server's stop (Close) waits for a sync under way, so that its sync
// directory is not left half written, and refuses syncs that start after.
func TestCloseWaitsForSyncs(t *testing.T) {
	m := New(t.TempDir(), "tag", 0, nil)
	w, err := m.Create("s1")
	if err != nil {
		t.Fatal(err)
	}
	tmp, done, err := m.BeginSync(w.Path)
	if err != nil || tmp != w.Path+".sync" {
		t.Fatalf("BeginSync: %q %v", tmp, err)
	}
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a sync was under way", err)
	default:
	}
	// The sync writes its directory, then ends (Replace refuses: closing).
	if err := os.MkdirAll(filepath.Join(tmp, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	done()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{w.Path, tmp} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is there after Close", p)
		}
	}
	if _, _, err := m.BeginSync(w.Path); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a sync after Close: %v, want ErrNotFound", err)
	}
}
