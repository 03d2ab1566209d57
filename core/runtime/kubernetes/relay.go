package kubernetes

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podexec"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podspec"
)

// A read-only mount of a directory of the core's (a tool grant) reaches a
// pod as a copy (podspec.CopyDir), and every unix socket in it is served in
// the keeper, relayed to the core's own socket (podexec.Relay).

// socketsOf finds the sockets in the copied mounts' directories.
func socketsOf(mounts []podspec.Mount) ([]podexec.Socket, error) {
	var out []podexec.Socket
	for _, m := range mounts {
		if m.Copy == 0 || m.Source == "" {
			continue
		}
		err := filepath.WalkDir(m.Source, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type()&fs.ModeSocket == 0 {
				return nil
			}
			rel, err := filepath.Rel(m.Source, p)
			if err != nil {
				return err
			}
			out = append(out, podexec.Socket{InPod: path.Join(podspec.CopyDir(m.Copy), filepath.ToSlash(rel)), Host: p})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("copy of %s: %w", m.Source, err)
		}
	}
	return out, nil
}

// startRelay serves pod id's copied sockets until ctx ends or the pod
// goes; it returns once the keeper listens on all of them.
func (c *Client) startRelay(ctx context.Context, ready context.Context, id string, socks []podexec.Socket) error {
	args := podspec.AgentCmd("listen")
	for _, s := range socks {
		args = append(args, s.InPod)
	}
	err := podexec.Relay(ctx, ready, socks, func(ctx context.Context, in io.Reader, out, errw io.Writer) (int, error) {
		return c.exec(ctx, id, podexec.Stream{Container: podspec.Keeper, Command: args, Stdin: in, Stdout: out, Stderr: errw})
	}, c.log.With("pod", id))
	if err != nil {
		return fmt.Errorf("relay the sockets of pod %s: %w", id, err)
	}
	return nil
}

// SyncMount implements runtime.RemoteWorkspace: the copy at target is
// brought up to date with its directory (a tool grant given more tools).
// Files are replaced, not rewritten in place, as tar unpacks them: a
// sandbox reading one sees the old or the new file.
func (c *Client) SyncMount(ctx context.Context, id, target string) error {
	p, err := c.info(id)
	if err != nil {
		return err
	}
	for _, m := range p.mounts {
		if m.Copy == 0 || m.Target != target {
			continue
		}
		if m.Source == "" {
			return fmt.Errorf("the copy at %s in pod %s was made by another core: it cannot be brought up to date", target, id)
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(runtime.TarDir(pw, m.Source)) }()
		err := c.tarAt(ctx, id, podspec.CopyDir(m.Copy), "copy "+m.Source+" into", podexec.Stream{Stdin: pr}, "-x", "--no-same-owner")
		pr.Close()
		return err
	}
	return fmt.Errorf("pod %s has no copy at %s", id, target)
}
