package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

func (s *backendServer) sessions() (backend.SessionBackend, error) {
	b, err := s.backend()
	if err != nil {
		return nil, err
	}
	sb, ok := b.(backend.SessionBackend)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "backend %s is stateless: it has no sessions", s.info.Name)
	}
	return sb, nil
}

func (s *backendServer) OpenSession(ctx context.Context, r *pb.OpenSessionRequest) (*pb.OpenSessionResponse, error) {
	sb, err := s.sessions()
	if err != nil {
		return nil, err
	}
	info, err := sb.OpenSession(ctx, backend.OpenSessionRequest{SessionID: r.SessionId, Image: r.Image, Memory: r.Memory, Env: r.Env, ToolsGrant: r.ToolsGrant, WorkspaceID: r.WorkspaceId, NetworkGrant: r.NetworkGrant, Resume: r.Resume, ResumeContainer: r.ResumeContainerId, Restored: r.Restored, SandboxGrant: r.SandboxGrant, SandboxPoolGrant: r.SandboxPoolGrant})
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.OpenSessionResponse{SessionId: info.SessionID, ContainerId: info.ContainerID, Language: info.Language, WorkspaceId: info.WorkspaceID, ResumeState: info.ResumeState, Resumed: info.Resumed}, nil
}

func (s *backendServer) ExecuteSession(sr *pb.ExecuteSessionRequest, stream pb.BackendService_ExecuteSessionServer) error {
	r := twin(sr, &pb.ExecuteRequest{})
	sb, err := s.sessions()
	if err != nil {
		return err
	}
	es := newEventSender(s.maxMessage, func(ev *pb.StreamEvent) error {
		return stream.Send(&pb.ExecuteSessionResponse{Kind: &pb.ExecuteSessionResponse_Stream{Stream: ev}})
	})
	res, err := sb.ExecuteInSession(stream.Context(), requestFromPB(r), es.emit)
	replaced := es.close()
	if err != nil {
		return toStatus(err)
	}
	out := resultToPB(res)
	prepareResult(out, s.maxMessage, replaced)
	return stream.Send(&pb.ExecuteSessionResponse{Kind: &pb.ExecuteSessionResponse_Result{Result: out}})
}

// eventSender sends a backend's output events on a server stream: made
// valid UTF-8 (the streams a replacement happened in are named in the
// result's notice) and within the message limit, one at a time (a backend
// may emit from several goroutines; a stream sends from one), and never
// after close, which comes before the result is sent.
type eventSender struct {
	maxMessage int
	send       func(*pb.StreamEvent) error

	mu       sync.Mutex
	closed   bool
	replaced []string
}

func newEventSender(maxMessage int, send func(*pb.StreamEvent) error) *eventSender {
	return &eventSender{maxMessage: maxMessage, send: send}
}

func (e *eventSender) emit(ev backend.StreamEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	text, bad := sanitize.UTF8(ev.Text)
	if bad && !slices.Contains(e.replaced, string(ev.Name)) {
		e.replaced = append(e.replaced, string(ev.Name))
	}
	_ = e.send(&pb.StreamEvent{Name: string(ev.Name), Text: fitEvent(text, e.maxMessage)})
}

// close ends the sending and returns the streams whose text was replaced.
func (e *eventSender) close() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	return e.replaced
}

func (s *backendServer) Interrupt(ctx context.Context, r *pb.InterruptRequest) (*pb.InterruptResponse, error) {
	sb, err := s.sessions()
	if err != nil {
		return nil, err
	}
	return &pb.InterruptResponse{}, toStatus(sb.Interrupt(ctx, r.SessionId))
}

func (s *backendServer) Inspect(ctx context.Context, r *pb.InspectRequest) (*pb.InspectResponse, error) {
	sb, err := s.sessions()
	if err != nil {
		return nil, err
	}
	vars, err := sb.Inspect(ctx, r.SessionId)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.InspectResponse{}
	for _, v := range vars {
		d, _ := json.Marshal(v.Details)
		out.Variables = append(out.Variables, &pb.Variable{Name: v.Name, Type: v.Type, SizeBytes: v.Size, Repr: v.Repr, DetailsJson: string(d)})
	}
	return out, nil
}

func (s *backendServer) RestartSession(ctx context.Context, r *pb.RestartSessionRequest) (*pb.RestartSessionResponse, error) {
	sb, err := s.sessions()
	if err != nil {
		return nil, err
	}
	return &pb.RestartSessionResponse{}, toStatus(sb.RestartSession(ctx, r.SessionId))
}

