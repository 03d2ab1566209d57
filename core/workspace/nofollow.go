package workspace

import (
	"errors"

	"golang.org/x/sys/unix"
)

// PutFile writes data to rel for a plugin, without following links (Files:
// openat2 beneath the workspace), replacing a file there. The file is owned
// like the workspace root so the sandbox user can change it. Refusals are
// this package's errors (ErrLink, ErrPath, ...); the plugin API's limit on
// one file is its host services' to apply.
func (w *Workspace) PutFile(rel string, data []byte) error {
	f := NewFiles(w.Path)
	// A link at the target is refused for plugins, not replaced: a plugin
	// that finds one there has been handed a workspace it should not trust.
	if clean, err := CleanPath(rel); err == nil {
		if root, err := f.openRoot(); err == nil {
			fd, err := openBeneath(root, clean, unix.O_PATH, 0)
			unix.Close(root)
			if err == nil {
				unix.Close(fd)
			} else if !errors.Is(err, unix.ENOENT) {
				return pathErr(rel, err)
			}
		}
	}
	return f.WriteFile(rel, data)
}

// GetFile reads the regular file rel for a plugin, at most max bytes,
// without following links.
func (w *Workspace) GetFile(rel string, max int64) ([]byte, error) {
	return NewFiles(w.Path).ReadFile(rel, max)
}
