package httpserver

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/metrics"
	"github.com/mcp-forge/mcp-forge/core/tenant"
)

// Core is what the HTTP transport needs of the core it serves. The
// assembly (core/forge) implements it; this package knows no other part of
// the core, so a test serves a fake.
type Core interface {
	MCPHandlerFactory
	AuditHooks
	SessionCounter
	PluginStatuses
	Readiness
}

// MCPHandlerFactory gives the MCP server that answers a request (go-sdk's
// streamable handler factory), and lets the transport's tenants reach it.
type MCPHandlerFactory interface {
	// MCPServer is the MCP server of a request. The handler is stateless,
	// so it is one server for every request.
	MCPServer(*http.Request) *mcp.Server
	// UseTenants makes the core name every request's tenant with reg and
	// apply reg's quotas, reporting outcomes and refusals to obs. Called
	// once, before serving.
	UseTenants(reg *tenant.Registry, obs tenant.Observer)
	// Tasks wraps the MCP handler with MCP Tasks, which go-sdk refuses
	// before any middleware; identify names a request's owner (its
	// tenant), maxBody bounds the body read to look at it.
	Tasks(next http.Handler, identify func(*http.Request) (string, error), maxBody int64) http.Handler
}

// AuditHooks records the transport's refusals and registers its hooks on
// every audit entry (tenant attribution, metrics).
type AuditHooks interface {
	audit.Recorder
	AddAuditHook(func(*audit.Entry))
}

// SessionCounter counts a tenant's live sessions (metrics).
type SessionCounter interface {
	SessionCount(tenant string) int
}

// PluginStatuses reports the plugins (metrics labels and restarts).
type PluginStatuses interface {
	PluginStatuses() []PluginStatus
}

// PluginStatus is one plugin as the metrics show it.
type PluginStatus struct {
	Name      string
	Languages []string
	Restarts  int
	WarmPool  *metrics.Pool // nil: it keeps none
}

// Readiness answers /readyz: the server is ready when every check is OK.
type Readiness interface {
	Ready(ctx context.Context) []Check
}

// Check is one line of /readyz.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
	// Age is how old the answer shown is ("42s"), for a line not asked
	// afresh each round (the runtime's guarantees, or the last good answer
	// kept while a failure is not yet persistent); "" when it is.
	Age string `json:"age,omitempty"`
}
