package podman

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Whole-sandbox snapshots of gVisor sandboxes. Podman refuses to
// checkpoint a container whose runtime is runsc, so the core drives runsc
// through its wrapper (the same root and flags as every other call), and
// restores through Podman: a container created from the same spec is
// marked (RestoreOnStart) and its `start` becomes runsc's restore. The
// restored sandbox is then an ordinary Podman container (exec, logs, stop,
// rm). runsc checks that the new container's spec matches the saved one
// where it matters (mount destinations and options, command, user, id
// mappings, seccomp, limits aside), and that the files the sandbox held
// open have not changed size or time: the caller restores into the same
// spec, with copies of the workspace as they were saved.

// snapshotTimeout bounds a checkpoint: runsc writes the sandbox's memory,
// so it grows with it (about 1 s for 200 MiB here).
const snapshotTimeout = 5 * time.Minute

// ErrNoSnapshots is a runtime, or a container, that cannot be snapshotted:
// only gVisor sandboxes can.
var ErrNoSnapshots = errors.New("only a gVisor sandbox can be saved whole (security.isolation = \"gvisor\")")

// Snapshot saves the running gVisor sandbox id whole (memory, processes,
// their open files and sockets) into the directory dir, which must exist
// and be empty; with stop the sandbox ends with the save (nothing runs
// after the moment saved), else it goes on. Connections the sandbox holds
// to sockets on the host break (runsc cannot save them): its own channels
// are inside it (DialSocket) and survive.
func (c *Client) Snapshot(ctx context.Context, id, dir string, stop bool) error {
	g, err := c.snapshots()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	args := []string{"checkpoint", "--image-path=" + dir}
	if !stop {
		args = append(args, "--leave-running")
	}
	out, err := exec.CommandContext(ctx, g.wrapper, append(args, id)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("runsc checkpoint of container %s: %w: %s", shortID(id), err, lastLines(out, 3))
	}
	return nil
}

// RestoreOnStart makes the next Start of container id, a gVisor sandbox
// created from the spec of the one dir's snapshot was taken of, restore
// that snapshot instead of running its command. The mark is used once.
func (c *Client) RestoreOnStart(id, dir string) error {
	g, err := c.snapshots()
	if err != nil {
		return err
	}
	if strings.Trim(id, "0123456789abcdef") != "" || id == "" {
		return fmt.Errorf("restore into container %q: not a Podman container id", id)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		return fmt.Errorf("restore into container %s: %s holds no runsc snapshot: %w", shortID(id), dir, err)
	}
	if err := os.MkdirAll(g.restores, 0o700); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(g.restores, id), []byte(dir), 0o600)
}

// ForgetRestore drops a mark RestoreOnStart left that no start used (the
// start failed before the wrapper ran, or ran runsc's start instead), and
// reports whether there was one.
func (c *Client) ForgetRestore(id string) bool {
	g, err := c.snapshots()
	if err != nil || id == "" || strings.ContainsAny(id, "/.") {
		return false
	}
	return os.Remove(filepath.Join(g.restores, id)) == nil
}

func (c *Client) snapshots() (*gvisor, error) {
	g := c.gvisor
	if g == nil || g.broken != nil || g.wrapper == "" {
		return nil, ErrNoSnapshots
	}
	return g, nil
}

// lastLines is the last n lines of a command's output, trimmed.
func lastLines(out []byte, n int) string {
	ls := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}

var _ runtime.Snapshotter = (*Client)(nil)
