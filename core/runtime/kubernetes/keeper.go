package kubernetes

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
)

// An exec through the API server costs the round trip and the container
// runtime's exec (≈ 100 ms); a session's every execute lists its output
// directory, a stateless run reads its results. So the keeper runs one
// long-lived file service (`mcp-forge-agent serve`) per pod, and each file
// operation is a typed request on its stdin (agent.Request), answered on
// its stdout (agent.Response).

// maxAnswer bounds the data of an answer: the largest is a directory read
// up to its total cap (host.MaxFileBytes per file, a few files).
const maxAnswer = 64 << 20

// keeper is the connection to a pod's file service (the agent's serve).
type keeper struct {
	mu sync.Mutex
	// dead: a request was cut, the stream is out of step (deadMu, not mu,
	// which a request holds)
	deadMu sync.Mutex
	dead   bool
	in     *io.PipeWriter
	out    *bufio.Reader
	outR   *io.PipeReader
	ended  chan struct{}
	err    error // why it ended
}

// keeperOf is pod id's file service, started on first use (and again if it ended).
func (c *Client) keeperOf(ctx context.Context, id string) (*keeper, error) {
	p, err := c.info(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := p.keeper; k != nil && !k.isDead() {
		return k, nil
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	k := &keeper{in: inW, out: bufio.NewReaderSize(outR, 64<<10), outR: outR, ended: make(chan struct{})}
	go func() {
		errb := runtime.Capped{Max: 4096}
		_, err := c.exec(context.WithoutCancel(ctx), id, stream{Container: containerKeeper,
			Command: agentCmd("serve", wsDir, runDir), Stdin: inR, Stdout: outW, Stderr: &errb})
		if err == nil {
			err = fmt.Errorf("the pod's file service ended: %s", errb.Buf.String())
		}
		k.err = err
		outW.CloseWithError(err)
		inR.CloseWithError(err)
		close(k.ended)
	}()
	p.keeper = k
	return k, nil
}

func (k *keeper) isDead() bool {
	select {
	case <-k.ended:
		return true
	default:
	}
	k.deadMu.Lock()
	defer k.deadMu.Unlock()
	return k.dead
}

// close ends the service: its stdin closed, the agent exits once its
// current request has; a new one serves the next request.
func (k *keeper) close() {
	k.deadMu.Lock()
	k.dead = true
	k.deadMu.Unlock()
	k.in.Close()
	k.outR.Close()
}

// keep runs req (with data, a write's) in the file service of pod id.
func (c *Client) keep(ctx context.Context, id string, req agent.Request, data []byte) (agent.Response, []byte, error) {
	k, err := c.keeperOf(ctx, id)
	if err != nil {
		return agent.Response{}, nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	cx, cancel := op(ctx)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-cx.Done():
			k.close() // a request cut in the middle leaves the stream unusable
		case <-done:
		}
	}()
	if err := agent.WriteMsg(k.in, req, data); err != nil {
		return agent.Response{}, nil, fail("file service", id, fmt.Errorf("%w (%v)", err, k.err))
	}
	var res agent.Response
	out, err := agent.ReadMsg(k.out, &res, maxAnswer)
	if err != nil {
		k.close()
		return agent.Response{}, nil, fail("file service", id, err)
	}
	return res, out, nil
}
