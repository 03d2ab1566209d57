package forge

import (
	"fmt"
	"os"
)

// privateBase makes a non-root server's base path its own and 0700. A
// rootless sandbox runs with umask 0000 (so that the server, an ordinary
// user that is not the sandbox's uid, can connect to kernel sockets and
// remove what the sandbox wrote), which leaves its files open to anyone who
// can reach them: this directory is what keeps other host users out.
func privateBase(path string) error {
	if os.Geteuid() == 0 {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(path, 0o700); err != nil {
		return fmt.Errorf("volumes.base_path %s is open to other users (%v) and cannot be made private: %w", path, st.Mode().Perm(), err)
	}
	return nil
}
