package forge

import (
	"fmt"
	"os"

	"github.com/mcp-forge/mcp-forge/core/workspace"
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

// Helper runs the server's own helper when args name it (the command line
// `podman unshare` gives a non-root server's binary to read a file the
// sandbox made private: core/workspace/unshare.go) and returns its exit
// status; ok is false for any other command line.
func Helper(args []string) (status int, ok bool) {
	if len(args) == 0 || args[0] != workspace.OpenHelper {
		return 0, false
	}
	return workspace.RunOpenHelper(args[1:]), true
}
