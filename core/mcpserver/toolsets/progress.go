package toolsets

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Progress forwards a run's output as MCP progress notifications when the
// client asked for progress (a progressToken), and sends a keep-alive
// whenever nothing was sent for interval, so that a client that resets its
// request timeout on progress keeps waiting for a long run, a stateless one
// too (a stateless backend streams its output only if it implements
// backend.StreamingBackend; otherwise it comes with the result alone).
// stop ends the keep-alive; it must be called before the answer goes back,
// so no progress follows it.
func Progress(ctx context.Context, req *mcp.CallToolRequest, interval time.Duration) (emit func(backend.StreamEvent), stop func()) {
	if req == nil || req.Session == nil || req.Params == nil {
		return nil, func() {}
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil, func() {}
	}
	if interval <= 0 { // a configuration built without config.Default
		interval = 10 * time.Second
	}
	p := &progressor{ctx: ctx, ss: req.Session, token: token, start: time.Now()}
	p.last = p.start
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.keepAlive(interval, done)
	}()
	return func(ev backend.StreamEvent) { p.send(string(ev.Name) + ": " + ev.Text) },
		func() { close(done); wg.Wait() }
}

// progressor numbers one call's progress notifications (Progress must
// increase) and remembers when the last one went out.
type progressor struct {
	ctx   context.Context
	ss    *mcp.ServerSession
	token any
	start time.Time

	mu   sync.Mutex // held while sending: notifications go out in order
	n    float64
	last time.Time
}

func (p *progressor) send(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.last = time.Now()
	_ = p.ss.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: p.n, Message: msg})
}

// keepAlive sends a notification each time interval passes since the last
// one, until done is closed or the call's context ends.
func (p *progressor) keepAlive(interval time.Duration, done <-chan struct{}) {
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		wait := time.Until(p.last.Add(interval))
		p.mu.Unlock()
		if wait <= 0 {
			p.send(fmt.Sprintf("running: %.0f s", time.Since(p.start).Seconds()))
			wait = interval
		}
		t.Reset(wait)
	}
}
