package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-forge/mcp-forge/core/workspace"
)

func newDir(t *testing.T, quota int64) (*Dir, string) {
	t.Helper()
	base := t.TempDir()
	return NewDir(filepath.Join(base, "state", "checkpoints"), quota), base
}

// files is a write that puts the named files, of the given sizes, into
// the checkpoint, within its budget as workspace.Files.CopyOut would.
func files(sizes map[string]int, left ...string) func(string, int64) ([]string, error) {
	return func(dir string, budget int64) ([]string, error) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		var total int64
		for name, n := range sizes {
			if total += int64(n); total > budget {
				return nil, workspace.ErrOverLimit
			}
			if err := os.WriteFile(filepath.Join(dir, name), make([]byte, n), 0o600); err != nil {
				return nil, err
			}
		}
		return left, nil
	}
}

func meta(owner, id string, created time.Time) Meta {
	return Meta{SessionID: id, Client: owner, Language: "python", Backend: "k", Created: created, Saved: []string{"x"}}
}

// Put stores a checkpoint its owner alone gets and lists, with its size,
// under 0700 directories that do not carry the owner's name; Read gives
// back its files; Remove deletes it.
func TestPutGetListRemove(t *testing.T) {
	t.Parallel()
	d, base := newDir(t, 10<<20)
	now := time.Now().Truncate(time.Second)
	m, err := d.Put(meta("tenant:alice", "main", now.Add(-time.Minute)), 0, files(map[string]int{"a.csv": 100}, "fifo"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Bytes <= 100 || len(m.FilesLeft) != 1 {
		t.Fatalf("stored: %+v", m)
	}
	if _, err := d.Put(meta("tenant:alice", "second", now), 0, files(nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(meta("tenant:bob", "main", now), 0, files(nil)); err != nil {
		t.Fatal(err)
	}
	got, err := d.Get("tenant:alice", "main")
	if d := cmp.Diff(m, got); d != "" || err != nil {
		t.Errorf("Get (-put +got):\n%s %v", d, err)
	}
	var ids []string
	for _, c := range d.List("tenant:alice") {
		ids = append(ids, c.SessionID)
	}
	if d := cmp.Diff([]string{"second", "main"}, ids); d != "" {
		t.Errorf("alice's checkpoints, newest first (-want +got):\n%s", d)
	}
	if got := d.List("tenant:carol"); got == nil || len(got) != 0 {
		t.Errorf("carol lists %#v", got)
	}
	if _, err := d.Get("tenant:carol", "main"); !errors.Is(err, ErrNotFound) {
		t.Errorf("carol gets alice's: %v", err)
	}
	for _, p := range []string{filepath.Join(base, "state"), filepath.Join(base, "state", "checkpoints"), filepath.Dir(d.Path("tenant:alice", "main"))} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o700 || strings.Contains(p, "alice") {
			t.Errorf("%s: %v %v, want 0700 and no owner name", p, fi.Mode(), err)
		}
	}
	var read []string
	if err := d.Read("tenant:alice", "main", func(dir string) error {
		es, err := os.ReadDir(dir)
		for _, e := range es {
			read = append(read, e.Name())
		}
		return err
	}); err != nil || len(read) != 1 || read[0] != "a.csv" {
		t.Errorf("Read: %v %v", read, err)
	}
	if !d.Remove("tenant:alice", "main") || d.Remove("tenant:alice", "main") || d.Remove("tenant:alice", "../x") {
		t.Error("Remove reports wrongly")
	}
	if _, err := d.Get("tenant:alice", "main"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after Remove: %v", err)
	}
}

// A record under owner's key that names someone else is not owner's.
func TestForeign(t *testing.T) {
	t.Parallel()
	d, _ := newDir(t, 10<<20)
	if _, err := d.Put(meta("c1", "s", time.Now()), 0, files(nil)); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(d.Path("c1", "s"), "meta.json"), []byte(`{"session_id":"s","owner":"c2"}`), 0o600)
	if _, err := d.Get("c1", "s"); !errors.Is(err, ErrForeign) {
		t.Fatalf("Get: %v", err)
	}
	if got := d.List("c1"); len(got) != 0 {
		t.Fatalf("listed: %+v", got)
	}
}

// A checkpoint over its quota, or over the store's room, is refused (an
// ErrOverLimit, a *FullError), leaves nothing and keeps the previous one.
func TestBounds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		store int64
		quota int64
		size  int
		full  bool // else over quota
	}{
		{"over the quota", 10 << 20, 64 << 10, 100 << 10, false},
		{"over the store", 200 << 10, 1 << 20, 300 << 10, true},
		{"no quota, over the store", 200 << 10, 0, 300 << 10, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d, _ := newDir(t, c.store)
			prev, err := d.Put(meta("o", "s", time.Now()), c.quota, files(map[string]int{"small": 10}))
			if err != nil {
				t.Fatal(err)
			}
			_, err = d.Put(meta("o", "s", time.Now()), c.quota, files(map[string]int{"big": c.size}))
			var fe *FullError
			switch {
			case c.full && !errors.As(err, &fe):
				t.Fatalf("want a *FullError, got %v", err)
			case !c.full && (!errors.Is(err, workspace.ErrOverLimit) || errors.As(err, &fe)):
				t.Fatalf("want ErrOverLimit, got %v", err)
			}
			got, err := d.Get("o", "s")
			if d := cmp.Diff(prev, got); d != "" || err != nil {
				t.Errorf("the previous checkpoint (-want +got):\n%s %v", d, err)
			}
			entries, _ := os.ReadDir(filepath.Dir(d.Path("o", "s")))
			if len(entries) != 1 {
				t.Errorf("left in the store: %v", entries)
			}
		})
	}
	d, _ := newDir(t, 1)
	if _, err := d.Put(meta("o", "s", time.Now()), 0, files(nil)); !errors.As(err, new(*FullError)) {
		t.Fatalf("a store without room: %v", err)
	}
}

