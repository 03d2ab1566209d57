package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWithin(t *testing.T) {
	cases := []struct {
		rel string
		ok  bool
	}{
		{"", true}, {"in/code.py", true}, {"a/../b", true},
		{"../x", false}, {"in/../../x", false}, {"/etc/passwd", false}, {"..", false}, {"a\x00b", false},
	}
	for _, c := range cases {
		p, err := within("/ws", c.rel)
		if (err == nil) != c.ok {
			t.Errorf("within(%q) = %q, %v", c.rel, p, err)
		}
		if err == nil && p != "/ws" && filepath.Dir(p) == "/" {
			t.Errorf("within(%q) left the workspace: %q", c.rel, p)
		}
	}
}

func TestDirUsageStopsEarly(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 20; i++ {
		os.WriteFile(filepath.Join(dir, string(rune('a'+i))), make([]byte, 1000), 0o644)
	}
	os.Symlink("/usr", filepath.Join(dir, "link")) // not followed
	size, files := dirUsage(dir, 1<<30, 1000)
	if size != 20000 || files != 22 {
		t.Fatalf("size %d files %d", size, files)
	}
	if size, _ := dirUsage(dir, 5000, 1000); size <= 5000 || size > 7000 {
		t.Fatalf("did not stop just past the limit: %d", size)
	}
}

// A plugin removes only the session workspace it made; once the core has
// destroyed the session and another plugin made a workspace for the same
// id, the first one's claim is gone.
func TestRemoveClaimed(t *testing.T) {
	m := New(t.TempDir(), "tag", 0, nil)
	w, err := m.Create("s1")
	if err != nil {
		t.Fatal(err)
	}
	m.Claim(w, "a")
	if ok, _ := m.RemoveClaimed("s1", "b"); ok {
		t.Fatal("plugin b removed plugin a's workspace")
	}
	m.RemoveSession("s1") // the core destroys the session
	w, _ = m.Create("s1")
	m.Claim(w, "b")
	if ok, _ := m.RemoveClaimed("s1", "a"); ok {
		t.Fatal("plugin a removed the workspace plugin b made later for the same id")
	}
	if ok, err := m.RemoveClaimed("s1", "b"); !ok || err != nil {
		t.Fatalf("owner could not remove: %v %v", ok, err)
	}
	if _, err := os.Stat(w.Path); !os.IsNotExist(err) {
		t.Fatalf("still there: %v", err)
	}
}

// A mount may name a file written from the intent's files (a file mount);
// anything else is a directory, created if needed. A link is not a file.
func TestDirFileMount(t *testing.T) {
	w := &Workspace{Path: t.TempDir()}
	if err := w.WriteFile("inputs/data/a.csv", []byte("x")); err != nil {
		t.Fatal(err)
	}
	p, err := w.Dir("inputs/data/a.csv")
	if fi, serr := os.Lstat(p); err != nil || serr != nil || !fi.Mode().IsRegular() {
		t.Fatalf("file mount source: %v %v", err, serr)
	}
	if p, err := w.Dir("out"); err != nil {
		t.Fatal(err)
	} else if fi, _ := os.Stat(p); !fi.IsDir() {
		t.Fatal("out is not a directory")
	}
	os.Symlink("/etc/passwd", filepath.Join(w.Path, "link"))
	if _, err := w.Dir("link"); err == nil {
		t.Fatal("a link was taken as a mount source")
	}
}

