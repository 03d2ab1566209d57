// Package held carries, in a tool call's context, which other replica of
// a core in the cluster serves the session the call asked for: the engine
// notes it when it refuses the call (rule session-held), the tenant
// middleware then gives the call's rate token back, and the HTTP
// transport forwards the call to that replica (core/forward).
package held

import (
	"context"
	"sync"
)

type key struct{}

type note struct {
	mu sync.Mutex
	by string
}

// Watch returns ctx in which a Note is kept, and how to read it.
func Watch(ctx context.Context) (context.Context, func() string) {
	n := &note{}
	return context.WithValue(ctx, key{}, n), n.get
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

// By is the replica noted in ctx, "" if none.
func By(ctx context.Context) string {
	if n, _ := ctx.Value(key{}).(*note); n != nil {
		return n.get()
	}
	return ""
}

func (n *note) get() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.by
}
