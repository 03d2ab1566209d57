package mcpserver

import (
	"context"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// SetIdentity makes fn name the caller of every request instead of the MCP
// connection: over HTTP the caller is the tenant of the verified token, so
// sessions belong to the tenant and not to an HTTP request (in stateless
// mode each request is its own go-sdk session). A request fn cannot name
// is refused. Call it before serving.
//
// HOOK(http): the only change core/mcpserver needs for tenants; conn()
// returns what is stored here for the request's session.
func (s *Server) SetIdentity(fn func(mcp.Request) (string, error)) {
	s.identified = true // environments belong to the tenant (environments.go)
	s.mcp.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			ss, ok := req.GetSession().(*mcp.ServerSession)
			if !ok || ss == nil {
				return next(ctx, method, req)
			}
			id, err := fn(req)
			if err != nil {
				return nil, err
			}
			if _, loaded := s.conns.Swap(ss, id); !loaded {
				// Forget the session when it ends (after each request in
				// stateless mode), so the map does not grow with traffic.
				go func() { _ = ss.Wait(); s.forget(ss) }()
			}
			return next(ctx, method, req)
		}
	})
}

// forget drops an ended session's identity, or leaves that to the last
// call still running apart from it (keep).
func (s *Server) forget(ss *mcp.ServerSession) {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	if s.pins[ss] > 0 {
		s.ended[ss] = true
		return
	}
	s.conns.Delete(ss)
}

// keep holds ss's identity until release: a call run apart from its
// request (an MCP task) answers as its caller after the request, and in
// stateless HTTP its go-sdk session, ended.
func (s *Server) keep(ss *mcp.ServerSession) (release func()) {
	if ss == nil {
		return func() {}
	}
	s.pinMu.Lock()
	s.pins[ss]++
	s.pinMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.pinMu.Lock()
			defer s.pinMu.Unlock()
			if s.pins[ss]--; s.pins[ss] > 0 {
				return
			}
			delete(s.pins, ss)
			if s.ended[ss] {
				delete(s.ended, ss)
				s.conns.Delete(ss)
			}
		})
	}
}

// StdioClient owns every session of a stdio server. One stdio server serves
// one client, so its client need not be the connection (conn-N, new at every
// start): with a stable client, the checkpoints taken at shutdown are the
// same client's after a restart (docs/session-data.md). Over HTTP the client
// is the tenant (SetIdentity), never this.
const StdioClient = "local"
