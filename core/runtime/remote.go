package runtime

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// File is a regular file read back from a sandbox's workspace.
type File struct {
	Name    string
	Data    []byte
	Size    int64
	Skipped bool // over a size cap: Data is empty
}

// Entry is one thing in a workspace, as List finds it.
type Entry struct {
	Path     string // relative to the directory listed's workspace root
	Type     string // file, directory, symlink, fifo, socket, device or other
	Size     int64
	Modified time.Time
	Ino      uint64
}

// ErrNoFile is a workspace path with no regular file (missing, or not a
// regular file: a link is never followed).
var ErrNoFile = errors.New("no such regular file in the workspace")

// ErrNotRegular is a workspace path holding something else than a
// regular file (a directory, a pipe).
var ErrNotRegular = errors.New("not a regular file")

// ErrNoListener is an endpoint nothing listens on yet.
var ErrNoListener = errors.New("nothing listens on the endpoint yet")

// ErrTooLarge is a file over the size asked for.
var ErrTooLarge = errors.New("the file is larger than allowed")

// ErrLink is a workspace path with a symbolic link on it (never followed).
var ErrLink = errors.New("a symbolic link is on the path, and links are never followed")

// ErrNoSpace is a full workspace.
var ErrNoSpace = errors.New("no space left in the workspace")

// ErrPath is a path that would leave the workspace (absolute, or with
// '..' above its start): refused before anything in the sandbox is asked.
var ErrPath = errors.New("the path leaves the workspace")

// RemoteWorkspace is a runtime whose sandboxes keep their workspace where
// they run (a Kubernetes pod), not in the core's directory: the core's copy
// is only what the sandbox starts with, and files and sockets are reached
// through the runtime, inside the sandbox's own confinement.
type RemoteWorkspace interface {
	// ReadDir reads the regular files directly in rel (relative to the
	// workspace), each at most maxFile bytes, maxTotal in all.
	ReadDir(ctx context.Context, id, rel string, maxFile, maxTotal int64) ([]File, error)
	// ReadFile reads one regular file, at most max bytes (more: an error).
	ReadFile(ctx context.Context, id, rel string, max int64) ([]byte, error)
	// WriteFile writes one file, creating its directories. A link at rel
	// itself is replaced with replaceLink, else refused; a link on the way
	// to it is always refused.
	WriteFile(ctx context.Context, id, rel string, data []byte, replaceLink bool) error
	// ListFiles walks rel without following links: up to max entries, and
	// whether more were left out.
	ListFiles(ctx context.Context, id, rel string, max int) ([]Entry, bool, error)
	// FileSize is the size of the regular file at rel.
	FileSize(ctx context.Context, id, rel string) (int64, error)
	// RemoveFile removes the file or link at rel (never a directory).
	RemoveFile(ctx context.Context, id, rel string) error
	// TarOut writes the tree under rel as a tar (links as links).
	TarOut(ctx context.Context, id, rel string, w io.Writer) error
	// TarIn unpacks a tar beneath rel.
	TarIn(ctx context.Context, id, rel string, r io.Reader) error
	SocketDialer
	// SyncMount copies the core's directory of the read-only mount at
	// target into the sandbox again (it changed): the sandbox has a copy.
	SyncMount(ctx context.Context, id, target string) error
}

// SocketDialer reaches a unix socket a sandbox listens on from inside it
// (mcp-forge-agent's dial over an exec stream, DialRelay), not where the
// core lives: a pod's, and a gVisor sandbox's, which runsc could not
// checkpoint if its sockets were bound on the host.
type SocketDialer interface {
	// DialSocket connects to the unix socket at path in the container.
	DialSocket(ctx context.Context, id, path string) (net.Conn, error)
}

// Snapshotter saves a running sandbox whole (its memory, processes, open
// files and sockets) and starts a new container from such a snapshot:
// gVisor sandboxes on Podman (runsc checkpoint and restore).
type Snapshotter interface {
	// Snapshot saves running container id into the empty directory dir;
	// with stop it ends the container, else leaves it running.
	Snapshot(ctx context.Context, id, dir string, stop bool) error
	// RestoreOnStart makes the next Start of container id, created from
	// the spec of the container dir's snapshot was taken of, restore it.
	RestoreOnStart(id, dir string) error
	// ForgetRestore drops a mark no start used, and reports whether there
	// was one: after a Start, one left means the start did not restore.
	ForgetRestore(id string) bool
}

// FSUsage is what a workspace's filesystem holds and has left, as statfs
// sees it where the sandbox runs.
type FSUsage struct {
	Size, Free int64 // bytes for files, and bytes still free to the sandbox
	NoInodes   bool  // no inode is left (a filesystem with a count of them)
}

// WorkspaceUsage is a RemoteWorkspace that can measure a sandbox's
// workspace filesystem, so that a workspace the sandbox filled is audited
// as one of the core's is (workspace-quota): the core's copy says nothing
// of it.
type WorkspaceUsage interface {
	WorkspaceUsage(ctx context.Context, id string) (FSUsage, error)
}
