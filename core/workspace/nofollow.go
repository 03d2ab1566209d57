package workspace

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// PutFile writes data to rel for a plugin, without following links (Files:
// openat2 beneath the workspace), replacing a file there. The file is owned
// like the workspace root so the sandbox user can change it.
func (w *Workspace) PutFile(rel string, data []byte) error {
	if len(data) > host.MaxFileBytes {
		return host.Errorf(host.KindInvalid, "file %q is %d bytes, over the %d-byte limit of one file; split it", rel, len(data), host.MaxFileBytes)
	}
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
				return hostErr(pathErr(rel, err))
			}
		}
	}
	return hostErr(f.WriteFile(rel, data))
}

// GetFile reads the regular file rel for a plugin, at most max bytes,
// without following links.
func (w *Workspace) GetFile(rel string, max int64) ([]byte, error) {
	if max <= 0 || max > host.MaxFileBytes {
		max = host.MaxFileBytes
	}
	data, err := NewFiles(w.Path).ReadFile(rel, max)
	return data, hostErr(err)
}

// hostErr gives a file refusal the kind a plugin sees.
func hostErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrLink), errors.Is(err, ErrNotRegular):
		return host.Errorf(host.KindPolicy, "%v", err)
	case errors.Is(err, ErrNotFound):
		return host.Errorf(host.KindNotFound, "%v", err)
	case errors.Is(err, ErrPath), errors.Is(err, ErrTooLarge), errors.Is(err, ErrNoSpace):
		return host.Errorf(host.KindInvalid, "%v", err)
	}
	return host.Errorf(host.KindInternal, "%v", err)
}
