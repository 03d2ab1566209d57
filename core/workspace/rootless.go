package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"
)

// A server run by an ordinary user with rootless Podman cannot always
// delete its workspaces itself: Podman's U bind option gives them to the
// sandbox user, a sub-id of the user's, and sandboxed code may create
// directories the user cannot write. Inside the user's own user namespace
// (`podman unshare`) the user is root over its sub-ids, so the removal is
// repeated there. Root never needs this.

// unshareTimeout bounds one `podman unshare rm`.
const unshareTimeout = 2 * time.Minute

// removeAll is os.RemoveAll, retried inside the user's namespace when a
// non-root server is refused.
var removeAll = func(path string) error {
	err := os.RemoveAll(path)
	if err == nil || os.Geteuid() == 0 || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	if uerr := unshareRemove(path); uerr != nil {
		return fmt.Errorf("%w; retrying in the user namespace: %v", err, uerr)
	}
	return nil
}

// RemoveAll removes a directory a sandbox had mounted (so Podman's U option
// may have given it to a sub-id), inside the user's namespace if needed.
func RemoveAll(path string) error { return removeAll(path) }

func unshareRemove(path string) error {
	podman, err := exec.LookPath("podman")
	if err != nil {
		return fmt.Errorf("podman is not on PATH: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), unshareTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, podman, "unshare", "rm", "-rf", "--", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("podman unshare rm: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// quotaHint tells how to go on when a provisioner that requires the quota
// cannot enforce it (a non-root server cannot loop-mount). The core's own
// provisioner never requires it: the policy refuses the container instead
// (guarantee workspace-quota), so this is for a Provisioner that does.
func quotaHint(p Provisioner) string {
	if p == nil || p.Enforced() {
		return ""
	}
	return ` (the workspace-quota guarantee is missing: a non-root server cannot loop-mount a filesystem per workspace; run as root, or set security.waive = ["workspace-quota"] to bound workspaces only by a periodic walk)`
}
