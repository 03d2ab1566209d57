// Package tracectx carries a W3C trace context (traceparent, tracestate)
// across the plugin boundary: the SDK's gRPC shims read it from incoming
// metadata into the handler's context and write it into the metadata of
// calls made with that context. A plugin that passes the context it was
// handed to its host calls continues the core's trace with no code of its
// own; one that makes its own spans reads the parent here.
package tracectx

import "context"

// Header names, as in the W3C Trace Context recommendation and as gRPC
// metadata keys.
const (
	Parent = "traceparent"
	State  = "tracestate"
)

type key struct{}

type value struct{ parent, state string }

// With returns ctx carrying the trace context (an empty parent removes it).
func With(ctx context.Context, parent, state string) context.Context {
	if parent == "" {
		if _, ok := ctx.Value(key{}).(value); !ok {
			return ctx
		}
		return context.WithValue(ctx, key{}, value{})
	}
	return context.WithValue(ctx, key{}, value{parent, state})
}

// From returns the trace context ctx carries ("" when none).
func From(ctx context.Context) (parent, state string) {
	v, _ := ctx.Value(key{}).(value)
	return v.parent, v.state
}
