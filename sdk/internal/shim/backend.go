package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/configschema"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// Info mirrors the SDK's plugin.Info without importing it.
type Info struct {
	Type, Name, Version, Description string
	APIVersions                      []int
	Config                           *configschema.Schema // nil: none declared
}

// BackendPlugin is the go-plugin GRPCPlugin for backends. The plugin side
// sets Info and Factory; the core side leaves them empty.
type BackendPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Info    Info
	Factory backend.Factory
	// MaxMessage bounds every gRPC message between the core and the
	// plugin, host services included; 0 means DefaultMaxMessage.
	MaxMessage int
	// API is the plugin API version the core's client speaks (core side).
	API int
}

func (p *BackendPlugin) maxMessage() int {
	if p.MaxMessage > 0 {
		return p.MaxMessage
	}
	return DefaultMaxMessage
}

// GRPCServer registers the Plugin and Backend services (plugin side).
func (p *BackendPlugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	srv := &backendServer{pluginServer: pluginServer[backend.Backend]{kind: "backend", info: p.Info, factory: p.Factory, broker: broker, maxMessage: p.maxMessage()}}
	pb.RegisterPluginServiceServer(s, srv)
	pb.RegisterBackendServiceServer(s, srv)
	return nil
}

// GRPCClient returns a *BackendClient (core side).
func (p *BackendPlugin) GRPCClient(_ context.Context, broker *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	cc := forAPI(conn, p.API)
	return &BackendClient{pluginClient: newPluginClient(broker, cc, p.maxMessage()), backend: pb.NewBackendServiceClient(cc)}, nil
}

// pluginServer is the Plugin service of every plugin type: it reports the
// plugin's Info and holds the implementation T its factory builds once
// Configure has connected the host services.
type pluginServer[T any] struct {
	pb.UnimplementedPluginServiceServer
	kind       string // the plugin type, for messages
	info       Info
	factory    func(host.Host, backend.Config) (T, error)
	broker     *plugin.GRPCBroker
	maxMessage int

	mu   sync.Mutex
	impl T
	set  bool
}

func (s *pluginServer[T]) GetInfo(context.Context, *pb.GetInfoRequest) (*pb.GetInfoResponse, error) {
	return infoToPB(s.info), nil
}

func (s *pluginServer[T]) Configure(_ context.Context, r *pb.ConfigureRequest) (*pb.ConfigureResponse, error) {
	return configure(s.info, s.broker, s.maxMessage, r, func(h host.Host, cfg backend.Config) error {
		impl, err := s.factory(h, cfg)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.impl, s.set = impl, true
		s.mu.Unlock()
		return nil
	})
}

// Shutdown runs the implementation's backend.Shutdowner, if it has one; a
// plugin never configured has nothing to release.
func (s *pluginServer[T]) Shutdown(ctx context.Context, r *pb.ShutdownRequest) (*pb.ShutdownResponse, error) {
	s.mu.Lock()
	impl, set := s.impl, s.set
	s.mu.Unlock()
	if sd, ok := any(impl).(backend.Shutdowner); set && ok {
		if err := sd.Shutdown(ctx); err != nil {
			return nil, toStatus(err)
		}
	}
	return &pb.ShutdownResponse{}, nil
}

// get is the configured implementation, or the error a call before
// Configure gets.
func (s *pluginServer[T]) get() (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.set {
		var zero T
		return zero, status.Errorf(codes.FailedPrecondition, "%s not configured: the host must call Configure first", s.kind)
	}
	return s.impl, nil
}

type backendServer struct {
	pluginServer[backend.Backend]
	pb.UnimplementedBackendServiceServer
}

func infoToPB(i Info) *pb.GetInfoResponse {
	out := &pb.GetInfoResponse{Type: i.Type, Name: i.Name, Version: i.Version, Description: i.Description, ConfigSchema: schemaToPB(i.Config)}
	for _, v := range i.APIVersions {
		out.ApiVersions = append(out.ApiVersions, int32(v))
	}
	return out
}

