package kubernetes

import (
	"context"
	"errors"
	"io"

	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podexec"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podspec"
)

// Each pod's keeper runs one long-lived file service (podexec.Service): a
// file operation is then a request on an open exec, not an exec of its own.

// keeperOf is pod id's file service, started on first use (and again if it ended).
func (c *Client) keeperOf(ctx context.Context, id string) (*podexec.Service, error) {
	p, err := c.info(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := p.keeper; k != nil && !k.Dead() {
		return k, nil
	}
	p.keeper = podexec.Serve(context.WithoutCancel(ctx), func(ctx context.Context, in io.Reader, out, errw io.Writer) (int, error) {
		return c.exec(ctx, id, podexec.Stream{Container: podspec.Keeper,
			Command: podspec.AgentCmd("serve", podspec.WorkspaceDir, podspec.RunDir), Stdin: in, Stdout: out, Stderr: errw})
	})
	return p.keeper, nil
}

// keep runs req (with data, a write's) in the file service of pod id.
func (c *Client) keep(ctx context.Context, id string, req agent.Request, data []byte) (agent.Response, []byte, error) {
	k, err := c.keeperOf(ctx, id)
	if err != nil {
		return agent.Response{}, nil, err
	}
	res, out, err := k.Do(ctx, opTimeout, req, data)
	if errors.Is(err, podexec.ErrDead) {
		// Closed while this request waited its turn: nothing was sent,
		// so a new service may take it.
		if k, err = c.keeperOf(ctx, id); err == nil {
			res, out, err = k.Do(ctx, opTimeout, req, data)
		}
	}
	if err != nil {
		return agent.Response{}, nil, fail("file service", id, err)
	}
	return res, out, nil
}
