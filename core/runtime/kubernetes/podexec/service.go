package podexec

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

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

// Service is the connection to a pod's file service (the agent's serve).
type Service struct {
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

// Serve starts a file service: run is the exec of the agent's serve in
// the pod, which lives until the service is closed or ends (ctx should
// outlive any one request).
func Serve(ctx context.Context, run Run) *Service {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	k := &Service{in: inW, out: bufio.NewReaderSize(outR, 64<<10), outR: outR, ended: make(chan struct{})}
	go func() {
		errb := runtime.Capped{Max: 4096}
		_, err := run(ctx, inR, outW, &errb)
		if err == nil {
			err = fmt.Errorf("the pod's file service ended: %s", errb.Buf.String())
		}
		k.err = err
		outW.CloseWithError(err)
		inR.CloseWithError(err)
		close(k.ended)
	}()
	return k
}

// Dead reports whether the service ended, or a request cut it: the next
// request needs a new one.
func (k *Service) Dead() bool {
	select {
	case <-k.ended:
		return true
	default:
	}
	k.deadMu.Lock()
	defer k.deadMu.Unlock()
	return k.dead
}

// Close ends the service: its stdin closed, the agent exits once its
// current request has; a new one serves the next request.
func (k *Service) Close() {
	k.deadMu.Lock()
	k.dead = true
	k.deadMu.Unlock()
	k.in.Close()
	k.outR.Close()
}

// ErrDead is a request to a service that was closed before its turn (a
// request before it was cut): nothing was sent; ask a new service.
var ErrDead = errors.New("the pod's file service was closed before this request")

// Do runs req (with data, a write's) in the file service, one request at
// a time, each bounded by timeout from when its turn comes; a request cut
// in the middle (ctx, or its bound) closes the service.
func (k *Service) Do(ctx context.Context, timeout time.Duration, req agent.Request, data []byte) (agent.Response, []byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.Dead() {
		return agent.Response{}, nil, ErrDead
	}
	cx, cancel := context.WithTimeout(ctx, timeout)
	done := make(chan struct{})
	// done first: when the request ended, the watcher must see it ended
	// even if it wakes only after cancel (both ready, select picks at
	// random, and closing a sound service broke the next request).
	defer cancel()
	defer close(done)
	go func() {
		select {
		case <-cx.Done():
			select {
			case <-done: // answered; cx ended by Do's own cancel
			default:
				k.Close() // a request cut in the middle leaves the stream unusable
			}
		case <-done:
		}
	}()
	if err := agent.WriteMsg(k.in, req, data); err != nil {
		return agent.Response{}, nil, fmt.Errorf("%w (%v)", err, k.err)
	}
	var res agent.Response
	out, err := agent.ReadMsg(k.out, &res, maxAnswer)
	if err != nil {
		k.Close()
		return agent.Response{}, nil, err
	}
	return res, out, nil
}
