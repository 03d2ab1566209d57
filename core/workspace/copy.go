package workspace

import (
	"io/fs"
	"os"
	"path/filepath"
)

// filepathWalkFiles calls fn with every regular file under dir (trusted:
// written by the core) and its path relative to dir.
func filepathWalkFiles(dir string, fn func(rel string, data []byte) error) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == dir {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), data)
	})
}
