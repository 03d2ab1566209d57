package prune

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func entry(path string, age time.Duration, now time.Time, inodes ...uint64) Entry {
	e := Entry{Path: path, LastUsed: now.Add(-age), Inodes: map[Inode]int64{}}
	for _, in := range inodes {
		e.Inodes[Inode{1, in}] = 100
	}
	return e
}

func paths(es []Entry) string {
	var s []string
	for _, e := range es {
		s = append(s, e.Path)
	}
	return strings.Join(s, " ")
}

func TestPlan(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	// layer-old links its file (inode 1) from cache-a: removing one of them
	// frees nothing while the other stays.
	entries := []Entry{
		entry("cache-a", 50*day, now, 1),
		entry("layer-old", 40*day, now, 1, 2),
		entry("layer-mid", 5*day, now, 3, 4),
		entry("layer-new", 2*time.Hour, now, 5),
		entry("in-flight", time.Minute, now, 6, 7, 8),
	}
	for _, tc := range []struct {
		name          string
		l             Limits
		remove        string
		before, after int64
	}{
		{"no bounds", Limits{}, "", 800, 800},
		{"age", Limits{MaxAge: 30 * day}, "cache-a layer-old", 800, 600},
		{"size, least recently used first", Limits{MaxBytes: 500}, "cache-a layer-old layer-mid", 800, 400},
		{"size already met", Limits{MaxBytes: 800}, "", 800, 800},
		{"size and age", Limits{MaxAge: 45 * day, MaxBytes: 700}, "cache-a layer-old", 800, 600},
		{"grace keeps what a build may be using", Limits{MaxBytes: 1, Grace: 10 * time.Minute}, "cache-a layer-old layer-mid layer-new", 800, 300},
		{"keep", Limits{MaxBytes: 1, Grace: time.Second, Keep: map[string]bool{"layer-mid": true}}, "cache-a layer-old layer-new in-flight", 800, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rm, before, after := Plan(entries, now, tc.l)
			if paths(rm) != tc.remove || before != tc.before || after != tc.after {
				t.Fatalf("remove %q (%d → %d), want %q (%d → %d)", paths(rm), before, after, tc.remove, tc.before, tc.after)
			}
		})
	}
}

// Children and Scan see hard links as one file.
func TestChildren(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"cache/archive/x", "layers/l1/tree"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f := filepath.Join(root, "cache/archive/x/mod.py")
	if err := os.WriteFile(f, make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(f, filepath.Join(root, "layers/l1/tree/mod.py")); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	es, err := Children(func(p string) time.Time {
		if strings.Contains(p, "layers") {
			return old
		}
		return time.Time{}
	}, filepath.Join(root, "layers"), filepath.Join(root, "cache/archive"), filepath.Join(root, "missing"))
	if err != nil || len(es) != 2 {
		t.Fatalf("%+v %v", es, err)
	}
	if !es[0].LastUsed.Equal(old) || es[1].LastUsed.Before(old) {
		t.Fatalf("last used %v %v", es[0].LastUsed, es[1].LastUsed)
	}
	rm, before, after := Plan(es, time.Now(), Limits{MaxBytes: 1})
	if before != 1000 || after != 0 || len(rm) != 2 {
		t.Fatalf("%d → %d, %s", before, after, paths(rm))
	}
}
