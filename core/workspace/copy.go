package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrOverLimit is a copy stopped at its byte limit (CopyOut): what the
// sandboxed code wrote never decides how much the host writes.
var ErrOverLimit = errors.New("over the copy's limit")

// chunk is the unit of a streamed copy: files are never read whole into
// memory, and a chunk of zeros becomes a hole in the copy.
const chunk = 128 << 10

var zeros = make([]byte, chunk)

// Usage is what one file or directory costs: its apparent size, or the
// space allocated to it if that is larger (blocks preallocated past the
// end, block rounding). A sparse file costs its apparent size: that is what
// it would cost once copied anywhere that does not keep holes.
func Usage(st *unix.Stat_t) int64 {
	return max(st.Size, st.Blocks*512)
}

// DiskUsage is the Usage of everything under dir (not following links),
// skipping the directories for which skip is true (nil: none). A missing
// dir is 0.
func DiskUsage(dir string, skip func(path string) bool) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && p != dir && skip != nil && skip(p) {
			return filepath.SkipDir
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			n += Usage(&st)
		}
		return nil
	})
	return n
}

// copyData streams src into dst (at its start) chunk by chunk and returns
// the bytes read. With sparse it seeks over chunks of zeros instead of
// writing them and sets dst's size to what was read: holes stay holes, so
// a sparse file copied costs the host only its data.
func copyData(dst *os.File, src io.Reader, sparse bool) (int64, error) {
	buf := make([]byte, chunk)
	var n int64
	for {
		m, rerr := io.ReadFull(src, buf)
		if m > 0 {
			if sparse && bytes.Equal(buf[:m], zeros[:m]) {
				if _, err := dst.Seek(int64(m), io.SeekCurrent); err != nil {
					return n, err
				}
			} else if _, err := dst.Write(buf[:m]); err != nil {
				return n, err
			}
			n += int64(m)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return n, rerr
		}
	}
	if !sparse {
		return n, nil
	}
	return n, dst.Truncate(n)
}

// CopyOut copies the regular files and directories beneath the root into
// dst (a host directory of the core's, created here), skipping names for
// which skip is true; links, pipes and devices are left out and named in
// the answer. The copy costs the host at most limit bytes (0: no limit),
// counted as it goes by Usage of each source file and of what was written:
// the first file that would pass the limit stops the copy with ErrOverLimit
// before anything of it is read, a file that grows past it while read stops
// it after at most limit bytes. Files are streamed and holes kept (a sparse
// file is written sparse but counts at its apparent size). used is what the
// copy cost. Files and directories keep their modification times (a gVisor
// snapshot restores only over files as they were). On an error dst is
// left for the caller to remove.
func (f *Files) CopyOut(dst string, limit int64, skip func(string) bool) (left []string, used int64, err error) {
	entries, truncated, err := f.List(".", MaxFiles)
	if err != nil {
		return nil, 0, err
	}
	if truncated {
		return nil, 0, fmt.Errorf("more than %d files: too many to copy", MaxFiles)
	}
	root, err := f.openRoot()
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(root)
	charge := func(what string, n int64) error {
		used += n
		if limit > 0 && used > limit {
			return fmt.Errorf("%w: %s brings the copy to %d bytes, over its limit of %d", ErrOverLimit, what, used, limit)
		}
		return nil
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return nil, used, err
	}
	var dirs []Entry // their times are set once their contents are written
	defer func() {
		for i := len(dirs) - 1; i >= 0 && err == nil; i-- {
			err = os.Chtimes(dst+"/"+dirs[i].Path, dirs[i].Modified, dirs[i].Modified)
		}
	}()
	for _, e := range entries {
		if skip != nil && skip(e.Path) {
			continue
		}
		target := dst + "/" + e.Path
		switch e.Type {
		case "directory":
			if fd, err := openBeneath(root, e.Path, unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
				unix.Close(fd)
			} else if errors.Is(err, unix.EACCES) {
				// Closed to the server by the sandboxed code (rootless.go):
				// named as left out, as a link is, not a failed copy.
				left = append(left, e.Path+" (directory not readable by the server)")
				continue
			}
			if err := os.Mkdir(target, 0o700); err != nil {
				return nil, used, err
			}
			var st unix.Stat_t
			if err := unix.Lstat(target, &st); err != nil {
				return nil, used, err
			}
			if err := charge("directory "+quote(e.Path), Usage(&st)); err != nil {
				return nil, used, err
			}
			dirs = append(dirs, e)
		case "file":
			room := int64(-1)
			if limit > 0 {
				room = limit - used
			}
			n, err := f.copyFileOut(root, e.Path, target, room)
			if errors.Is(err, ErrLink) || errors.Is(err, ErrNotRegular) || errors.Is(err, ErrNotFound) {
				left = append(left, e.Path) // changed under us
				continue
			}
			if errors.Is(err, ErrDenied) {
				left = append(left, e.Path+" (file not readable by the server)")
				continue
			}
			if err == nil {
				err = charge(quote(e.Path), n)
			}
			if err != nil {
				return nil, used, err
			}
		default:
			left = append(left, e.Path+" ("+e.Type+")")
		}
	}
	return left, used, nil
}