// Expire removes checkpoints older than the TTL, reporting each, and old
// debris silently; younger ones stay.
func TestExpire(t *testing.T) {
	t.Parallel()
	d, _ := newDir(t, 10<<20)
	now := time.Now()
	for id, age := range map[string]time.Duration{"old": 2 * time.Hour, "young": 30 * time.Minute} {
		if _, err := d.Put(meta("c1", id, now.Add(-age)), 0, files(nil)); err != nil {
			t.Fatal(err)
		}
	}
	debris := d.Path("c1", "x.new")
	os.MkdirAll(debris, 0o700)
	os.Chtimes(debris, now.Add(-2*time.Hour), now.Add(-2*time.Hour))
	var removed []string
	d.Expire(now, time.Hour, func(m Meta, err error) {
		if err != nil {
			t.Error(err)
		}
		removed = append(removed, m.SessionID)
	})
	if d := cmp.Diff([]string{"old"}, removed); d != "" {
		t.Errorf("removed (-want +got):\n%s", d)
	}
	if _, err := os.Stat(debris); !os.IsNotExist(err) {
		t.Error("old debris stays")
	}
	if _, err := d.Get("c1", "young"); err != nil {
		t.Errorf("the young checkpoint: %v", err)
	}
}

func TestRestoreNotice(t *testing.T) {
	t.Parallel()
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	got := RestoreNotice(Meta{SessionID: "s", Created: created, Saved: []string{"a", "b"}, Skipped: map[string]string{"z": "open file", "f": "a lambda"}})
	want := "Session s was restored in a new kernel from its checkpoint of 2025-01-02T03:04:05Z: 2 variable(s) back (a, b). Not saved at the checkpoint: f (a lambda); z (open file)."
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// A server killed mid-checkpoint leaves <id>.new behind, counted against
// the store's bound: the next sweep removes it once nothing has written it
// for InterruptedAge, long before the TTL (it stayed a week: red team),
// while a partial copy being written, here or by a server sharing the
// store, stays.
func TestExpireRemovesInterruptedCheckpoints(t *testing.T) {
	t.Parallel()
	d, _ := newDir(t, 10<<20)
	now := time.Now()
	partial := func(id string, age time.Duration) string {
		p := d.Path("c1", id) + ".new"
		if err := os.MkdirAll(filepath.Join(p, "work"), 0o700); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(p, "work", "big")
		if err := os.WriteFile(f, make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{f, filepath.Join(p, "work"), p} {
			os.Chtimes(q, now.Add(-age), now.Add(-age))
		}
		return p
	}
	dead := partial("dead", 2*InterruptedAge)
	writing := partial("writing", time.Minute)
	building := partial("building", 2*InterruptedAge)
	d.mu.Lock()
	d.building[building] = 1
	d.mu.Unlock()
	d.Expire(now, time.Hour, func(Meta, error) {})
	for p, want := range map[string]bool{dead: false, writing: true, building: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", filepath.Base(p), err == nil, want)
		}
	}
}

// A long session id's checkpoint lies under a derived name (the id cut and
// hashed), is found, listed and removed by the id, and two long ids that
// start alike keep apart. A checkpoint an earlier version wrote, in a
// directory named by the id itself, is found as before.
func TestCheckpointNames(t *testing.T) {
	t.Parallel()
	d, _ := newDir(t, 10<<20)
	now := time.Now().Truncate(time.Second)
	long1, long2 := strings.Repeat("L", 100)+"-1", strings.Repeat("L", 100)+"-2"
	for i, id := range []string{long1, long2} {
		if _, err := d.Put(meta("o", id, now.Add(time.Duration(i)*time.Second)), 0, files(map[string]int{"f": 10 + i})); err != nil {
			t.Fatal(err)
		}
		if name := filepath.Base(d.Path("o", id)); name != workspace.DirName(id) || len(name) > 48 {
			t.Errorf("checkpoint of %s lies in %q", id, name)
		}
	}
	if d.Path("o", long1) == d.Path("o", long2) {
		t.Fatal("two ids share a checkpoint directory")
	}
	// Written as the store did before names were derived: <owner key>/<id>.
	old := strings.Repeat("o", 48)
	dir := filepath.Join(filepath.Dir(d.Path("o", "x")), old)
	if err := os.MkdirAll(filepath.Join(dir, "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeMeta(dir, meta("o", old, now.Add(-time.Hour))); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range d.List("o") {
		ids = append(ids, c.SessionID)
	}
	if diff := cmp.Diff([]string{long2, long1, old}, ids); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}
	for _, id := range []string{long1, old} {
		if m, err := d.Get("o", id); err != nil || m.SessionID != id {
			t.Errorf("Get(%s) = %+v, %v", id, m, err)
		}
	}
	if !d.Remove("o", long1) {
		t.Error("Remove(long1) found nothing")
	}
	if _, err := d.Get("o", long2); err != nil {
		t.Errorf("removing long1 touched long2: %v", err)
	}
}

// A store on a volume's root (a shared sessions.checkpoint_dir) leaves the
// root as the volume gives it: it makes only its own directory private.
func TestDirOnAVolume(t *testing.T) {
	volume := t.TempDir()
	if err := os.Chmod(volume, 0o775|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	d := NewDir(filepath.Join(volume, "store"), 1<<20)
	if _, err := d.Put(Meta{Client: "tenant:alice", SessionID: "main"}, 0, files(map[string]int{"a": 10})); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{volume: 0o775 | os.ModeSetgid, filepath.Join(volume, "store"): 0o700} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&(os.ModePerm|os.ModeSetgid) != want {
			t.Errorf("%s: %v %v, want %v", p, fi.Mode(), err, want)
		}
	}
	if _, err := d.Get("tenant:alice", "main"); err != nil {
		t.Error(err)
	}
}

// A store that is a symbolic link (someone else writing the shared volume
// pointed it elsewhere) takes no checkpoint.
func TestDirRefusesALinkedStore(t *testing.T) {
	volume, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(volume, "store")); err != nil {
		t.Fatal(err)
	}
	d := NewDir(filepath.Join(volume, "store"), 1<<20)
	if _, err := d.Put(Meta{Client: "tenant:alice", SessionID: "main"}, 0, files(map[string]int{"a": 10})); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("a checkpoint into a linked store: %v", err)
	}
	if es, _ := os.ReadDir(elsewhere); len(es) != 0 {
		t.Errorf("written through the link: %v", es)
	}
}

