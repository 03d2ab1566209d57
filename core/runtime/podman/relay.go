package podman

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"syscall"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
)

// DialSocket implements runtime.SocketDialer for gVisor sandboxes: the
// agent mounted in every sandbox (agent.Path) dials the socket at path
// from inside and relays it over its stdin and stdout. A gVisor sandbox's
// sockets are bound in its Sentry (runsc runs with --host-uds=open), where
// nothing on the host can reach them and where they do not stop runsc
// from saving the sandbox whole.
//
// The agent is started by runsc exec itself, through the wrapper, not
// through a Podman exec: runsc hands the exec's own pipes to the Sentry,
// so that a kernel message crosses one pipe each way instead of conmon,
// the service's attach stream and the bindings (measured: about 13 ms a
// session execute through Podman's exec). runsc exec waits for the agent
// and forwards a signal to it: cutting the relay ends the agent.
func (c *Client) DialSocket(ctx context.Context, id, path string) (net.Conn, error) {
	g, err := c.snapshots()
	if err != nil {
		return nil, fmt.Errorf("dial %s in container %s: %w", path, shortID(id), err)
	}
	if c.agent == "" {
		return nil, fmt.Errorf("dial %s in container %s: this server has no %s to relay it (run `make build`)", path, shortID(id), agent.Binary)
	}
	user, err := c.user(ctx, id)
	if err != nil {
		return nil, err
	}
	rctx, cut := context.WithCancel(context.WithoutCancel(ctx))
	return runtime.DialRelay(ctx, rctx, cut, path+" in container "+shortID(id), func(rctx context.Context, in io.Reader, out, errw io.Writer) (int, error) {
		cmd := exec.CommandContext(rctx, g.wrapper, "exec", "--user", user, id, agent.Path, "dial", path)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, errw
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 5 * time.Second
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), nil
		}
		return 0, err
	})
}

// user is the user container id's command runs as ("uid:gid"), whom the
// relay runs as too, named rather than left to runsc's default.
func (c *Client) user(ctx context.Context, id string) (string, error) {
	cx, cancel, err := c.op(ctx)
	if err != nil {
		return "", err
	}
	defer cancel()
	data, err := containers.Inspect(cx, id, nil)
	if err != nil {
		return "", c.fail(id, "podman inspect", err)
	}
	if data.Config == nil || data.Config.User == "" {
		// Never root by default: every sandbox of the core's names its user.
		return "", fmt.Errorf("dial in container %s: it names no user to run the relay as", shortID(id))
	}
	return data.Config.User, nil
}

// shortID is a container id as Podman prints it.
func shortID(id string) string { return id[:min(12, len(id))] }

var _ runtime.SocketDialer = (*Client)(nil)