func (s *backendServer) CloseSession(ctx context.Context, r *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	sb, err := s.sessions()
	if err != nil {
		return nil, err
	}
	return &pb.CloseSessionResponse{}, toStatus(sb.CloseSession(ctx, r.SessionId))
}

// OpenSession implements backend.SessionBackend.
func (c *BackendClient) OpenSession(ctx context.Context, r backend.OpenSessionRequest) (backend.SessionInfo, error) {
	info, err := c.backend.OpenSession(ctx, &pb.OpenSessionRequest{SessionId: r.SessionID, Image: r.Image, Memory: r.Memory, Env: r.Env, ToolsGrant: r.ToolsGrant, WorkspaceId: r.WorkspaceID, NetworkGrant: r.NetworkGrant, Resume: r.Resume, ResumeContainerId: r.ResumeContainer, Restored: r.Restored, SandboxGrant: r.SandboxGrant, SandboxPoolGrant: r.SandboxPoolGrant})
	if err != nil {
		return backend.SessionInfo{}, fromStatus(err)
	}
	if len(r.Resume) > 0 && (!info.Resumed || info.ContainerId != r.ResumeContainer || info.SessionId != r.SessionID) {
		// A plugin built before resume ignores the field and opens a fresh
		// kernel; one that says it resumed may still answer of another
		// container. Either way the session's state would be silently
		// gone: what it opened is closed and the resume refused.
		_, _ = c.backend.CloseSession(context.WithoutCancel(ctx), &pb.CloseSessionRequest{SessionId: r.SessionID})
		if !info.Resumed {
			return backend.SessionInfo{}, host.Errorf(host.KindInvalid, "the backend plugin does not resume running sessions (it started a new kernel instead, now closed): rebuild it with the current SDK")
		}
		return backend.SessionInfo{}, host.Errorf(host.KindInvalid, "the backend plugin says it resumed session %s in container %s, but answered of session %s in container %s: refused, and closed", r.SessionID, r.ResumeContainer, info.SessionId, info.ContainerId)
	}
	return backend.SessionInfo{SessionID: info.SessionId, ContainerID: info.ContainerId, Language: info.Language, WorkspaceID: info.WorkspaceId, ResumeState: info.ResumeState, Resumed: info.Resumed}, nil
}

// ExecuteInSession implements backend.SessionBackend.
func (c *BackendClient) ExecuteInSession(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	stream, err := c.backend.ExecuteSession(ctx, twin(requestToPB(req), &pb.ExecuteSessionRequest{}))
	if err != nil {
		return backend.ExecuteResult{}, fromStatus(err)
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return backend.ExecuteResult{}, errors.New("session execute ended without a result")
		}
		if err != nil {
			return backend.ExecuteResult{}, fromStatus(err)
		}
		switch k := ev.Kind.(type) {
		case *pb.ExecuteSessionResponse_Stream:
			name := host.Stream(k.Stream.Name)
			if err := name.Check(); err != nil {
				return backend.ExecuteResult{}, fmt.Errorf("the backend streamed output: %w", err)
			}
			if emit != nil {
				emit(backend.StreamEvent{Name: name, Text: k.Stream.Text})
			}
		case *pb.ExecuteSessionResponse_Result:
			return resultFromPB(k.Result), nil
		}
	}
}

// Interrupt implements backend.SessionBackend.
func (c *BackendClient) Interrupt(ctx context.Context, id string) error {
	_, err := c.backend.Interrupt(ctx, &pb.InterruptRequest{SessionId: id})
	return fromStatus(err)
}

// Inspect implements backend.SessionBackend.
func (c *BackendClient) Inspect(ctx context.Context, id string) ([]backend.Variable, error) {
	r, err := c.backend.Inspect(ctx, &pb.InspectRequest{SessionId: id})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]backend.Variable, 0, len(r.Variables))
	for _, v := range r.Variables {
		var d map[string]any
		json.Unmarshal([]byte(v.DetailsJson), &d)
		out = append(out, backend.Variable{Name: v.Name, Type: v.Type, Size: v.SizeBytes, Repr: v.Repr, Details: d})
	}
	return out, nil
}

// RestartSession implements backend.SessionBackend.
func (c *BackendClient) RestartSession(ctx context.Context, id string) error {
	_, err := c.backend.RestartSession(ctx, &pb.RestartSessionRequest{SessionId: id})
	return fromStatus(err)
}

// CloseSession implements backend.SessionBackend.
func (c *BackendClient) CloseSession(ctx context.Context, id string) error {
	_, err := c.backend.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: id})
	return fromStatus(err)
}