// copyFileOut streams rel (beneath root, never through a link) to target, a
// new file, and returns what it cost (Usage of the source at its open, of
// the bytes read and of the copy, the largest). room < 0: no limit;
// otherwise a source whose Usage is over room is refused before it is read,
// and at most room+1 bytes are read of one that grows meanwhile.
func (f *Files) copyFileOut(root int, rel, target string, room int64) (int64, error) {
	// O_NONBLOCK: opening a pipe swapped in must not wait for a writer.
	fd, err := openBeneath(root, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.EACCES) {
		fd, err = openDenied(f, rel, err) // unshare.go
	}
	if err != nil {
		return 0, pathErr(rel, err)
	}
	src := os.NewFile(uintptr(fd), rel)
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("%w: %s is a %s", ErrNotRegular, quote(rel), kind(st.Mode))
	}
	cost := Usage(&st)
	if room >= 0 && cost > room {
		return 0, fmt.Errorf("%w: %s is %d bytes (%d allocated), more than the %d bytes left of the copy's limit", ErrOverLimit, quote(rel), st.Size, st.Blocks*512, room)
	}
	out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	var r io.Reader = src
	if room >= 0 {
		r = io.LimitReader(src, room+1)
	}
	n, err := copyData(out, r, true)
	if err != nil {
		return 0, err
	}
	if room >= 0 && n > room {
		return 0, fmt.Errorf("%w: %s grew past the %d bytes left of the copy's limit while it was copied", ErrOverLimit, quote(rel), room)
	}
	var dst unix.Stat_t
	if err := unix.Fstat(int(out.Fd()), &dst); err != nil {
		return 0, err
	}
	if err := setTimes(int(out.Fd()), []unix.Timespec{st.Atim, st.Mtim}); err != nil {
		return 0, err
	}
	return max(cost, n, Usage(&dst)), out.Close()
}

// CopyIn writes the regular files and directories under src (a host
// directory of the core's, as CopyOut made it) beneath the root, each file
// streamed and with its holes kept, files and directories with their
// modification times.
func (f *Files) CopyIn(src string) error {
	type dir struct {
		rel   string
		times []unix.Timespec
	}
	var dirs []dir
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == src {
				return nil
			}
			return err
		}
		if p == src || !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		times := []unix.Timespec{st.Atim, st.Mtim}
		if d.IsDir() {
			dirs = append(dirs, dir{filepath.ToSlash(rel), times})
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		return f.writeFrom(filepath.ToSlash(rel), in, true, times)
	})
	if err != nil || len(dirs) == 0 {
		return err
	}
	root, uid, gid, err := f.openOwnedRoot()
	if err != nil {
		return err
	}
	defer unix.Close(root)
	// Deepest first, once every file is in: a directory written into
	// afterwards would take the time of that write.
	for i := len(dirs) - 1; i >= 0; i-- {
		fd, err := f.mkdirs(root, dirs[i].rel, uid, gid)
		if err != nil {
			return err
		}
		err = setTimes(fd, dirs[i].times)
		unix.Close(fd)
		if err != nil && f.shared() && errors.Is(err, unix.EPERM) {
			// A directory the sandbox user owns, whose times only it or
			// root may set (rootless.go): it keeps its own.
			err = nil
		}
		if err != nil {
			return pathErr(dirs[i].rel, err)
		}
	}
	return nil
}

// RegularSize is the size of rel if it is a regular file beneath the root
// (not through a link); otherwise an error saying what it is.
func (f *Files) RegularSize(rel string) (int64, error) {
	clean, err := CleanPath(rel)
	if err != nil {
		return 0, err
	}
	root, err := f.openRoot()
	if err != nil {
		return 0, err
	}
	defer unix.Close(root)
	fd, err := openBeneath(root, clean, unix.O_PATH, 0)
	if err != nil {
		return 0, pathErr(rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("%w: %s is a %s", ErrNotRegular, quote(rel), kind(st.Mode))
	}
	return st.Size, nil
}
