package workspace

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Untar unpacks a tar that a sandbox produced into dst, a new directory of
// the core's: only directories and regular files (links, devices and
// anything else are named in left, never created), names kept beneath dst,
// at most limit bytes counted as CopyOut counts them (0: no limit; past it
// ErrOverLimit); names for which skip is true are passed over. Nothing in dst is ever a link, so nothing is written
// through one.
func Untar(r io.Reader, dst string, limit int64, skip func(string) bool) (left []string, used int64, err error) {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return nil, 0, err
	}
	charge := func(what string, n int64) error {
		used += n
		if limit > 0 && used > limit {
			return fmt.Errorf("%w: %s brings the copy to %d bytes, over its limit of %d", ErrOverLimit, what, used, limit)
		}
		return nil
	}
	tr := tar.NewReader(r)
	files := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return left, used, nil
		}
		if err != nil {
			return nil, used, fmt.Errorf("the sandbox's copy: %w", err)
		}
		if files++; files > MaxFiles {
			return nil, used, fmt.Errorf("more than %d files: too many to copy", MaxFiles)
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if name == "" || name == "." {
			continue
		}
		if _, err := CleanPath(name); err != nil {
			left = append(left, name)
			continue
		}
		if skip != nil && skip(name) {
			continue
		}
		target := filepath.Join(dst, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return nil, used, err
			}
			if err := charge("directory "+quote(name), 4096); err != nil {
				return nil, used, err
			}
		case tar.TypeReg:
			if err := charge(quote(name), h.Size); err != nil {
				return nil, used, err
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				return nil, used, err
			}
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				return nil, used, err
			}
			_, err = io.CopyN(f, tr, h.Size)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, used, fmt.Errorf("%s: %w", quote(name), err)
			}
		default:
			kind := map[byte]string{tar.TypeSymlink: "symlink", tar.TypeLink: "link", tar.TypeFifo: "fifo", tar.TypeChar: "device", tar.TypeBlock: "device"}[h.Typeflag]
			if kind == "" {
				kind = "other"
			}
			left = append(left, name+" ("+kind+")")
		}
	}
}