// configure is the Plugin service's Configure for every plugin type: it
// checks the negotiated version, dials the host services and hands them to
// build (the type's factory).
func configure(info Info, broker *plugin.GRPCBroker, maxMessage int, r *pb.ConfigureRequest, build func(host.Host, backend.Config) error) (*pb.ConfigureResponse, error) {
	// The core sends the version the handshake negotiated; serving another
	// one would mean the two sides disagree about every message.
	if !slices.Contains(info.APIVersions, int(r.ApiVersion)) {
		return nil, status.Errorf(codes.FailedPrecondition, "%s speaks plugin API versions %v, and the core asked for %d", info.Name, info.APIVersions, r.ApiVersion)
	}
	conn, err := broker.DialWithOptions(r.HostBrokerId, DialOptions(maxMessage)...)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "dial host services: %v", err)
	}
	cfg, err := mergeConfig(r.CoreSettingsJson, r.ConfigJson)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %v", info.Name, err)
	}
	if err := build(NewHostClient(conn), cfg); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %v", info.Name, err)
	}
	return &pb.ConfigureResponse{}, nil
}

func (s *backendServer) backend() (backend.Backend, error) { return s.get() }

// Stats answers from the backend's StatsReporter; one without has none.
func (s *backendServer) Stats(ctx context.Context, _ *pb.StatsRequest) (*pb.StatsResponse, error) {
	b, err := s.backend()
	if err != nil {
		return nil, err
	}
	sr, ok := b.(backend.StatsReporter)
	if !ok {
		return &pb.StatsResponse{}, nil
	}
	st, err := sr.Stats(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.StatsResponse{WarmPool: warmPoolToPB(st.WarmPool)}, nil
}

func (s *backendServer) Capabilities(ctx context.Context, _ *pb.CapabilitiesRequest) (*pb.CapabilitiesResponse, error) {
	b, err := s.backend()
	if err != nil {
		return nil, err
	}
	c, err := b.Capabilities(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.CapabilitiesResponse{Languages: c.Languages, Stateful: c.Stateful, Interrupt: c.Interrupt, RichOutput: c.RichOutput, McpTools: c.MCPTools,
		LanguageName: c.LanguageName, LanguageVersion: c.LanguageVersion, Image: c.Image, DefaultImage: c.DefaultImage, Packages: c.Packages, Description: c.Description,
		InputFiles: c.InputFiles, SandboxGrants: c.SandboxGrants}
	if cp := c.Checkpoint; cp != nil {
		out.Checkpoint = &pb.CheckpointCode{Save: cp.Save, Load: cp.Load, Missing: cp.Missing, Hint: cp.Hint}
	}
	return out, nil
}

func (s *backendServer) Execute(ctx context.Context, r *pb.ExecuteRequest) (*pb.ExecuteResponse, error) {
	b, err := s.backend()
	if err != nil {
		return nil, err
	}
	res, err := b.Execute(ctx, requestFromPB(r))
	if err != nil {
		return nil, toStatus(err)
	}
	out := resultToPB(res)
	prepareResult(out, s.maxMessage, nil)
	return out, nil
}

// ExecuteStream is Execute with the run's output streamed, for a backend
// that implements backend.StreamingBackend; any other sends its result
// alone, so that the core can always call ExecuteStream.
func (s *backendServer) ExecuteStream(sr *pb.ExecuteStreamRequest, stream pb.BackendService_ExecuteStreamServer) error {
	b, err := s.backend()
	if err != nil {
		return err
	}
	req := requestFromPB(twin(sr, &pb.ExecuteRequest{}))
	var res backend.ExecuteResult
	var replaced []string
	if sb, ok := b.(backend.StreamingBackend); ok {
		es := newEventSender(s.maxMessage, func(ev *pb.StreamEvent) error {
			return stream.Send(&pb.ExecuteStreamResponse{Kind: &pb.ExecuteStreamResponse_Stream{Stream: ev}})
		})
		res, err = sb.ExecuteStream(stream.Context(), req, es.emit)
		replaced = es.close()
	} else {
		res, err = b.Execute(stream.Context(), req)
	}
	if err != nil {
		return toStatus(err)
	}
	out := resultToPB(res)
	prepareResult(out, s.maxMessage, replaced)
	return stream.Send(&pb.ExecuteStreamResponse{Kind: &pb.ExecuteStreamResponse_Result{Result: out}})
}

func requestFromPB(r *pb.ExecuteRequest) backend.ExecuteRequest {
	return backend.ExecuteRequest{
		Code: r.Code, Language: r.Language, Image: r.Image, Timeout: time.Duration(r.TimeoutSeconds) * time.Second,
		Memory: r.Memory, Env: r.Env, MaxOutputBytes: r.MaxOutputBytes, MaxImageBytes: r.MaxImageBytes,
		SessionID: r.SessionId, RunID: r.RunId, ToolsGrant: r.ToolsGrant, InputFiles: r.InputFiles, NetworkGrant: r.NetworkGrant, SandboxGrant: r.SandboxGrant, SandboxPoolGrant: r.SandboxPoolGrant,
	}
}

func requestToPB(req backend.ExecuteRequest) *pb.ExecuteRequest {
	return &pb.ExecuteRequest{
		Code: req.Code, Language: req.Language, Image: req.Image, TimeoutSeconds: int64(req.Timeout / time.Second),
		Memory: req.Memory, Env: req.Env, MaxOutputBytes: req.MaxOutputBytes, MaxImageBytes: req.MaxImageBytes,
		SessionId: req.SessionID, RunId: req.RunID, ToolsGrant: req.ToolsGrant, InputFiles: req.InputFiles, NetworkGrant: req.NetworkGrant, SandboxGrant: req.SandboxGrant, SandboxPoolGrant: req.SandboxPoolGrant,
	}
}

func resultToPB(r backend.ExecuteResult) *pb.ExecuteResponse {
	// Copies: the message is made safe to send in place, and the backend's
	// own slices and maps are not ours to change.
	out := &pb.ExecuteResponse{
		Success: r.Success, Stdout: r.Stdout, Stderr: r.Stderr, StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		ResultJson: r.ResultJSON, ResultRepr: r.ResultRepr, ResultIsRepr: r.ResultIsRepr, ExitCode: int32(r.ExitCode),
		DurationMs: r.Duration.Milliseconds(), Notices: slices.Clone(r.Notices), Rich: maps.Clone(r.Rich), SessionDead: r.SessionDead,
	}
	if e := r.Error; e != nil {
		out.Error = &pb.ExecError{Name: e.Name, Message: e.Message, Traceback: slices.Clone(e.Traceback), Line: int32(e.Line), Column: int32(e.Column)}
	}
	for _, im := range r.Images {
		out.Images = append(out.Images, &pb.Image{Name: im.Name, MimeType: im.MIMEType, Data: im.Data})
	}
	return out
}

func resultFromPB(r *pb.ExecuteResponse) backend.ExecuteResult {
	out := backend.ExecuteResult{
		Success: r.Success, Stdout: r.Stdout, Stderr: r.Stderr, StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		ResultJSON: r.ResultJson, ResultRepr: r.ResultRepr, ResultIsRepr: r.ResultIsRepr, ExitCode: int(r.ExitCode),
		Duration: time.Duration(r.DurationMs) * time.Millisecond, Notices: r.Notices, Rich: r.Rich, SessionDead: r.SessionDead,
	}
	if e := r.Error; e != nil {
		out.Error = &backend.ExecError{Name: e.Name, Message: e.Message, Traceback: e.Traceback, Line: int(e.Line), Column: int(e.Column)}
	}
	for _, im := range r.Images {
		out.Images = append(out.Images, backend.Image{Name: im.Name, MIMEType: im.MimeType, Data: im.Data})
	}
	checkImages(&out)
	return out
}

// BackendClient is the core's handle on a backend plugin.
type BackendClient struct {
	pluginClient
	backend  pb.BackendServiceClient
	noStream atomic.Bool // the plugin answered ExecuteStream Unimplemented
}

// pluginClient is the core's side of the Plugin service, which every
// plugin type serves.
type pluginClient struct {
	broker     *plugin.GRPCBroker
	plugin     pb.PluginServiceClient
	maxMessage int
	api        int       // negotiated, set by Configure
	fds        *FDSender // the plugin's fd channel, if the core launched it with one
}

// SetFDChannel makes the host services Configure serves send local sockets
// over fds (before Configure).
func (c *pluginClient) SetFDChannel(fds *FDSender) { c.fds = fds }

func newPluginClient(broker *plugin.GRPCBroker, conn grpc.ClientConnInterface, maxMessage int) pluginClient {
	return pluginClient{broker: broker, plugin: pb.NewPluginServiceClient(conn), maxMessage: maxMessage}
}

// Info asks the plugin who it is.
func (c *pluginClient) Info(ctx context.Context) (Info, error) {
	r, err := c.plugin.GetInfo(ctx, &pb.GetInfoRequest{})
	if err != nil {
		return Info{}, fromStatus(err)
	}
	out := Info{Type: r.Type, Name: r.Name, Version: r.Version, Description: r.Description, Config: schemaFromPB(r.ConfigSchema)}
	for _, v := range r.ApiVersions {
		out.APIVersions = append(out.APIVersions, int(v))
	}
	return out, nil
}

// Configure serves h to the plugin over the broker and hands it the
// operator's configuration and the core's settings: apart in v2, merged
// (the operator's keys over the core's) for a v1 plugin, as v1 sent them.
func (c *pluginClient) Configure(ctx context.Context, h host.Host, cfg, core []byte, apiVersion int) error {
	req := &pb.ConfigureRequest{ConfigJson: cfg, CoreSettingsJson: core, ApiVersion: int32(apiVersion)}
	if apiVersion < 2 {
		merged, err := mergeConfig(core, cfg)
		if err != nil {
			return err
		}
		req.ConfigJson, req.CoreSettingsJson = merged, nil
	}
	id := c.broker.NextId()
	go c.broker.AcceptAndServe(id, func(opts []grpc.ServerOption) *grpc.Server {
		s := grpc.NewServer(append(opts, ServerOptions(c.maxMessage)...)...)
		RegisterHost(s, h, c.fds)
		if apiVersion == 1 {
			registerHostV1(s, h)
		}
		return s
	})
	req.HostBrokerId = id
	c.api = apiVersion
	_, err := c.plugin.Configure(ctx, req)
	return fromStatus(err)
}

// Shutdown asks the plugin to release what it holds (see
// backend.Shutdowner); API v2 only, which the caller checks.
func (c *pluginClient) Shutdown(ctx context.Context, reason string) error {
	_, err := c.plugin.Shutdown(ctx, &pb.ShutdownRequest{Reason: reason})
	return fromStatus(err)
}

// Stats implements backend.StatsReporter: the Stats call of API v2, or the
// figures a v1 plugin put in its capabilities.
func (c *BackendClient) Stats(ctx context.Context) (backend.Stats, error) {
	if c.api < 2 {
		r, err := c.backend.Capabilities(ctx, &pb.CapabilitiesRequest{})
		if err != nil {
			return backend.Stats{}, fromStatus(err)
		}
		//lint:ignore SA1019 v1's field, read for v1 plugins only
		return backend.Stats{WarmPool: warmPoolFromPB(r.GetWarmPool())}, nil
	}
	r, err := c.backend.Stats(ctx, &pb.StatsRequest{})
	if err != nil {
		return backend.Stats{}, fromStatus(err)
	}
	return backend.Stats{WarmPool: warmPoolFromPB(r.WarmPool)}, nil
}

// Capabilities implements backend.Backend.
func (c *BackendClient) Capabilities(ctx context.Context) (backend.Capabilities, error) {
	r, err := c.backend.Capabilities(ctx, &pb.CapabilitiesRequest{})
	if err != nil {
		return backend.Capabilities{}, fromStatus(err)
	}
	caps := backend.Capabilities{Languages: r.Languages, Stateful: r.Stateful, Interrupt: r.Interrupt, RichOutput: r.RichOutput, MCPTools: r.McpTools,
		LanguageName: r.LanguageName, LanguageVersion: r.LanguageVersion, Image: r.Image, DefaultImage: r.DefaultImage, Packages: r.Packages, Description: r.Description,
		InputFiles: r.InputFiles, SandboxGrants: r.SandboxGrants}
	if cp := r.GetCheckpoint(); cp != nil && cp.Save != "" && cp.Load != "" {
		caps.Checkpoint = &backend.Checkpoint{Save: cp.Save, Load: cp.Load, Missing: cp.Missing, Hint: cp.Hint}
	}
	return caps, nil
}

func warmPoolToPB(w *backend.WarmPool) *pb.WarmPool {
	if w == nil {
		return nil
	}
	return &pb.WarmPool{Size: int32(w.Size), MemoryCap: w.MemoryCap, Warm: int32(w.Warm), Starting: int32(w.Starting), InUse: int32(w.InUse),
		Hits: w.Hits, Misses: w.Misses, Refills: w.Refills, Failures: w.Failures, Retired: w.Retired,
		LastRefillMs: w.LastRefill.Milliseconds(), MeanRefillMs: w.MeanRefill.Milliseconds(), LastFailure: w.LastFailure,
		MaxSize: int32(w.MaxSize), Target: convertMap(w.Target, func(n int) int32 { return int32(n) }), Grown: w.Grown, Shrunk: w.Shrunk}
}

// convertMap converts a map's values.
func convertMap[K comparable, A, B any](m map[K]A, f func(A) B) map[K]B {
	if m == nil {
		return nil
	}
	out := make(map[K]B, len(m))
	for k, v := range m {
		out[k] = f(v)
	}
	return out
}

func warmPoolFromPB(w *pb.WarmPool) *backend.WarmPool {
	if w == nil {
		return nil
	}
	return &backend.WarmPool{Size: int(w.Size), MemoryCap: w.MemoryCap, Warm: int(w.Warm), Starting: int(w.Starting), InUse: int(w.InUse),
		Hits: w.Hits, Misses: w.Misses, Refills: w.Refills, Failures: w.Failures, Retired: w.Retired,
		LastRefill: time.Duration(w.LastRefillMs) * time.Millisecond, MeanRefill: time.Duration(w.MeanRefillMs) * time.Millisecond, LastFailure: w.LastFailure,
		MaxSize: int(w.MaxSize), Target: convertMap(w.Target, func(n int32) int { return int(n) }), Grown: w.Grown, Shrunk: w.Shrunk}
}

// Execute implements backend.Backend.
func (c *BackendClient) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	r, err := c.backend.Execute(ctx, requestToPB(req))
	if err != nil {
		return backend.ExecuteResult{}, fromStatus(err)
	}
	return resultFromPB(r), nil
}

// ExecuteStream implements backend.StreamingBackend: ExecuteStream of API
// v2, with emit receiving the run's output, at most req.MaxOutputBytes of
// text in all whatever the plugin sends; Execute for a plugin that does
// not serve it (API v1, or v2 built with an SDK from before the RPC),
// which is then remembered.
func (c *BackendClient) ExecuteStream(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	if c.api < 2 || c.noStream.Load() {
		return c.Execute(ctx, req)
	}
	stream, err := c.backend.ExecuteStream(ctx, twin(requestToPB(req), &pb.ExecuteStreamRequest{}))
	if err != nil {
		return backend.ExecuteResult{}, fromStatus(err)
	}
	left := req.MaxOutputBytes
	for first := true; ; first = false {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return backend.ExecuteResult{}, errors.New("the backend's streamed execute ended without a result")
		}
		if status.Code(err) == codes.Unimplemented && first {
			// Nothing ran: the plugin does not know the RPC.
			c.noStream.Store(true)
			return c.Execute(ctx, req)
		}
		if err != nil {
			return backend.ExecuteResult{}, fromStatus(err)
		}
		switch k := ev.Kind.(type) {
		case *pb.ExecuteStreamResponse_Stream:
			name := host.Stream(k.Stream.Name)
			if err := name.Check(); err != nil {
				return backend.ExecuteResult{}, fmt.Errorf("the backend streamed output: %w", err)
			}
			text := k.Stream.Text
			if left > 0 && int64(len(text)) > left {
				text = sanitize.Cut(text, int(left))
			}
			if left > 0 && emit != nil && text != "" {
				left -= int64(len(text))
				emit(backend.StreamEvent{Name: name, Text: text})
			}
		case *pb.ExecuteStreamResponse_Result:
			return resultFromPB(k.Result), nil
		}
	}
}

// Compile-time checks of both sides of the wire.
var (
	_ backend.SessionBackend   = (*BackendClient)(nil)
	_ backend.StreamingBackend = (*BackendClient)(nil)
	_ pb.BackendServiceServer  = (*backendServer)(nil)
	_ pb.PluginServiceServer   = (*backendServer)(nil)
	_ host.Sandbox             = (*sandboxClient)(nil)
	_ host.Audit               = (*auditClient)(nil)
	_ pb.SandboxServiceServer  = (*sandboxServer)(nil)
	_ pb.AuditServiceServer    = (*auditServer)(nil)
	_ plugin.GRPCPlugin        = (*BackendPlugin)(nil)
)

// IsUnavailable reports a transport failure: the plugin process is gone.
func IsUnavailable(err error) bool {
	var he *host.Error
	return errors.As(err, &he) && he.Kind == host.KindUnavailable
}
