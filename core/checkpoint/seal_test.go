package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A snapshot verifies only as it was sealed: for the same client and
// session, every file as written; anything else is ErrSeal.
func TestSealVerify(t *testing.T) {
	root := t.TempDir()
	key, err := SealKey(root)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := SealKey(root); err != nil || string(again) != string(key) {
		t.Fatalf("the key changed on a second read: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(root, ".seal-key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	mk := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "snap")
		os.MkdirAll(filepath.Join(dir, "sandbox"), 0o700)
		os.MkdirAll(filepath.Join(dir, "workspace", "empty"), 0o700)
		os.WriteFile(filepath.Join(dir, "sandbox", "pages.img"), []byte("memory"), 0o600)
		os.WriteFile(filepath.Join(dir, "resume"), []byte("state"), 0o600)
		if err := Seal(key, dir, "alice", "s1"); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, c := range []struct {
		name         string
		change       func(dir string)
		client, id   string
		key          []byte
		wantVerified bool
	}{
		{"as sealed", func(string) {}, "alice", "s1", key, true},
		{"another client", func(string) {}, "bob", "s1", key, false},
		{"another session", func(string) {}, "alice", "s2", key, false},
		{"another key", func(string) {}, "alice", "s1", make([]byte, 32), false},
		{"a byte changed", func(d string) { os.WriteFile(filepath.Join(d, "sandbox", "pages.img"), []byte("memorx"), 0o600) }, "alice", "s1", key, false},
		{"a file added", func(d string) { os.WriteFile(filepath.Join(d, "workspace", "x"), nil, 0o600) }, "alice", "s1", key, false},
		{"a directory added", func(d string) { os.Mkdir(filepath.Join(d, "workspace", "d"), 0o700) }, "alice", "s1", key, false},
		{"a file removed", func(d string) { os.Remove(filepath.Join(d, "resume")) }, "alice", "s1", key, false},
		{"a link in place of a file", func(d string) {
			p := filepath.Join(d, "resume")
			os.Remove(p)
			os.Symlink("/etc/passwd", p)
		}, "alice", "s1", key, false},
		{"no seal", func(d string) { os.Remove(filepath.Join(d, SealName)) }, "alice", "s1", key, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := mk(t)
			c.change(dir)
			err := Verify(c.key, dir, c.client, c.id)
			if c.wantVerified != (err == nil) {
				t.Fatalf("Verify: %v, want verified %v", err, c.wantVerified)
			}
			if err != nil && !errors.Is(err, ErrSeal) {
				t.Fatalf("Verify: %v is not ErrSeal", err)
			}
		})
	}
}
