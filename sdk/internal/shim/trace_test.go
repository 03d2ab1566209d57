package shim

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/mcp-forge/mcp-forge/sdk/tracectx"
)

// What a call sends is what the handler on the other side reads; what a
// handler read is sent on by its own calls; oversized or repeated values
// are not passed on.
func TestTraceContextCrossesTheBoundary(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cases := map[string]struct {
		md   metadata.MD
		want string
	}{
		"sent":      {metadata.Pairs(tracectx.Parent, parent, tracectx.State, "k=v"), parent},
		"none":      {metadata.MD{}, ""},
		"twice":     {metadata.Pairs(tracectx.Parent, parent, tracectx.Parent, parent), ""},
		"oversized": {metadata.Pairs(tracectx.Parent, strings.Repeat("0", 200)), ""},
	}
	for name, c := range cases {
		ctx := traceIn(metadata.NewIncomingContext(context.Background(), c.md))
		if p, _ := tracectx.From(ctx); p != c.want {
			t.Errorf("%s: handler reads %q, want %q", name, p, c.want)
		}
	}
	in := traceIn(metadata.NewIncomingContext(context.Background(), metadata.Pairs(tracectx.Parent, parent, tracectx.State, "k=v")))
	out, _ := metadata.FromOutgoingContext(traceOut(in))
	if got := out.Get(tracectx.Parent); len(got) != 1 || got[0] != parent || out.Get(tracectx.State)[0] != "k=v" {
		t.Errorf("a handler's call sends %v", out)
	}
	if _, ok := metadata.FromOutgoingContext(traceOut(context.Background())); ok {
		t.Error("a call without a trace context sent metadata")
	}
}