// A pool workspace bound to a session is that session's: its path, a later
// container's workspace and removal follow the binding, and neither the
// workspace nor the session can be bound twice.
func TestBind(t *testing.T) {
	m := New(t.TempDir(), "tag", 0, nil)
	pool, err := m.Create("wp1")
	if err != nil {
		t.Fatal(err)
	}
	m.Claim(pool, "jupyter")
	if _, err := m.Create("wp2"); err != nil {
		t.Fatal(err)
	}
	own, _ := m.Create("has-files")
	m.Claim(own, "jupyter")
	refusals := []struct{ name, session, pool, owner string }{
		{"another plugin's workspace", "s1", "wp1", "irkernel"},
		{"never claimed", "s1", "wp2", "jupyter"},
		{"never created", "s1", "wp9", "jupyter"},
		{"a session with files of its own", "has-files", "wp1", "jupyter"},
		{"invalid id", "s/1", "wp1", "jupyter"},
	}
	for _, r := range refusals {
		if err := m.Bind(r.session, r.pool, r.owner); err == nil {
			t.Errorf("%s: Bind(%s, %s, %s) succeeded", r.name, r.session, r.pool, r.owner)
		}
	}
	if err := m.Bind("s1", "wp1", "jupyter"); err != nil {
		t.Fatal(err)
	}
	if got := m.SessionPath("s1"); got != pool.Path {
		t.Errorf("SessionPath(s1) = %s, want the pool's %s", got, pool.Path)
	}
	if err := m.Bind("s2", "wp1", "jupyter"); err == nil {
		t.Error("a pool workspace was bound to a second session")
	}
	if removed, _ := m.RemoveClaimed("wp1", "jupyter"); removed {
		t.Error("the plugin removed a workspace bound to a session")
	}
	again, err := m.Create("s1")
	if err != nil || again.Path != pool.Path {
		t.Errorf("Create(s1) after Bind = %v, %v; want the pool workspace %s", again, err, pool.Path)
	}
	if m.SessionName("s1") != "s1.tag" {
		t.Errorf("SessionName(s1) = %s", m.SessionName("s1"))
	}
	if err := m.RemoveSession("s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(pool.Path); !os.IsNotExist(err) {
		t.Errorf("the bound workspace survived RemoveSession: %v", err)
	}
	if m.Bound("s1") != "" || m.SessionPath("s1") == pool.Path {
		t.Error("the binding survived RemoveSession")
	}
}

// DirName keeps every id an earlier version allowed (up to 48 characters)
// as its own name, and gives longer ones a name of at most 48 characters
// that keeps their start, differs for ids sharing that start and cannot
// be a short id's name.
func TestDirName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 40)
	for _, c := range []struct{ id, want string }{
		{"main", "main"},
		{strings.Repeat("x", 48), strings.Repeat("x", 48)},
	} {
		if got := DirName(c.id); got != c.want {
			t.Errorf("DirName(%q) = %q, want %q", c.id, got, c.want)
		}
	}
	seen := map[string]string{}
	for _, id := range []string{long + strings.Repeat("b", 9), long + strings.Repeat("c", 9), strings.Repeat("z", MaxSessionID), long + strings.Repeat("b", 88)} {
		if err := CheckSessionID(id); err != nil {
			t.Fatalf("%d characters: %v", len(id), err)
		}
		name := DirName(id)
		if len(name) > 48 || !strings.HasPrefix(name, id[:31]+"~") || SessionIDPattern.MatchString(name) {
			t.Errorf("DirName(%d characters) = %q", len(id), name)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("%q and %q share the name %q", id, other, name)
		}
		seen[name] = id
	}
	if CheckSessionID(strings.Repeat("z", MaxSessionID+1)) == nil {
		t.Error("an id over MaxSessionID was accepted")
	}
}

// A long session id's workspace is named by DirName, so its path does not
// grow with the id, and the manager finds it again by the id.
func TestLongSessionWorkspace(t *testing.T) {
	t.Parallel()
	m := New(t.TempDir(), "tag", 0, nil)
	id := strings.Repeat("s", 120)
	w, err := m.Create(id)
	if err != nil {
		t.Fatal(err)
	}
	if w.Name != DirName(id)+".tag" || m.SessionPath(id) != w.Path {
		t.Errorf("workspace %q at %s, SessionPath %s", w.Name, w.Path, m.SessionPath(id))
	}
	if _, err := os.Stat(w.Path); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveSession(id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.Path); !os.IsNotExist(err) {
		t.Errorf("after RemoveSession: %v", err)
	}
}
