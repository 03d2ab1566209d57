package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// runIDPattern is what an ephemeral workspace is named.
var runIDPattern = regexp.MustCompile(`^r[0-9a-f]{16}$`)

// FuzzSessionID: an accepted session id is a short, plain file name, and
// its workspace is one directory directly under Root; a refused id is
// refused by Create too, and creates nothing.
func FuzzSessionID(f *testing.F) {
	base := f.TempDir()
	m := New(base, "0a1b2c3d", 0, nil)
	if err := os.MkdirAll(m.Root(), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := CheckSessionID(id)
		if err != nil {
			if !errors.Is(err, ErrBadSessionID) {
				t.Fatalf("refusal %v does not wrap ErrBadSessionID", err)
			}
			if id == "" { // no session: a fresh ephemeral workspace
				w, err := m.Create("")
				if err != nil || !w.Ephemeral || !runIDPattern.MatchString(w.Name) || w.SessionID != w.Name {
					t.Fatalf("ephemeral workspace %+v, %v", w, err)
				}
				checkCreated(t, m, w, "")
				return
			}
			if w, cerr := m.Create(id); cerr == nil || !errors.Is(cerr, ErrBadSessionID) {
				t.Fatalf("Create accepted the refused id %q: %+v, %v", id, w, cerr)
			}
			if entries, _ := os.ReadDir(base); len(entries) != 1 {
				t.Fatalf("Create(%q) left files in the base: %v", id, entries)
			}
			if entries, _ := os.ReadDir(m.Root()); len(entries) != 0 {
				t.Fatalf("Create(%q) left files under Root: %v", id, entries)
			}
			return
		}
		if len(id) == 0 || len(id) > MaxSessionID || !utf8.ValidString(id) ||
			strings.ContainsAny(id, "/\\\x00.:") || strings.Contains(id, "..") {
			t.Fatalf("accepted id %q", id)
		}
		p := m.SessionPath(id)
		if filepath.Dir(p) != m.Root() || filepath.Base(p) != DirName(id)+".0a1b2c3d" || len(filepath.Base(p)) > 48+len(".0a1b2c3d") {
			t.Fatalf("SessionPath(%q) = %q is not one directory under %q", id, p, m.Root())
		}
		w, err := m.Create(id)
		if err != nil {
			t.Fatalf("Create(%q): %v", id, err)
		}
		checkCreated(t, m, w, p)
	})
}

// checkCreated: the workspace exists as a real directory where it should,
// then is removed (only after its path was checked).
func checkCreated(t *testing.T, m *Manager, w *Workspace, want string) {
	t.Helper()
	if want != "" && w.Path != want {
		t.Fatalf("workspace at %q, SessionPath says %q", w.Path, want)
	}
	if filepath.Dir(w.Path) != m.Root() || filepath.Base(w.Path) != w.Name {
		t.Fatalf("workspace %+v is not one directory under %q", w, m.Root())
	}
	real, err := filepath.EvalSymlinks(w.Path)
	if err != nil || real != w.Path {
		t.Fatalf("workspace %q resolves to %q (%v)", w.Path, real, err)
	}
	if err := m.Remove(w); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(w.Path); !os.IsNotExist(err) {
		t.Fatalf("workspace %q left after Remove: %v", w.Path, err)
	}
}

// FuzzWithin: a path accepted inside a workspace never leaves it; refusals
// are ErrPath (which host services answer a plugin as an invalid request).
func FuzzWithin(f *testing.F) {
	const dir = "/srv/forge/sessions/ws.0a1b2c3d"
	f.Fuzz(func(t *testing.T, rel string) {
		p, err := within(dir, rel)
		if err != nil {
			if !errors.Is(err, ErrPath) {
				t.Fatalf("refusal of %q is not an invalid path (ErrPath): %v", rel, err)
			}
			return
		}
		if p != dir && !strings.HasPrefix(p, dir+"/") {
			t.Fatalf("within(%q) = %q leaves %q", rel, p, dir)
		}
		if p != filepath.Clean(p) || strings.Contains(p, "\x00") {
			t.Fatalf("within(%q) = %q is not a clean path", rel, p)
		}
	})
}
