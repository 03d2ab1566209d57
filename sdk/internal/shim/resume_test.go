package shim

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
)

// resumingBackend opens sessions; it honours Resume only when honour is
// set (a plugin built before resume ignores the field).
type resumingBackend struct {
	countingBackend
	honour bool
	lie    bool // says it resumed, of another container
	mu     sync.Mutex
	opened []backend.OpenSessionRequest
	closed []string
}

func (b *resumingBackend) OpenSession(_ context.Context, r backend.OpenSessionRequest) (backend.SessionInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.opened = append(b.opened, r)
	ctr := "c-" + r.SessionID
	if b.lie {
		ctr = "c-new"
	}
	return backend.SessionInfo{SessionID: r.SessionID, ContainerID: ctr, ResumeState: []byte("state"), Resumed: (b.honour || b.lie) && len(r.Resume) > 0}, nil
}

func (b *resumingBackend) CloseSession(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = append(b.closed, id)
	return nil
}

func (*resumingBackend) ExecuteInSession(context.Context, backend.ExecuteRequest, func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	return backend.ExecuteResult{}, nil
}
func (*resumingBackend) Interrupt(context.Context, string) error { return nil }
func (*resumingBackend) Inspect(context.Context, string) ([]backend.Variable, error) {
	return nil, nil
}
func (*resumingBackend) RestartSession(context.Context, string) error { return nil }

// The resume fields cross the wire both ways; a plugin that does not
// honour a resume (it opened a fresh kernel) has that kernel closed and
// the resume refused, so a session's state is never silently replaced.
func TestResumeCrosses(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		honour, lie bool
		refusal     string
	}{{true, false, ""}, {false, false, "does not resume running sessions"}, {false, true, "answered of session s in container c-new"}} {
		honour := tc.honour
		b := &resumingBackend{honour: tc.honour, lie: tc.lie}
		c := serveBackend(t, &pb.BackendService_ServiceDesc, b)
		info, err := c.OpenSession(ctx, backend.OpenSessionRequest{SessionID: "s"})
		if err != nil || string(info.ResumeState) != "state" || info.Resumed {
			t.Fatalf("%+v: open = %+v, %v", tc, info, err)
		}
		info, err = c.OpenSession(ctx, backend.OpenSessionRequest{SessionID: "s", Resume: []byte("state"), ResumeContainer: "c-s"})
		b.mu.Lock()
		last, closed := b.opened[len(b.opened)-1], b.closed
		b.mu.Unlock()
		if string(last.Resume) != "state" || last.ResumeContainer != "c-s" {
			t.Errorf("honour %v: the plugin got %+v", honour, last)
		}
		if honour {
			if err != nil || !info.Resumed || len(closed) != 0 {
				t.Errorf("an honoured resume = %+v, %v; closed %v", info, err, closed)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.refusal) || len(closed) != 1 || closed[0] != "s" {
			t.Errorf("%+v: a resume not honoured = %+v, %v; closed %v", tc, info, err, closed)
		}
	}
}
