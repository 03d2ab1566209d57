// Package shim holds the thin gRPC client and server adapters between the
// SDK's Go interfaces and the generated protobuf code, which never leaves
// this module's internal packages.
package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

var kindCode = map[host.Kind]codes.Code{
	host.KindPolicy:      codes.PermissionDenied,
	host.KindInvalid:     codes.InvalidArgument,
	host.KindNotFound:    codes.NotFound,
	host.KindUnavailable: codes.Unavailable,
	host.KindInternal:    codes.Internal,
	host.KindTooLarge:    codes.ResourceExhausted,
}

// toStatus carries a host.Error's kind across the wire.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	// A message may quote what a container printed.
	var he *host.Error
	if errors.As(err, &he) {
		msg, _ := sanitize.UTF8(he.Message)
		return status.Error(kindCode[he.Kind], msg)
	}
	msg, _ := sanitize.UTF8(err.Error())
	return status.Error(codes.Internal, msg)
}

// fromStatus turns a gRPC error back into a host.Error.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for k, c := range kindCode {
		if c == st.Code() {
			return &host.Error{Kind: k, Message: st.Message()}
		}
	}
	return &host.Error{Kind: host.KindUnavailable, Message: st.Message()}
}

// RegisterHost serves h's services on s; fds (nil: none) is the plugin's
// fd channel, over which Dial sends local sockets instead of relaying them.
func RegisterHost(s *grpc.Server, h host.Host, fds *FDSender) {
	pb.RegisterSandboxServiceServer(s, &sandboxServer{impl: h.Sandbox(), fds: fds})
	pb.RegisterAuditServiceServer(s, &auditServer{impl: h.Audit()})
}

// NewHostClient returns a host.Host over conn.
func NewHostClient(conn *grpc.ClientConn) host.Host {
	return &hostClient{sb: &sandboxClient{c: pb.NewSandboxServiceClient(conn), fds: processFDChannel()}, au: &auditClient{c: pb.NewAuditServiceClient(conn)}}
}

// NewHostClientFD is NewHostClient for a plugin whose fd channel end is
// pluginEnd (which it takes) rather than FDChannelEnv's: for tests that
// serve the host services in process.
func NewHostClientFD(conn *grpc.ClientConn, pluginEnd *os.File) (host.Host, error) {
	r, err := newFDReceiverFile(pluginEnd)
	if err != nil {
		return nil, err
	}
	return &hostClient{sb: &sandboxClient{c: pb.NewSandboxServiceClient(conn), fds: r}, au: &auditClient{c: pb.NewAuditServiceClient(conn)}}, nil
}

type hostClient struct {
	sb *sandboxClient
	au *auditClient
}

func (h *hostClient) Sandbox() host.Sandbox { return h.sb }
func (h *hostClient) Audit() host.Audit     { return h.au }

type sandboxServer struct {
	pb.UnimplementedSandboxServiceServer
	impl host.Sandbox
	fds  *FDSender // nil: Dial relays every connection
	// open counts the plugin's Dials in progress or relayed (at most
	// MaxOpenChannels): each holds a socket and a stream window of the core.
	open atomic.Int32
}

