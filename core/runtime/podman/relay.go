package podman

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"

	"github.com/containers/podman/v5/pkg/api/handlers"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	dockerContainer "github.com/docker/docker/api/types/container"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
)

// DialSocket implements runtime.SocketDialer: the agent mounted in every
// sandbox (agent.Path) dials the socket at path from inside and relays it
// over a Podman exec's stdin and stdout. A gVisor sandbox's sockets are
// bound in its Sentry (runsc runs with --host-uds=open), where nothing on
// the host can reach them, and where they do not stop runsc from saving
// the sandbox whole.
func (c *Client) DialSocket(ctx context.Context, id, path string) (net.Conn, error) {
	if c.agent == "" {
		return nil, fmt.Errorf("dial %s in container %s: this server has no %s to relay it (run `make build`)", path, shortID(id), agent.Binary)
	}
	rctx, cut := context.WithCancel(context.WithoutCancel(ctx))
	return runtime.DialRelay(ctx, rctx, cut, path+" in container "+shortID(id), func(rctx context.Context, in io.Reader, out, errw io.Writer) (int, error) {
		return c.execStream(rctx, id, []string{agent.Path, "dial", path}, in, out, errw)
	})
}

// execStream runs cmd in container id with its three streams attached
// until it exits, and answers its exit code. Closing in (EOF) closes the
// command's stdin; a write to out that fails ends the attach.
func (c *Client) execStream(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.Writer) (int, error) {
	cx, err := c.ctx(ctx)
	if err != nil {
		return 0, err
	}
	sid, err := containers.ExecCreate(cx, id, &handlers.ExecCreateConfig{ExecOptions: dockerContainer.ExecOptions{
		Cmd: cmd, AttachStdin: true, AttachStdout: true, AttachStderr: true,
	}})
	if err != nil {
		return 0, c.fail(id, "podman exec create", err)
	}
	defer containers.ExecRemove(context.WithoutCancel(cx), sid, nil)
	t := true
	opts := &containers.ExecStartAndAttachOptions{InputStream: bufio.NewReader(in), OutputStream: &out, ErrorStream: &errw,
		AttachInput: &t, AttachOutput: &t, AttachError: &t}
	if err := containers.ExecStartAndAttach(cx, sid, opts); err != nil {
		return 0, c.fail(id, "podman exec", err)
	}
	insp, err := containers.ExecInspect(cx, sid, nil)
	if err != nil {
		return 0, c.fail(id, "podman exec inspect", err)
	}
	return insp.ExitCode, nil
}

// shortID is a container id as Podman prints it.
func shortID(id string) string { return id[:min(12, len(id))] }
