package runtime

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"
)

// TarDir writes the tree under dir (a directory of the core's) as a tar:
// directories, regular files, and links as links (never followed); other
// files are left out. Owners are not kept: what unpacks it owns it.
func TarDir(w io.Writer, dir string) error {
	return TarTrees(w, Tree{Dir: dir})
}

// Tree is a directory of the core's and where it goes in a tar.
type Tree struct {
	Dir    string
	Prefix string // "" or a clean relative path its entries go under
}

// TarTrees writes several trees into one tar, each under its prefix (the
// prefix's own directories are not written: they are where the tar is
// unpacked).
func TarTrees(w io.Writer, trees ...Tree) error {
	tw := tar.NewWriter(w)
	for _, t := range trees {
		if err := tarTree(tw, t); err != nil {
			return err
		}
	}
	return tw.Close()
}

func tarTree(tw *tar.Writer, t Tree) error {
	dir := t.Dir
	if dir == "" {
		return nil
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == dir {
				return filepath.SkipAll
			}
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil // sockets, fifos: nothing a copy could use
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = path.Join(t.Prefix, filepath.ToSlash(rel)), 0, 0, "", ""
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, fi.Size())
		return err
	})
	if err != nil {
		return fmt.Errorf("workspace %s: %w", dir, err)
	}
	return nil
}
