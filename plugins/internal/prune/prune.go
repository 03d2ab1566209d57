// Package prune bounds what a builder plugin keeps between builds: its
// layers and its download caches (environment_builder.storage). A builder
// lists its entries (a layer directory, a cache entry), each with the time
// it was last used; Plan picks what to remove, Remove removes it.
package prune

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// Entry is one unit of a builder's storage, removed whole.
type Entry struct {
	Path     string
	LastUsed time.Time
	// Inodes are the entry's regular files (device and inode, with their
	// size): a file hard-linked into several entries (a layer links its
	// files from the cache) is freed only when the last of them goes.
	Inodes map[Inode]int64
}

// Inode identifies a file on its filesystem.
type Inode struct{ Dev, Ino uint64 }

// Limits are environment_builder.storage's (zero: no such bound), and the
// entries never removed.
type Limits struct {
	MaxAge   time.Duration
	MaxBytes int64
	// Grace keeps entries used this recently: a build in flight may be
	// reading them (a layer between the builder and the core's layering).
	Grace time.Duration
	Keep  map[string]bool // paths never removed (the layer of this build)
}

// Plan returns the entries to remove, oldest first, and the bytes all
// entries take before and after: every entry unused for longer than
// MaxAge, then the least recently used until the rest takes at most
// MaxBytes (as far as Grace and Keep allow).
func Plan(entries []Entry, now time.Time, l Limits) (remove []Entry, before, after int64) {
	refs := map[Inode]int{}
	size := map[Inode]int64{}
	for _, e := range entries {
		for in, n := range e.Inodes {
			if refs[in] == 0 {
				before += n
			}
			refs[in]++
			size[in] = n
		}
	}
	after = before
	sorted := slices.Clone(entries)
	slices.SortStableFunc(sorted, func(a, b Entry) int { return a.LastUsed.Compare(b.LastUsed) })
	drop := func(e Entry) {
		remove = append(remove, e)
		for in := range e.Inodes {
			if refs[in]--; refs[in] == 0 {
				after -= size[in]
			}
		}
	}
	for _, e := range sorted {
		if l.Keep[e.Path] || now.Sub(e.LastUsed) < l.Grace {
			continue
		}
		switch {
		case l.MaxAge > 0 && now.Sub(e.LastUsed) > l.MaxAge:
			drop(e)
		case l.MaxBytes > 0 && after > l.MaxBytes:
			drop(e)
		}
	}
	return remove, before, after
}

// Scan makes the entry of a directory (or file): its files' inodes, and
// lastUsed as given (zero: its own modification time).
func Scan(path string, lastUsed time.Time) (Entry, error) {
	e := Entry{Path: path, LastUsed: lastUsed, Inodes: map[Inode]int64{}}
	if lastUsed.IsZero() {
		st, err := os.Lstat(path)
		if err != nil {
			return e, err
		}
		e.LastUsed = st.ModTime()
	}
	err := filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			e.Inodes[Inode{uint64(st.Dev), st.Ino}] = fi.Size()
		}
		return nil
	})
	return e, err
}

// Children are the entries of every directory entry of dirs (a builder's
// layers/ directory, its cache's buckets), each last used at its own
// modification time unless lastUsed says otherwise.
func Children(lastUsed func(path string) time.Time, dirs ...string) ([]Entry, error) {
	var out []Entry
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		for _, de := range ents {
			p := filepath.Join(d, de.Name())
			var t time.Time
			if lastUsed != nil {
				t = lastUsed(p)
			}
			e, err := Scan(p, t)
			if err != nil {
				if os.IsNotExist(err) {
					continue // removed meanwhile
				}
				return nil, err
			}
			out = append(out, e)
		}
	}
	return out, nil
}
