package hostsvc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// The file services of a runtime whose workspaces live where its sandboxes
// run (runtime.RemoteWorkspace): the same checks of the path as for a
// workspace of the core's, then the runtime's own way to the files.

func remoteReadFiles(ctx context.Context, r runtime.RemoteWorkspace, id, subdir string, maxFile, maxTotal int64) ([]host.File, error) {
	rel := "."
	if subdir != "" {
		var err error
		if rel, err = workspace.CleanPath(subdir); err != nil {
			return nil, fileErr(err)
		}
	}
	files, err := r.ReadDir(ctx, id, rel, maxFile, maxTotal)
	if err != nil {
		return nil, remoteErr(err)
	}
	out := make([]host.File, len(files))
	for i, f := range files {
		out[i] = host.File{Name: f.Name, Data: f.Data, Size: f.Size, Skipped: f.Skipped}
	}
	return out, nil
}

func remotePutFile(ctx context.Context, r runtime.RemoteWorkspace, id, path string, data []byte) error {
	rel, err := workspace.CleanPath(path)
	if err != nil {
		return fileErr(err)
	}
	return remoteErr(r.WriteFile(ctx, id, rel, data, false))
}

func remoteGetFile(ctx context.Context, r runtime.RemoteWorkspace, id, path string, max int64) ([]byte, error) {
	rel, err := workspace.CleanPath(path)
	if err != nil {
		return nil, fileErr(err)
	}
	data, err := r.ReadFile(ctx, id, rel, max)
	return data, remoteErr(err)
}

func remoteErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, runtime.ErrLink), errors.Is(err, runtime.ErrNotRegular), errors.Is(err, runtime.ErrPath):
		return host.Errorf(host.KindPolicy, "%v", err)
	case errors.Is(err, runtime.ErrNoFile):
		return host.Errorf(host.KindNotFound, "%v", err)
	case errors.Is(err, runtime.ErrTooLarge), errors.Is(err, runtime.ErrNoSpace):
		return host.Errorf(host.KindInvalid, "%v", err)
	}
	return host.Errorf(host.KindInternal, "%v", err)
}

// SessionContainer is the container of this plugin's that holds the
// workspace of one of sessionIDs (a session's id, or the pool workspace it
// was bound to), if any.
func (h *Host) SessionContainer(sessionIDs ...string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for cid, t := range h.workspaces {
		if t.Ephemeral {
			continue
		}
		for _, id := range sessionIDs {
			if id != "" && t.SessionID == id {
				return cid, true
			}
		}
	}
	return "", false
}

// remoteOpTimeout bounds one file operation of a session tool in a pod.
const remoteOpTimeout = time.Minute

// SessionFS is the working directory of a session whose workspace lives
// in its sandbox (runtime.RemoteWorkspace), with the errors of a workspace
// of the core's, so that the file tools refuse alike on every runtime.
type SessionFS struct {
	R  runtime.RemoteWorkspace
	ID string // the session's container
}

// rel is p's place in the pod's workspace, checked as a workspace of the
// core's checks it (workspace.CleanPath): the pod's workspace holds more
// than the session's working directory (the kernel's directory, its
// connection file), so a '..' joined here would reach it.
func (f SessionFS) rel(p string) (string, error) {
	clean, err := workspace.CleanPath(p)
	if err != nil {
		return "", err
	}
	return path.Join(workspace.SessionWorkDir, clean), nil
}

func (f SessionFS) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), remoteOpTimeout)
}

// ReadFile implements files.SessionFS (core/engine/files).
func (f SessionFS) ReadFile(rel string, max int64) ([]byte, error) {
	p, err := f.rel(rel)
	if err != nil {
		return nil, err
	}
	ctx, cancel := f.ctx()
	defer cancel()
	data, err := f.R.ReadFile(ctx, f.ID, p, max)
	return data, asWorkspaceErr(err)
}

// WriteFile implements files.SessionFS (core/engine/files).
func (f SessionFS) WriteFile(rel string, data []byte) error {
	p, err := f.rel(rel)
	if err != nil {
		return err
	}
	ctx, cancel := f.ctx()
	defer cancel()
	// An upload replaces a link the code left at its path, as in a
	// workspace of the core's (never writing through it).
	return asWorkspaceErr(f.R.WriteFile(ctx, f.ID, p, data, true))
}

// List implements files.SessionFS (core/engine/files).
func (f SessionFS) List(rel string, max int) ([]workspace.Entry, bool, error) {
	p, err := f.rel(rel)
	if err != nil {
		return nil, false, err
	}
	ctx, cancel := f.ctx()
	defer cancel()
	list, more, err := f.R.ListFiles(ctx, f.ID, p, max)
	if err != nil {
		return nil, false, asWorkspaceErr(err)
	}
	out := make([]workspace.Entry, 0, len(list))
	for _, e := range list {
		out = append(out, workspace.NewEntry(strings.TrimPrefix(e.Path, workspace.SessionWorkDir+"/"), e.Type, e.Size, e.Modified, e.Ino))
	}
	return out, more, nil
}

// Snapshot implements files.SessionFS (core/engine/files).
func (f SessionFS) Snapshot(rel string, max int) map[string]workspace.Stamp {
	entries, _, err := f.List(rel, max)
	return workspace.SnapshotResult(entries, err)
}

