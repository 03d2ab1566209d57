package hostsvc

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// core/workspace refuses with its own errors; a plugin sees each as the
// host error of its kind, with the workspace's message.
func TestFileErrKinds(t *testing.T) {
	t.Parallel()
	m := workspace.New(t.TempDir(), "tag", 0, nil)
	if err := os.MkdirAll(m.Root(), 0o711); err != nil {
		t.Fatal(err)
	}
	w, err := m.Create("")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(w.Path, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(w.Path, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.Path, "big"), make([]byte, 10), 0o644); err != nil {
		t.Fatal(err)
	}
	within := func(rel string) error { _, err := w.Within(rel); return err }
	plain := func(rel string) error { _, err := w.PlainDir(rel); return err }
	get := func(rel string, max int64) error { _, err := w.GetFile(rel, max); return err }
	cases := []struct {
		name string
		err  error
		want *host.Error
	}{
		{"absolute", within("/etc/passwd"), &host.Error{Kind: host.KindInvalid, Message: `path "/etc/passwd" must be relative to the workspace`}},
		{"outside", within("../x"), &host.Error{Kind: host.KindInvalid, Message: `path "../x" leaves the workspace`}},
		{"mount outside", w.WriteFile("../x", nil), &host.Error{Kind: host.KindInvalid, Message: `path "../x" leaves the workspace`}},
		{"replaced directory", plain("out"), &host.Error{Kind: host.KindPolicy, Message: "workspace directory out is not a plain directory"}},
		{"link", w.PutFile("out/passwd", []byte("x")), &host.Error{Kind: host.KindPolicy}},
		{"missing", get("nope", 10), &host.Error{Kind: host.KindNotFound}},
		{"directory", get("dir", 10), &host.Error{Kind: host.KindPolicy}},
		{"too large", get("big", 5), &host.Error{Kind: host.KindInvalid}},
		{"other", errors.New("disk on fire"), &host.Error{Kind: host.KindInternal, Message: "disk on fire"}},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		var got *host.Error
		if !errors.As(fileErr(c.err), &got) {
			t.Fatalf("%s: fileErr(%v) is no host error", c.name, c.err)
		}
		want := *c.want
		if want.Message == "" {
			want.Message = c.err.Error() // the workspace's words, unchanged
		}
		if diff := cmp.Diff(want, *got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	if fileErr(nil) != nil {
		t.Error("fileErr(nil) is an error")
	}
}
