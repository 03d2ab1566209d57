package shim

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/mcp-forge/mcp-forge/sdk/tracectx"
)

// The trace context crosses every call on the plugin boundary in both
// directions (core to plugin, plugin to host services): a handler's
// context carries what the caller sent, and a call made with it sends it
// on. That is the whole of a plugin's part in the core's traces.

func traceIn(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	p := md.Get(tracectx.Parent)
	if len(p) != 1 || len(p[0]) > 128 {
		return ctx
	}
	s := md.Get(tracectx.State)
	state := ""
	if len(s) == 1 && len(s[0]) <= 512 {
		state = s[0]
	}
	return tracectx.With(ctx, p[0], state)
}

func traceOut(ctx context.Context) context.Context {
	p, s := tracectx.From(ctx)
	if p == "" {
		return ctx
	}
	kv := []string{tracectx.Parent, p}
	if s != "" {
		kv = append(kv, tracectx.State, s)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

type tracedServerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s tracedServerStream) Context() context.Context { return s.ctx }

func traceUnaryServer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(traceIn(ctx), req)
}

func traceStreamServer(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, tracedServerStream{ss, traceIn(ss.Context())})
}

// CallObserver makes a span of a call: it returns the context to call
// with (carrying the span as the trace context) and the call's end.
type CallObserver func(ctx context.Context, method string) (context.Context, func(error))

var observer atomic.Pointer[CallObserver]

// ObserveCalls has every call this process makes on the boundary observed
// by f (the core's spans of its plugin calls); nil stops it.
func ObserveCalls(f CallObserver) {
	if f == nil {
		observer.Store(nil)
		return
	}
	observer.Store(&f)
}

func observe(ctx context.Context, method string) (context.Context, func(error)) {
	if f := observer.Load(); f != nil && ours(method) {
		return (*f)(ctx, method)
	}
	return ctx, func(error) {}
}

func traceUnaryClient(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx, end := observe(ctx, method)
	err := invoker(traceOut(ctx), method, req, reply, cc, opts...)
	end(err)
	return err
}

func traceStreamClient(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx, end := observe(ctx, method)
	cs, err := streamer(traceOut(ctx), desc, cc, method, opts...)
	if err != nil {
		end(err)
		return cs, err
	}
	return &observedStream{ClientStream: cs, end: end}, nil
}

// observedStream ends its call's span when the stream ends.
type observedStream struct {
	grpc.ClientStream
	end  func(error)
	once sync.Once
}

func (s *observedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.once.Do(func() {
			if errors.Is(err, io.EOF) {
				s.end(nil) // the stream's normal end
				return
			}
			s.end(err)
		})
	}
	return err
}
