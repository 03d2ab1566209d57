// Package held carries, in a tool call's context, which other replica of
// a core in the cluster serves the session the call asked for: the engine
// notes it when it refuses the call (rule session-held), the HTTP
// transport forwards the call to that replica (core/forward), and once it
// did, the refused call's rate token here is given back (the replica that
// ran it counted it).
package held

import (
	"context"
	"sync"
)

type key struct{}

type note struct {
	mu      sync.Mutex
	by      string
	refunds []func()
}

// Watch returns ctx in which a Note is kept, how to read it, and what to
// call once the call was forwarded.
func Watch(ctx context.Context) (context.Context, func() string, func()) {
	n := &note{}
	return context.WithValue(ctx, key{}, n), n.get, n.forwarded
}

// Note records that replica by ("NAMESPACE/NAME" of its pod) serves the
// session ctx's call asked for. Without Watch it does nothing.
func Note(ctx context.Context, by string) {
	if n, _ := ctx.Value(key{}).(*note); n != nil {
		n.mu.Lock()
		n.by = by
		n.mu.Unlock()
	}
}

// OnForwarded runs f if ctx's call is forwarded after all (Watch's third
// function), at once if it was already.
func OnForwarded(ctx context.Context, f func()) {
	if n, _ := ctx.Value(key{}).(*note); n != nil {
		n.mu.Lock()
		n.refunds = append(n.refunds, f)
		n.mu.Unlock()
	}
}

func (n *note) get() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.by
}

func (n *note) forwarded() {
	n.mu.Lock()
	fs := n.refunds
	n.refunds = nil
	n.mu.Unlock()
	for _, f := range fs {
		f()
	}
}
