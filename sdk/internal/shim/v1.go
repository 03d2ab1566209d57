package shim

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/legacyws"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
)

// The core serves plugins of API v1 with the v2 code: every v1 message is
// its v2 counterpart on the wire (same field numbers and types; buf
// breaking keeps v1 frozen, and TestV1WireCompatible checks the pairs), and
// every v1 RPC keeps its method name, so only the service names differ.
// v2ToV1 maps them; what only v1 has is added here alone.
var v2ToV1 = map[string]string{
	"forge.plugin.v2.PluginService":  "forge.plugin.v1.Plugin",
	"forge.plugin.v2.BackendService": "forge.plugin.v1.Backend",
	"forge.plugin.v2.BuilderService": "forge.plugin.v1.Builder",
	"forge.plugin.v2.BridgeService":  "forge.plugin.v1.Bridge",
	"forge.plugin.v2.SandboxService": "forge.plugin.v1.Sandbox",
	"forge.plugin.v2.AuditService":   "forge.plugin.v1.Audit",
}

// v1Method is a v2 full method name ("/forge.plugin.v2.BackendService/Execute")
// under its v1 service.
func v1Method(method string) string {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if old, known := v2ToV1[svc]; ok && known {
		return "/" + old + "/" + name
	}
	return method
}

// v1Conn is the core's connection to a v1 plugin: the v2 clients' calls go
// out under the v1 service names.
type v1Conn struct{ grpc.ClientConnInterface }

func (c v1Conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.ClientConnInterface.Invoke(ctx, v1Method(method), args, reply, opts...)
}

func (c v1Conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.ClientConnInterface.NewStream(ctx, desc, v1Method(method), opts...)
}

// forAPI is conn as the plugin's negotiated API version speaks it.
func forAPI(conn grpc.ClientConnInterface, api int) grpc.ClientConnInterface {
	if api == 1 {
		return v1Conn{conn}
	}
	return conn
}

// registerHostV1 serves h's services under their v1 names as well, for a
// plugin of API v1: the same handlers, and in Create's answer the
// workspace's host path (v1's CreateResponse.workspace, field 2, where v1
// plugins dial their sockets), which no v2 message has.
func registerHostV1(s *grpc.Server, h host.Host) {
	sb := &sandboxServer{impl: h.Sandbox()}
	s.RegisterService(v1Desc(&pb.SandboxService_ServiceDesc, map[string]func(grpc.MethodHandler) grpc.MethodHandler{"Create": withV1Workspace(h.Sandbox())}), sb)
	s.RegisterService(v1Desc(&pb.AuditService_ServiceDesc, nil), &auditServer{impl: h.Audit()})
}

// v1Desc is a copy of desc under its v1 service name, with some handlers
// wrapped.
func v1Desc(desc *grpc.ServiceDesc, wrap map[string]func(grpc.MethodHandler) grpc.MethodHandler) *grpc.ServiceDesc {
	out := *desc
	out.ServiceName = v2ToV1[desc.ServiceName]
	out.Methods = append([]grpc.MethodDesc(nil), desc.Methods...)
	for i, m := range out.Methods {
		if w := wrap[m.MethodName]; w != nil {
			out.Methods[i].Handler = w(m.Handler)
		}
	}
	return &out
}

// V1BuilderPaths are what a builder of API v1 is told in its requests and
// API v2 has no field for: v1 gave builders host paths, v2 starts a builder
// in its work directory and leaves the rest to its configuration.
type V1BuilderPaths struct {
	WorkDir   string   // v1 BuildRequest.work_dir (5): the builder's current directory
	CacheDir  string   // v1 BuildRequest.cache_dir (7): environment_builder.uv_cache_path
	FindLinks []string // v1 IndexSettings.find_links (4): environment_builder.find_links
}

// addToPlan adds v1's IndexSettings.find_links to a Plan request; nil p (a
// builder of API v2) adds nothing.
func (p *V1BuilderPaths) addToPlan(r *pb.PlanRequest) {
	if p == nil || r == nil || len(p.FindLinks) == 0 {
		return
	}
	if r.Index == nil {
		r.Index = &pb.IndexSettings{}
	}
	m := r.Index.ProtoReflect()
	b := m.GetUnknown()
	for _, d := range p.FindLinks {
		b = appendV1String(b, 4, d)
	}
	m.SetUnknown(b)
}

// addToBuild adds v1's work_dir and cache_dir to a Build request, and
// find_links to its spec.
func (p *V1BuilderPaths) addToBuild(r *pb.BuildRequest) {
	if p == nil {
		return
	}
	p.addToPlan(r.Spec)
	m := r.ProtoReflect()
	b := m.GetUnknown()
	if p.WorkDir != "" {
		b = appendV1String(b, 5, p.WorkDir)
	}
	if p.CacheDir != "" {
		b = appendV1String(b, 7, p.CacheDir)
	}
	m.SetUnknown(b)
}

// appendV1String appends string field num, one that only v1 has, to a
// message's unknown fields: proto marshals them as they are.
func appendV1String(b []byte, num protowire.Number, v string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// withV1Workspace adds v1's CreateResponse.workspace to Create's answer.
func withV1Workspace(sb host.Sandbox) func(grpc.MethodHandler) grpc.MethodHandler {
	return func(next grpc.MethodHandler) grpc.MethodHandler {
		return func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			resp, err := next(srv, ctx, dec, in)
			if r, ok := resp.(*pb.CreateResponse); ok && err == nil {
				if ws := legacyws.Of(sb, r.ContainerId); ws != "" {
					m := r.ProtoReflect()
					m.SetUnknown(appendV1String(m.GetUnknown(), 2, ws))
				}
			}
			return resp, err
		}
	}
}
