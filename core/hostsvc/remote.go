package hostsvc

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/workspace"
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
	return remoteErr(r.WriteFile(ctx, id, rel, data))
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
	case errors.Is(err, runtime.ErrLink):
		return host.Errorf(host.KindPolicy, "%v", err)
	case errors.Is(err, runtime.ErrNoFile):
		return host.Errorf(host.KindNotFound, "%v", err)
	case errors.Is(err, runtime.ErrTooLarge), errors.Is(err, runtime.ErrNoSpace):
		return host.Errorf(host.KindInvalid, "%v", err)
	}
	return host.Errorf(host.KindInternal, "%v", err)
}

// RemoteSockets reaches endpoints through the runtime (a relay in the pod,
// through the API server): Channels for runtime.RemoteWorkspace.
type RemoteSockets struct{ R runtime.RemoteWorkspace }

// DialEndpoint implements Channels.
func (s RemoteSockets) DialEndpoint(ctx context.Context, ep Endpoint) (net.Conn, error) {
	c, err := s.R.DialSocket(ctx, ep.ContainerID, ep.Path)
	if errors.Is(err, runtime.ErrNoListener) {
		return nil, fmt.Errorf("%w: %v", workspace.ErrNoListener, err)
	}
	return c, err
}
