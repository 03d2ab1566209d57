package workspace

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// openDir walks rel's directories from the workspace root with openat and
// O_NOFOLLOW, so a symlink planted by sandboxed code anywhere on the path is
// refused rather than followed, even if it appears between two checks.
// With create, missing directories are made (0755, owned like the root).
// It returns a descriptor of the last directory and the final name.
func (w *Workspace) openDir(rel string, create bool) (int, string, error) {
	if _, err := w.Within(rel); err != nil {
		return -1, "", err
	}
	clean := filepath.Clean(rel)
	if clean == "." || clean == "" {
		return -1, "", host.Errorf(host.KindInvalid, "path %q names the workspace itself, not a file", rel)
	}
	parts := strings.Split(clean, "/")
	fd, err := syscall.Open(w.Path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", host.Errorf(host.KindInternal, "open workspace: %v", err)
	}
	var root syscall.Stat_t
	syscall.Fstat(fd, &root)
	for _, p := range parts[:len(parts)-1] {
		next, err := syscall.Openat(fd, p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if errors.Is(err, syscall.ENOENT) && create {
			if err = syscall.Mkdirat(fd, p, 0o755); err == nil || errors.Is(err, syscall.EEXIST) {
				next, err = syscall.Openat(fd, p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
				if err == nil {
					_ = syscall.Fchown(next, int(root.Uid), int(root.Gid))
				}
			}
		}
		syscall.Close(fd)
		if err != nil {
			return -1, "", pathErr(rel, err)
		}
		fd = next
	}
	return fd, parts[len(parts)-1], nil
}

func pathErr(rel string, err error) error {
	switch {
	case errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENOTDIR):
		return host.Errorf(host.KindPolicy, "path %q goes through a symbolic link or a non-directory in the workspace; links are never followed", rel)
	case errors.Is(err, syscall.ENOENT):
		return host.Errorf(host.KindNotFound, "path %q does not exist in the workspace", rel)
	}
	return host.Errorf(host.KindInternal, "path %q: %v", rel, err)
}

// PutFile writes data to rel without following links, replacing a regular
// file there. The file is owned like the workspace root so the sandbox user
// can change it.
func (w *Workspace) PutFile(rel string, data []byte) error {
	if len(data) > host.MaxFileBytes {
		return host.Errorf(host.KindInvalid, "file %q is %d bytes, over the %d-byte limit of one file; split it", rel, len(data), host.MaxFileBytes)
	}
	dir, name, err := w.openDir(rel, true)
	if err != nil {
		return err
	}
	defer syscall.Close(dir)
	var root syscall.Stat_t
	syscall.Stat(w.Path, &root)
	fd, err := syscall.Openat(dir, name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return pathErr(rel, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return host.Errorf(host.KindPolicy, "path %q is not a regular file", rel)
	}
	_ = f.Chown(int(root.Uid), int(root.Gid))
	if _, err := f.Write(data); err != nil {
		return host.Errorf(host.KindInternal, "write %q: %v", rel, err)
	}
	return nil
}

// GetFile reads the regular file rel, at most max bytes, without following
// links.
func (w *Workspace) GetFile(rel string, max int64) ([]byte, error) {
	if max <= 0 || max > host.MaxFileBytes {
		max = host.MaxFileBytes
	}
	dir, name, err := w.openDir(rel, false)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(dir)
	fd, err := syscall.Openat(dir, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathErr(rel, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, host.Errorf(host.KindPolicy, "path %q is not a regular file", rel)
	}
	if st.Size() > max {
		return nil, host.Errorf(host.KindInvalid, "file %q is %d bytes, over the %d-byte cap asked for", rel, st.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, host.Errorf(host.KindInternal, "read %q: %v", rel, err)
	}
	if int64(len(data)) > max {
		return nil, host.Errorf(host.KindInvalid, "file %q grew past the %d-byte cap while being read", rel, max)
	}
	return data, nil
}