func (s *sandboxServer) Create(ctx context.Context, r *pb.CreateRequest) (*pb.CreateResponse, error) {
	in := host.Intent{
		Image: r.Image, Command: r.Command, Env: r.Env, WorkDir: r.Workdir,
		Timeout: time.Duration(r.TimeoutSeconds) * time.Second, Memory: r.Memory, CPUQuota: r.CpuQuota, Pids: r.Pids,
		SessionID: r.SessionId, Files: r.Files, Labels: r.Labels, CodeHash: r.CodeSha256, ToolsGrant: r.ToolsGrant,
		WarmUp: r.WarmUp, NetworkGrant: r.NetworkGrant, SandboxGrant: r.SandboxGrant,
	}
	for _, m := range r.Mounts {
		in.Mounts = append(in.Mounts, host.Mount{Subdir: m.Subdir, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	for _, e := range r.Endpoints {
		in.Endpoints = append(in.Endpoints, host.Endpoint{Name: e.Name, Path: e.Path})
	}
	c, err := s.impl.Create(ctx, in)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.CreateResponse{ContainerId: c.ID}, nil
}

func (s *sandboxServer) Start(ctx context.Context, r *pb.StartRequest) (*pb.StartResponse, error) {
	return &pb.StartResponse{}, toStatus(s.impl.Start(ctx, r.ContainerId))
}

func (s *sandboxServer) Wait(ctx context.Context, r *pb.WaitRequest) (*pb.WaitResponse, error) {
	w, err := s.impl.Wait(ctx, r.ContainerId, time.Duration(r.TimeoutMs)*time.Millisecond)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.WaitResponse{ExitCode: int32(w.ExitCode), TimedOut: w.TimedOut, OomKilled: w.OOMKilled, Message: w.Message}, nil
}

func (s *sandboxServer) State(ctx context.Context, r *pb.StateRequest) (*pb.StateResponse, error) {
	st, err := s.impl.State(ctx, r.ContainerId)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.StateResponse{Running: st.Running, ExitCode: int32(st.ExitCode), OomKilled: st.OOMKilled, Message: st.Message}, nil
}

func outputToPB(o host.Output) *pb.Output {
	return &pb.Output{Stdout: o.Stdout, Stderr: o.Stderr, StdoutBytes: o.StdoutTotal, StderrBytes: o.StderrTotal}
}

func outputFromPB(o *pb.Output) host.Output {
	if o == nil {
		return host.Output{}
	}
	return host.Output{Stdout: o.Stdout, Stderr: o.Stderr, StdoutTotal: o.StdoutBytes, StderrTotal: o.StderrBytes}
}

func (s *sandboxServer) Logs(ctx context.Context, r *pb.LogsRequest) (*pb.LogsResponse, error) {
	o, err := s.impl.Logs(ctx, r.ContainerId, r.MaxBytes)
	if err != nil {
		return nil, toStatus(err)
	}
	return twin(outputToPB(o), &pb.LogsResponse{}), nil
}

func execFromPB(r *pb.ExecRequest) host.ExecRequest {
	return host.ExecRequest{Command: r.Command, Stdin: r.Stdin, Env: r.Env, WorkDir: r.Workdir,
		Timeout: time.Duration(r.TimeoutMs) * time.Millisecond, MaxBytes: r.MaxBytes}
}

func execResultToPB(res host.ExecResult) *pb.ExecResponse {
	return &pb.ExecResponse{ExitCode: int32(res.ExitCode), Output: outputToPB(res.Output), TimedOut: res.TimedOut}
}

// Exec serves plugins built against an SDK that did not stream exec output.
func (s *sandboxServer) Exec(ctx context.Context, r *pb.ExecRequest) (*pb.ExecResponse, error) {
	res, err := s.impl.Exec(ctx, r.ContainerId, execFromPB(r))
	if err != nil {
		return nil, toStatus(err)
	}
	return execResultToPB(res), nil
}

func (s *sandboxServer) ExecStream(sr *pb.ExecStreamRequest, stream pb.SandboxService_ExecStreamServer) error {
	r := twin(sr, &pb.ExecRequest{})
	req := execFromPB(r)
	var sendErr error
	req.Output = func(name host.Stream, data []byte) {
		if sendErr == nil {
			sendErr = stream.Send(&pb.ExecStreamResponse{Kind: &pb.ExecStreamResponse_Chunk{Chunk: &pb.OutputChunk{Stream: string(name), Data: data}}})
		}
	}
	res, err := s.impl.Exec(stream.Context(), r.ContainerId, req)
	if err != nil {
		return toStatus(err)
	}
	if sendErr != nil {
		return sendErr
	}
	return stream.Send(&pb.ExecStreamResponse{Kind: &pb.ExecStreamResponse_Result{Result: execResultToPB(res)}})
}

func (s *sandboxServer) Signal(ctx context.Context, r *pb.SignalRequest) (*pb.SignalResponse, error) {
	scope := host.SignalInit
	if r.Scope == pb.SignalScope_SIGNAL_SCOPE_ALL {
		scope = host.SignalAll
	}
	sig := host.Signal(r.Signal).Normal() // a v1 plugin may send "SIGINT"
	if err := sig.Check(); err != nil {
		return nil, toStatus(err)
	}
	return &pb.SignalResponse{}, toStatus(s.impl.Signal(ctx, r.ContainerId, sig, scope))
}

func (s *sandboxServer) PutFile(ctx context.Context, r *pb.PutFileRequest) (*pb.PutFileResponse, error) {
	return &pb.PutFileResponse{}, toStatus(s.impl.PutFile(ctx, r.ContainerId, r.Path, r.Data))
}

func (s *sandboxServer) GetFile(ctx context.Context, r *pb.GetFileRequest) (*pb.GetFileResponse, error) {
	data, err := s.impl.GetFile(ctx, r.ContainerId, r.Path, r.MaxBytes)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.GetFileResponse{Data: data}, nil
}

func (s *sandboxServer) RemoveWorkspace(ctx context.Context, r *pb.RemoveWorkspaceRequest) (*pb.RemoveWorkspaceResponse, error) {
	return &pb.RemoveWorkspaceResponse{}, toStatus(s.impl.RemoveWorkspace(ctx, r.SessionId))
}

func (s *sandboxServer) Clamp(ctx context.Context, r *pb.ClampRequest) (*pb.ClampResponse, error) {
	return &pb.ClampResponse{}, toStatus(s.impl.Clamp(ctx, r.ContainerId))
}

func (s *sandboxServer) Claim(ctx context.Context, r *pb.ClaimRequest) (*pb.ClaimResponse, error) {
	return &pb.ClaimResponse{}, toStatus(s.impl.Claim(ctx, r.ContainerId, r.SandboxGrant))
}

func (s *sandboxServer) Stop(ctx context.Context, r *pb.StopRequest) (*pb.StopResponse, error) {
	return &pb.StopResponse{}, toStatus(s.impl.Stop(ctx, r.ContainerId, time.Duration(r.GraceMs)*time.Millisecond))
}

func (s *sandboxServer) Remove(ctx context.Context, r *pb.RemoveRequest) (*pb.RemoveResponse, error) {
	return &pb.RemoveResponse{}, toStatus(s.impl.Remove(ctx, r.ContainerId))
}

func (s *sandboxServer) ReadFiles(ctx context.Context, r *pb.ReadFilesRequest) (*pb.ReadFilesResponse, error) {
	files, err := s.impl.ReadFiles(ctx, r.ContainerId, r.Subdir, r.MaxFileBytes, r.MaxTotalBytes)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ReadFilesResponse{}
	for _, f := range files {
		out.Files = append(out.Files, &pb.File{Name: f.Name, Data: f.Data, Size: f.Size, Skipped: f.Skipped})
	}
	return out, nil
}

type sandboxClient struct {
	c   pb.SandboxServiceClient
	fds *fdReceiver // this process's fd channel; nil: every Dial is a stream
}

func (c *sandboxClient) Create(ctx context.Context, in host.Intent) (host.Container, error) {
	r := &pb.CreateRequest{
		Image: in.Image, Command: in.Command, Env: in.Env, Workdir: in.WorkDir,
		TimeoutSeconds: int64(in.Timeout / time.Second), Memory: in.Memory, CpuQuota: in.CPUQuota, Pids: in.Pids,
		SessionId: in.SessionID, Files: in.Files, Labels: in.Labels, CodeSha256: in.CodeHash, ToolsGrant: in.ToolsGrant,
		WarmUp: in.WarmUp, NetworkGrant: in.NetworkGrant, SandboxGrant: in.SandboxGrant,
	}
	for _, m := range in.Mounts {
		r.Mounts = append(r.Mounts, &pb.WorkspaceMount{Subdir: m.Subdir, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	for _, e := range in.Endpoints {
		r.Endpoints = append(r.Endpoints, &pb.Endpoint{Name: e.Name, Path: e.Path})
	}
	resp, err := c.c.Create(ctx, r)
	if err != nil {
		return host.Container{}, fromStatus(err)
	}
	return host.Container{ID: resp.ContainerId}, nil
}

func (c *sandboxClient) Start(ctx context.Context, id string) error {
	_, err := c.c.Start(ctx, &pb.StartRequest{ContainerId: id})
	return fromStatus(err)
}

func (c *sandboxClient) Wait(ctx context.Context, id string, timeout time.Duration) (host.WaitResult, error) {
	r, err := c.c.Wait(ctx, &pb.WaitRequest{ContainerId: id, TimeoutMs: timeout.Milliseconds()})
	if err != nil {
		return host.WaitResult{}, fromStatus(err)
	}
	return host.WaitResult{ExitCode: int(r.ExitCode), TimedOut: r.TimedOut, OOMKilled: r.OomKilled, Message: r.Message}, nil
}

func (c *sandboxClient) State(ctx context.Context, id string) (host.State, error) {
	r, err := c.c.State(ctx, &pb.StateRequest{ContainerId: id})
	if err != nil {
		return host.State{}, fromStatus(err)
	}
	return host.State{Running: r.Running, ExitCode: int(r.ExitCode), OOMKilled: r.OomKilled, Message: r.Message}, nil
}

func (c *sandboxClient) Logs(ctx context.Context, id string, max int64) (host.Output, error) {
	r, err := c.c.Logs(ctx, &pb.LogsRequest{ContainerId: id, MaxBytes: max})
	if err != nil {
		return host.Output{}, fromStatus(err)
	}
	return outputFromPB(twin(r, &pb.Output{})), nil
}

func (c *sandboxClient) Exec(ctx context.Context, id string, req host.ExecRequest) (host.ExecResult, error) {
	stream, err := c.c.ExecStream(ctx, &pb.ExecStreamRequest{ContainerId: id, Command: req.Command, MaxBytes: req.MaxBytes,
		Stdin: req.Stdin, Env: req.Env, Workdir: req.WorkDir, TimeoutMs: req.Timeout.Milliseconds()})
	if err != nil {
		return host.ExecResult{}, fromStatus(err)
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return host.ExecResult{}, &host.Error{Kind: host.KindUnavailable, Message: "exec ended without a result"}
		}
		if err != nil {
			return host.ExecResult{}, fromStatus(err)
		}
		switch k := ev.Kind.(type) {
		case *pb.ExecStreamResponse_Chunk:
			name := host.Stream(k.Chunk.Stream)
			if err := name.Check(); err != nil {
				return host.ExecResult{}, fmt.Errorf("the core sent exec output: %w", err)
			}
			if req.Output != nil {
				req.Output(name, k.Chunk.Data)
			}
		case *pb.ExecStreamResponse_Result:
			return host.ExecResult{ExitCode: int(k.Result.ExitCode), TimedOut: k.Result.TimedOut, Output: outputFromPB(k.Result.Output)}, nil
		}
	}
}

func (c *sandboxClient) Signal(ctx context.Context, id string, sig host.Signal, scope host.SignalScope) error {
	if err := sig.Check(); err != nil {
		return err
	}
	ps := pb.SignalScope_SIGNAL_SCOPE_INIT
	if scope == host.SignalAll {
		ps = pb.SignalScope_SIGNAL_SCOPE_ALL
	}
	_, err := c.c.Signal(ctx, &pb.SignalRequest{ContainerId: id, Signal: string(sig.Normal()), Scope: ps})
	return fromStatus(err)
}

func (c *sandboxClient) PutFile(ctx context.Context, id, path string, data []byte) error {
	_, err := c.c.PutFile(ctx, &pb.PutFileRequest{ContainerId: id, Path: path, Data: data})
	return fromStatus(err)
}

func (c *sandboxClient) GetFile(ctx context.Context, id, path string, max int64) ([]byte, error) {
	r, err := c.c.GetFile(ctx, &pb.GetFileRequest{ContainerId: id, Path: path, MaxBytes: max})
	if err != nil {
		return nil, fromStatus(err)
	}
	return r.Data, nil
}

func (c *sandboxClient) RemoveWorkspace(ctx context.Context, sessionID string) error {
	_, err := c.c.RemoveWorkspace(ctx, &pb.RemoveWorkspaceRequest{SessionId: sessionID})
	return fromStatus(err)
}

// Claim needs no fallback: a core that sends no pool grant is never asked.
func (c *sandboxClient) Claim(ctx context.Context, id, sandboxGrant string) error {
	_, err := c.c.Claim(ctx, &pb.ClaimRequest{ContainerId: id, SandboxGrant: sandboxGrant})
	return fromStatus(err)
}

func (c *sandboxClient) Clamp(ctx context.Context, id string) error {
	_, err := c.c.Clamp(ctx, &pb.ClampRequest{ContainerId: id})
	if status.Code(err) == codes.Unimplemented {
		// A core without Clamp knows no warm_up either: the container had
		// its limits from the start.
		return nil
	}
	return fromStatus(err)
}

func (c *sandboxClient) Stop(ctx context.Context, id string, grace time.Duration) error {
	_, err := c.c.Stop(ctx, &pb.StopRequest{ContainerId: id, GraceMs: grace.Milliseconds()})
	return fromStatus(err)
}

func (c *sandboxClient) Remove(ctx context.Context, id string) error {
	_, err := c.c.Remove(ctx, &pb.RemoveRequest{ContainerId: id})
	return fromStatus(err)
}

func (c *sandboxClient) ReadFiles(ctx context.Context, id, subdir string, maxFile, maxTotal int64) ([]host.File, error) {
	r, err := c.c.ReadFiles(ctx, &pb.ReadFilesRequest{ContainerId: id, Subdir: subdir, MaxFileBytes: maxFile, MaxTotalBytes: maxTotal})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]host.File, 0, len(r.Files))
	for _, f := range r.Files {
		out = append(out, host.File{Name: f.Name, Data: f.Data, Size: f.Size, Skipped: f.Skipped})
	}
	return out, nil
}

type auditServer struct {
	pb.UnimplementedAuditServiceServer
	impl host.Audit
}

func (s *auditServer) Record(ctx context.Context, r *pb.RecordRequest) (*pb.RecordResponse, error) {
	var details map[string]any
	if r.DetailsJson != "" {
		if err := json.Unmarshal([]byte(r.DetailsJson), &details); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "audit details are not a JSON object: %v", err)
		}
	}
	err := s.impl.Record(ctx, host.Event{Event: r.Event, Severity: r.Severity, SessionID: r.SessionId, Success: r.Success, Details: details, Error: r.Error})
	return &pb.RecordResponse{}, toStatus(err)
}

type auditClient struct{ c pb.AuditServiceClient }

func (c *auditClient) Record(ctx context.Context, e host.Event) error {
	var details []byte
	if e.Details != nil {
		var err error
		if details, err = json.Marshal(e.Details); err != nil {
			return err
		}
	}
	_, err := c.c.Record(ctx, &pb.RecordRequest{Event: e.Event, Severity: e.Severity, SessionId: e.SessionID, Success: e.Success, DetailsJson: string(details), Error: e.Error})
	return fromStatus(err)
}
