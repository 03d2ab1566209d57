package hostroots

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// A root must be a directory, not a link; each is the local client's, or
// its tenants'; another's is unknown, as a missing one.
func TestRoots(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	os.Mkdir(data, 0o755)
	os.Symlink(data, filepath.Join(dir, "link"))
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o644)
	for _, tc := range []struct {
		path, want string
	}{
		{filepath.Join(dir, "link"), "is a symbolic link"},
		{filepath.Join(dir, "file"), "is not a directory"},
		{filepath.Join(dir, "none"), "no such file"},
	} {
		if _, err := New(map[string]config.HostRoot{"r": {Path: tc.path}}, "local"); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "volumes.host_roots.r.path") {
			t.Errorf("%s: %v, want %q", tc.path, err, tc.want)
		}
	}
	rs, err := New(map[string]config.HostRoot{"mine": {Path: data}, "team": {Path: data, Writable: true, Tenants: []string{"alice"}}}, "local")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		client, root string
		write        bool
		want         error
	}{
		{"local", "mine", false, nil},
		{"local", "mine", true, ErrReadOnly},
		{"local", "team", false, ErrUnknown},
		{"alice", "team", true, nil},
		{"alice", "mine", false, ErrUnknown},
		{"bob", "team", false, ErrUnknown},
		{"local", "nope", false, ErrUnknown},
	} {
		_, err := rs.Get(tc.client, tc.root, tc.write)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s %s write=%v: %v, want %v", tc.client, tc.root, tc.write, err, tc.want)
		}
	}
	if got := rs.For("alice"); len(got) != 1 || got[0].Name != "team" {
		t.Errorf("alice's roots: %+v", got)
	}
}
