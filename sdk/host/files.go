package host

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// ReadDir reads the regular files directly in dir, sorted by name, capping
// each file at maxFile and all of them at maxTotal bytes (files over a cap
// are listed as Skipped). Symlinks and special files are never followed, so
// code in a sandbox cannot make the host read outside its workspace.
func ReadDir(dir string, maxFile, maxTotal int64) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []File
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := readCapped(filepath.Join(dir, e.Name()), maxFile, maxTotal-total)
		if err != nil {
			continue
		}
		total += int64(len(f.Data))
		out = append(out, f)
	}
	return out, nil
}

func readCapped(path string, maxFile, room int64) (File, error) {
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return File{}, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return File{}, os.ErrInvalid
	}
	f := File{Name: filepath.Base(path), Size: st.Size()}
	if st.Size() > maxFile || st.Size() > room {
		f.Skipped = true
		return f, nil
	}
	f.Data, err = io.ReadAll(io.LimitReader(fh, st.Size()))
	return f, err
}
