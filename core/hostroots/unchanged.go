package hostroots

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Rules of the refusals around a root.
const (
	// RuleChanged: a root is no longer what the server checked at start.
	RuleChanged = "host-root-changed"
	// RuleUnknown: a root that does not exist or is not the caller's.
	RuleUnknown = "host-root"
)

// ErrChanged: a root is no longer the directory the server checked at
// start (replaced, by a link say); nothing is mounted from it.
var ErrChanged = errors.New("the host root changed since the server started")

// Unchanged checks that r's path is still the directory New checked: not
// a link, the same device and inode.
func (r *Root) Unchanged() error {
	st, err := os.Lstat(r.Path)
	if err != nil {
		return fmt.Errorf("%w: %q (%s): %v", ErrChanged, r.Name, r.Path, err)
	}
	if st.Mode()&os.ModeSymlink != 0 || !st.IsDir() {
		return fmt.Errorf("%w: %q (%s) is no longer a directory but %s: nothing is mounted from it; restore the directory and restart the server", ErrChanged, r.Name, r.Path, st.Mode().Type())
	}
	if id, ok := fileID(st); ok && r.id != (fileKey{}) && id != r.id {
		return fmt.Errorf("%w: %q (%s) is another directory than the one checked at start (replaced): nothing is mounted from it; restart the server to accept it", ErrChanged, r.Name, r.Path)
	}
	return nil
}

type fileKey struct{ dev, ino uint64 }

func fileID(st os.FileInfo) (fileKey, bool) {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{uint64(s.Dev), s.Ino}, true
}
