package shim

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// DefaultMaxMessage bounds gRPC messages on the plugin boundary when the
// core names no limit (an older core, a test): far above gRPC's 4 MiB
// default, which a request carrying code near execution.max_code_size or a
// result with images exceeds.
const DefaultMaxMessage = 64 << 20

// framing is room left under the message limit for what fitResult adds
// (notices) and for encoding overhead.
const framing = 64 << 10

// window is the static HTTP/2 flow-control window of every stream and
// connection on the plugin boundary. Setting one turns off gRPC's dynamic
// window (BDP estimation), which otherwise answers the first data of each
// call on an idle connection with a ping, and the other side with its ack:
// two more frames and wake-ups in each process for every plugin call,
// where the calls are small and the peer is on the same machine. 4 MiB is
// above the largest window BDP estimation reaches in practice on a local
// socket, so large results still stream without stalls.
const window = 4 << 20

// ours limits the interceptors to forge's services, not go-plugin's own.
func ours(method string) bool {
	return strings.HasPrefix(method, "/forge.plugin.v2.") || strings.HasPrefix(method, "/forge.plugin.v1.")
}

// ServerOptions are the options of every gRPC server on the plugin boundary
// (the plugin's, and the host services the core serves over the broker):
// the message limit, the trace context passed on, and no string leaving
// that is not valid UTF-8.
func ServerOptions(maxMessage int) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage),
		grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window),
		grpc.ChainUnaryInterceptor(traceUnaryServer, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			if m, ok := resp.(proto.Message); ok && ours(info.FullMethod) {
				validStrings(m.ProtoReflect())
			}
			return resp, err
		}),
		grpc.ChainStreamInterceptor(traceStreamServer, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if !ours(info.FullMethod) {
				return h(srv, ss)
			}
			return h(srv, validServerStream{ss})
		}),
	}
}

// DialOptions are the options of every gRPC client on the plugin boundary.
func DialOptions(maxMessage int) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window),
		grpc.WithChainUnaryInterceptor(traceUnaryClient, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if m, ok := req.(proto.Message); ok && ours(method) {
				validStrings(m.ProtoReflect())
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(traceStreamClient, func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || !ours(method) {
				return cs, err
			}
			return validClientStream{cs}, nil
		}),
	}
}

type validServerStream struct{ grpc.ServerStream }

func (s validServerStream) SendMsg(m any) error {
	if pm, ok := m.(proto.Message); ok {
		validStrings(pm.ProtoReflect())
	}
	return s.ServerStream.SendMsg(m)
}

type validClientStream struct{ grpc.ClientStream }

func (s validClientStream) SendMsg(m any) error {
	if pm, ok := m.(proto.Message); ok {
		validStrings(pm.ProtoReflect())
	}
	return s.ClientStream.SendMsg(m)
}

// validStrings replaces invalid UTF-8 in every string of m, however deep
// (protobuf refuses to marshal such a string, which would fail the whole
// call), and returns the paths of the fields it changed.
func validStrings(m protoreflect.Message) []string {
	var fixed []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			fixed = append(fixed, p)
		}
	}
	walkStrings(m, "", add)
	return fixed
}

func walkStrings(m protoreflect.Message, prefix string, add func(string)) {
	fix := func(v protoreflect.Value, path string) (protoreflect.Value, bool) {
		s, bad := sanitize.UTF8(v.String())
		if bad {
			add(path)
		}
		return protoreflect.ValueOfString(s), bad
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		path := prefix + string(fd.Name())
		switch {
		case fd.IsMap():
			mp := v.Map()
			var badKeys []protoreflect.MapKey
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapKey().Kind() == protoreflect.StringKind {
					if _, bad := sanitize.UTF8(k.String()); bad {
						badKeys = append(badKeys, k)
					}
				}
				switch fd.MapValue().Kind() {
				case protoreflect.StringKind:
					if nv, bad := fix(mv, path); bad {
						mp.Set(k, nv)
					}
				case protoreflect.MessageKind:
					walkStrings(mv.Message(), path+".", add)
				}
				return true
			})
			for _, k := range badKeys {
				mv := mp.Get(k)
				mp.Clear(k)
				nk, _ := fix(k.Value(), path)
				mp.Set(nk.MapKey(), mv)
			}
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				switch fd.Kind() {
				case protoreflect.StringKind:
					if nv, bad := fix(l.Get(i), path); bad {
						l.Set(i, nv)
					}
				case protoreflect.MessageKind:
					walkStrings(l.Get(i).Message(), path+".", add)
				}
			}
		case fd.Kind() == protoreflect.StringKind:
			if nv, bad := fix(v, path); bad {
				m.Set(fd, nv)
			}
		case fd.Kind() == protoreflect.MessageKind:
			walkStrings(v.Message(), path+".", add)
		}
		return true
	})
}

