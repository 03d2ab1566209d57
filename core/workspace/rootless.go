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

// quotaHint tells how to go on when the quota is required but the kernel
// cannot enforce it (a non-root server cannot loop-mount).
func quotaHint(p Provisioner) string {
	if p == nil || p.Enforced() {
		return ""
	}
	return " (volumes.enforce_quota = true refuses workspaces the kernel cannot bound; a non-root server cannot loop-mount one: run as root, or set volumes.enforce_quota = false to bound workspaces only by a periodic walk)"
}