// A client's share bounds its checkpoints together, wherever the store has
// room: one client filling its share is refused as such (Client), another
// still stores; a client without a share has the store's bound alone.
func TestClientShare(t *testing.T) {
	t.Parallel()
	d, _ := newDir(t, 10<<20)
	d.WithClientQuota(func(c string) int64 {
		if c == "alice" {
			return 300 << 10
		}
		return 0
	})
	if _, err := d.Put(meta("alice", "one", time.Now()), 0, files(map[string]int{"a": 200 << 10})); err != nil {
		t.Fatal(err)
	}
	_, err := d.Put(meta("alice", "two", time.Now()), 0, files(map[string]int{"b": 200 << 10}))
	var fe *FullError
	if !errors.As(err, &fe) || !fe.Client || fe.Quota != 300<<10 || !strings.Contains(err.Error(), "share") {
		t.Fatalf("over alice's share: %v (%+v)", err, fe)
	}
	if _, err := d.Get("alice", "two"); err == nil {
		t.Error("the refused checkpoint was kept")
	}
	for _, id := range []string{"one", "two", "three"} {
		if _, err := d.Put(meta("bob", id, time.Now()), 0, files(map[string]int{"b": 200 << 10})); err != nil {
			t.Fatalf("bob, who has no share of his own: %v", err)
		}
	}
	// Replacing alice's one checkpoint with a smaller one fits: the share
	// counts what is on disk.
	if _, err := d.Put(meta("alice", "one", time.Now()), 0, files(map[string]int{"a": 50 << 10})); err != nil {
		t.Fatalf("alice replacing her checkpoint: %v", err)
	}
}