// RegularSize implements checkpoints.CheckpointFS (core/engine/checkpoints).
func (f SessionFS) RegularSize(rel string) (int64, error) {
	p, err := f.rel(rel)
	if err != nil {
		return 0, err
	}
	ctx, cancel := f.ctx()
	defer cancel()
	n, err := f.R.FileSize(ctx, f.ID, p)
	return n, asWorkspaceErr(err)
}

// Remove implements checkpoints.CheckpointFS (core/engine/checkpoints).
func (f SessionFS) Remove(rel string) error {
	p, err := f.rel(rel)
	if err != nil {
		return err
	}
	ctx, cancel := f.ctx()
	defer cancel()
	return asWorkspaceErr(f.R.RemoveFile(ctx, f.ID, p))
}

// Usage measures the filesystem of the session's workspace in its
// sandbox (runtime.WorkspaceUsage), for the engine's check of a fill.
func (f SessionFS) Usage() (runtime.FSUsage, error) {
	u, ok := f.R.(runtime.WorkspaceUsage)
	if !ok {
		return runtime.FSUsage{}, errors.New("the runtime cannot measure a workspace in its sandbox")
	}
	ctx, cancel := context.WithTimeout(context.Background(), fillCheckTimeout)
	defer cancel()
	return u.WorkspaceUsage(ctx, f.ID)
}

// copyTimeout bounds a whole workspace's copy out of or into a pod.
const copyTimeout = 10 * time.Minute

// CopyOut implements checkpoints.CheckpointFS (core/engine/checkpoints): the pod's tar of the working
// directory, unpacked here as only directories and regular files, within
// limit (workspace.Untar).
func (f SessionFS) CopyOut(dst string, limit int64, skip func(string) bool) ([]string, int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), copyTimeout)
	defer cancel()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(f.R.TarOut(ctx, f.ID, workspace.SessionWorkDir, pw)) }()
	left, used, err := workspace.Untar(pr, dst, limit, skip)
	pr.CloseWithError(errors.New("copy ended")) // a copy stopped at its limit ends the pod's tar
	return left, used, asWorkspaceErr(err)
}

// CopyIn implements checkpoints.CheckpointFS (core/engine/checkpoints).
func (f SessionFS) CopyIn(src string) error {
	ctx, cancel := context.WithTimeout(context.Background(), copyTimeout)
	defer cancel()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(runtime.TarDir(pw, src)) }()
	err := f.R.TarIn(ctx, f.ID, workspace.SessionWorkDir, pr)
	pr.Close()
	return asWorkspaceErr(err)
}

// asWorkspaceErr is a runtime's file error as core/workspace's sentinel.
func asWorkspaceErr(err error) error {
	for _, m := range []struct{ from, to error }{
		{runtime.ErrNoFile, workspace.ErrNotFound}, {runtime.ErrLink, workspace.ErrLink}, {runtime.ErrNotRegular, workspace.ErrNotRegular},
		{runtime.ErrTooLarge, workspace.ErrTooLarge}, {runtime.ErrNoSpace, workspace.ErrNoSpace}, {runtime.ErrPath, workspace.ErrPath},
	} {
		if errors.Is(err, m.from) {
			return fmt.Errorf("%w: %v", m.to, err)
		}
	}
	return err
}

// keepRemoteFiles brings a session's files back from its sandbox before
// the sandbox goes, when they live there: the session's workspace outlives
// its container (a kernel that died is restarted in a new one), and the
// core's copy is what the next one starts with. Directories and regular
// files only, within the quota (workspace.Untar), swapped in whole.
func (h *Host) keepRemoteFiles(id string) {
	r := h.m.Remote()
	if r == nil {
		return
	}
	t, err := h.workspaceOf(id)
	if err != nil || t.Ephemeral {
		return
	}
	if err := syncBack(r, h.ws, id, t.Path); err != nil && !errors.Is(err, workspace.ErrNotFound) {
		h.rec.Record(audit.Entry{Event: audit.WorkspaceWrite, Severity: audit.Warning, SessionID: t.SessionID, Success: false, Error: err.Error(),
			Details: map[string]any{"container_id": id, "plugin": h.plugin, "operation": "keep the session's files for its next sandbox"}})
	}
}

func syncBack(r runtime.RemoteWorkspace, ws *workspace.Manager, id, dir string) error {
	tmp, done, err := ws.BeginSync(dir)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), copyTimeout)
	defer cancel()
	_ = os.RemoveAll(tmp)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(r.TarOut(ctx, id, ".", pw)) }()
	_, _, err = workspace.Untar(pr, tmp, ws.Quota(), nil)
	pr.Close()
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return ws.Replace(dir, tmp)
}

// remoteGrant is a tool grant's sandbox on a remote runtime: it has copies
// of the grant's directory and of its working directory.
type remoteGrant struct {
	r      runtime.RemoteWorkspace
	id     string
	outDir string
}

func (g remoteGrant) Sync(ctx context.Context) error {
	return g.r.SyncMount(ctx, g.id, bridge.SandboxDir)
}

func (g remoteGrant) WriteOutput(ctx context.Context, name string, data []byte) error {
	return remotePutFile(ctx, g.r, g.id, path.Join(g.outDir, name), data)
}