// prepareResult makes a result safe to send: output a byte cap cut inside
// a character loses the partial character, invalid UTF-8 anywhere is
// replaced (with a notice naming where; also lists fields already
// replaced upstream, such as streamed output), and a result over the
// message limit is shrunk with a notice rather than lost.
func prepareResult(r *pb.ExecuteResponse, maxMessage int, also []string) {
	cut := func(s *string, total int64) {
		if total > int64(len(*s)) {
			*s = sanitize.TrimCut(*s)
		}
	}
	origOut, origErr := len(r.Stdout), len(r.Stderr)
	cut(&r.Stdout, r.StdoutBytes)
	cut(&r.Stderr, r.StderrBytes)
	fixed := append(slices.Clone(also), validStrings(r.ProtoReflect())...)
	// U+FFFD is longer than the byte it replaces: keep cut output within
	// its cap so that it still reads as cut.
	if r.StdoutBytes > int64(origOut) {
		r.Stdout = sanitize.Cut(r.Stdout, origOut)
	}
	if r.StderrBytes > int64(origErr) {
		r.Stderr = sanitize.Cut(r.Stderr, origErr)
	}
	if len(fixed) > 0 {
		slices.Sort(fixed)
		r.Notices = append(r.Notices, sanitize.InvalidUTF8Notice(slices.Compact(fixed)))
	}
	fitResult(r, maxMessage)
}

// fitResult shrinks a result that would not fit in one message, largest
// part first: an image, an output bundle or the JSON form of the result is
// left out; a text is shortened (by at most half at a time, so that one
// huge text does not take all the loss).
func fitResult(r *pb.ExecuteResponse, maxMessage int) {
	budget := maxMessage - framing
	excess := proto.Size(r) - budget
	if excess <= 0 {
		return
	}
	type part struct {
		name string
		size int
		drop func()
		text *string
	}
	var left, shortened []string
	for ; excess > 0; excess = proto.Size(r) - budget {
		var parts []part
		for i, im := range r.Images {
			parts = append(parts, part{name: "image " + im.Name, size: len(im.Data), drop: func() { r.Images = slices.Delete(r.Images, i, i+1) }})
		}
		for k, v := range r.Rich {
			parts = append(parts, part{name: k + " output", size: len(v), drop: func() { delete(r.Rich, k) }})
		}
		if r.ResultJson != "" {
			// Cut JSON is not JSON; the repr stays.
			parts = append(parts, part{name: "the result's JSON", size: len(r.ResultJson), drop: func() { r.ResultJson, r.ResultIsRepr = "", true }})
		}
		texts := map[string]*string{"result_repr": &r.ResultRepr, "stdout": &r.Stdout, "stderr": &r.Stderr}
		if r.Error != nil {
			texts["error message"] = &r.Error.Message
			for i := range r.Error.Traceback {
				texts["traceback line "+strconv.Itoa(i+1)] = &r.Error.Traceback[i]
			}
		}
		for name, t := range texts {
			parts = append(parts, part{name: name, size: len(*t), text: t})
		}
		if len(parts) == 0 {
			return
		}
		big := slices.MaxFunc(parts, func(a, b part) int { return cmp.Or(cmp.Compare(a.size, b.size), strings.Compare(b.name, a.name)) })
		if big.size == 0 {
			return
		}
		if big.text != nil {
			*big.text = sanitize.Cut(*big.text, max(big.size-excess-1024, big.size/2))
			if !slices.Contains(shortened, big.name) {
				shortened = append(shortened, big.name)
			}
			continue
		}
		big.drop()
		left = append(left, big.name)
	}
	var what []string
	if len(left) > 0 {
		what = append(what, "left out "+strings.Join(left, ", "))
	}
	if len(shortened) > 0 {
		what = append(what, "shortened "+strings.Join(shortened, ", "))
	}
	r.Notices = append(r.Notices, fmt.Sprintf("the result was larger than the %d-byte plugin message limit: %s", maxMessage, strings.Join(what, "; ")))
}

// checkImages is applied by the core's side of the shim to every result,
// whichever plugin produced it: no image reaches a client unless it is
// what it says it is, and SVG only without active content.
func checkImages(r *backend.ExecuteResult) {
	kept := r.Images[:0]
	for _, im := range r.Images {
		c, err := sanitize.Image(im.MIMEType, im.Data)
		if err != nil {
			r.Notices = append(r.Notices, fmt.Sprintf("image %s was not returned: %v", im.Name, err))
			continue
		}
		if len(c.Removed) > 0 {
			r.Notices = append(r.Notices, fmt.Sprintf("image %s: active content was removed from the SVG (%s)", im.Name, strings.Join(c.Removed, ", ")))
		}
		im.MIMEType, im.Data = c.MIMEType, c.Data
		kept = append(kept, im)
	}
	r.Images = kept
}

// fitEvent keeps one streamed chunk within the message limit.
func fitEvent(text string, maxMessage int) string {
	return sanitize.Cut(text, maxMessage-framing)
}
