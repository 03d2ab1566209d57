// Package mcpserver is the MCP face of MCP-Forge: one go-sdk server
// assembled from the toolsets (core/mcpserver/toolsets/...: each tool one
// typed constructor, grouped with its resources), with the server's
// instructions, middleware, callers' identity and the resources that
// describe the whole. It talks to the engine through the interfaces the
// toolsets define (deps.go gathers them), never to the runtime, and knows
// no language: every execute_<language> tool comes from what the loaded
// backends report.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/answer"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/environments"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/tasks"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/apps"
	envtools "github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/environments"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/execution"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/files"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/jobs"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/notebooks"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/sessions"
	"github.com/mcp-forge/mcp-forge/core/route"
	"github.com/mcp-forge/mcp-forge/core/version"
)

// Server holds the MCP server and what its resources need; the tools
// are the toolsets' (core/mcpserver/toolsets/...).
type Server struct {
	mcp *mcp.Server
	eng Engine
	cfg config.Config

	conns sync.Map // *mcp.ServerSession → connection id
	next  atomic.Int64
	// pins keep a session's identity past its end for the calls still
	// running apart from it (MCP tasks, keep); ended are such sessions.
	pinMu sync.Mutex
	pins  map[*mcp.ServerSession]int
	ended map[*mcp.ServerSession]bool

	// Custom environments: the service, or why there is none.
	builds     *envtools.Builds
	identified bool // SetIdentity was called: callers are tenants

	noSubscriptions string         // why resources/subscribe is refused; "": allowed
	tasks           *tasks.Service // MCP Tasks at the wire (Tasks)
}

// New builds the MCP server from the toolsets: an execute_<language> tool
// for every language the engine offers, the session, notebook, file, job
// and (when enabled) environment tools, and the resources. log hears of
// answers that had to be cut to server.max_message.
func New(eng Engine, cfg config.Config, log hclog.Logger) *Server {
	s := &Server{eng: eng, cfg: cfg, builds: &envtools.Builds{}, pins: map[*mcp.ServerSession]int{}, ended: map[*mcp.ServerSession]bool{}}
	langs := eng.Languages()
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "mcp-forge", Title: "MCP-Forge", Version: version.Version},
		&mcp.ServerOptions{Instructions: instructions(langs, cfg),
			SubscribeHandler:   s.subscribe,
			UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil }})
	s.mcp.AddReceivingMiddleware(checkURIs, s.auditRejectedArguments)
	// Outside the argument audit, which a call made a task then passes
	// through apart from its request, and inside the identity (SetIdentity,
	// added after): the call keeps its caller's identity while it runs.
	s.tasks = tasks.New(eng, cfg)
	s.tasks.Keep = func(req mcp.Request) func() {
		ss, _ := req.GetSession().(*mcp.ServerSession)
		return s.keep(ss)
	}
	s.mcp.AddReceivingMiddleware(s.tasks.Middleware)
	// Added last, so outermost: it measures the answer every other
	// middleware returns.
	guard := answer.Guard{Limit: int(cfg.Server.MaxMessage), Log: log}
	s.mcp.AddReceivingMiddleware(guard.Receiving)
	s.mcp.AddSendingMiddleware(guard.Sending)
	env := toolsets.Env{Cfg: cfg, Conn: s.conn, Client: s.client}
	sets := []toolsets.Toolset{
		execution.Toolset(env, execution.Deps{Exec: eng, Jobs: eng, Builds: s.builds}),
		sessions.Toolset(env, eng, eng),
		files.Toolset(env, eng),
		notebooks.Toolset(env, eng),
		jobs.Toolset(env, eng),
		apps.Toolset(),
		{Name: "server", Resources: []toolsets.Resource{{Def: &mcp.Resource{
			URI: toolsets.EnvironmentURI, Name: "environment", Title: "Sandbox environment",
			Description: "Languages and their backends, images, resource limits, loaded plugins with their versions, and this connection's sessions", MIMEType: "application/json",
		}, Handler: s.environment}, {Def: &mcp.Resource{
			URI: toolsets.ToolsURI, Name: "tools-available", Title: "MCP tools callable from sandbox code",
			Description: "The MCP servers configured under mcp_tools, their tools with input and output schemas, and the policy of each tool (allow, deny, approve); grant them to a run with mcp_tools", MIMEType: "application/json",
		}, Handler: s.toolsAvailable}}},
	}
	if cfg.EnvironmentBuilder.Enabled {
		s.builds.Reason = "the environment service was not set up"
		sets = append(sets, envtools.Toolset(env, s.builds, eng.Languages))
	}
	for _, ts := range sets {
		ts.Register(s.mcp)
	}
	return s
}

// SetEnvironments connects the environment tools to the service that
// builds them; until then (or with svc nil) they answer why with reason.
// Call it before serving.
func (s *Server) SetEnvironments(svc *environments.Service, reason string) {
	s.builds.Service, s.builds.Reason = svc, reason
}

// client is who environments belong to: the tenant over HTTP; over stdio the
// one user of the process, whichever connection (a stdio host reconnecting
// keeps its environments).
func (s *Server) client(ss *mcp.ServerSession) string {
	if s.identified {
		return s.conn(ss)
	}
	return "local"
}

func (s *Server) toolsAvailable(ctx context.Context, _ *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	var v any
	if t, why := s.eng.Tools(); t != nil {
		v = t.Available(ctx)
	} else {
		if why == "" {
			why = "no bridge plugin is loaded"
		}
		v = map[string]any{"servers": []any{}, "tools": []any{}, "unavailable": why}
	}
	return toolsets.JSON(toolsets.ToolsURI, v)
}

// MCP is the underlying go-sdk server (for transports).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves on the transport until the client disconnects or ctx ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error { return s.mcp.Run(ctx, t) }

// Tasks serves MCP Tasks in front of this server: go-sdk refuses their
// methods before any middleware, so a transport (Transport) or an HTTP
// handler (Handler) is wrapped.
func (s *Server) Tasks() *tasks.Service { return s.tasks }

// instructions tell an agent what the server offers, from what is loaded.
func instructions(langs []route.Language, cfg config.Config) string {
	var tools []string
	sessions := false
	for _, l := range langs {
		tools = append(tools, fmt.Sprintf("execute_%s (%s)", l.ID, nameVersion(l)))
		sessions = sessions || l.Session.Backend != ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "MCP-Forge runs code in sandboxed Podman containers: %s, a read-only filesystem except /tmp and the working directory, resource limits and a timeout.\n", execution.Network(cfg))
	if len(tools) == 0 {
		b.WriteString("No backend plugin is loaded, so no language can run; the operator should run `mcp-forge doctor`.\n")
	} else {
		fmt.Fprintf(&b, "Tools: %s. Pass code; stdout and stderr come back separately, and the value of the last expression as result (JSON text) and result_repr (its printed form). Images the code produces come back as image content.\n", strings.Join(tools, ", "))
	}
	if sessions {
		fmt.Fprintf(&b, "Pass a session_id to keep state across calls (one kernel per session); document_state attaches notes to a session's variables, readable at %s.\n", toolsets.StateTemplate)
		b.WriteString(files.Instructions)
	}
	if len(tools) > 0 {
		b.WriteString("For work longer than a call should wait, pass background: true: the call answers with a job_id at once; wait_job, list_jobs, cancel_job and mcp://forge/jobs/{id} follow it.\n")
	}
	if cfg.EnvironmentBuilder.Enabled && len(tools) > 0 {
		fmt.Fprintf(&b, "build_environment makes an image mcp-forge/custom:<name> with extra packages; pass it as custom_image to run code in it (%s lists yours and the templates).\n", toolsets.EnvironmentsURI)
	}
	fmt.Fprintf(&b, "Read %s for the backends, images, limits and your sessions.", toolsets.EnvironmentURI)
	return b.String()
}

// nameVersion is "Python 3.11.2" when the backend reports a version.
func nameVersion(l route.Language) string {
	for _, o := range []route.Offer{l.Stateless, l.Session} {
		if v := o.Capabilities.LanguageVersion; v != "" {
			return l.Name + " " + v
		}
	}
	return l.Name
}

// conn names an MCP connection. Sessions belong to the connection that
// created them; the go-sdk session object is the identity (stdio sessions
// have no id string).
func (s *Server) conn(ss *mcp.ServerSession) string {
	if ss == nil {
		return "local"
	}
	if v, ok := s.conns.Load(ss); ok {
		return v.(string)
	}
	id := fmt.Sprintf("conn-%d", s.next.Add(1))
	if sid := ss.ID(); sid != "" {
		id += "-" + sid
	}
	v, _ := s.conns.LoadOrStore(ss, id)
	return v.(string)
}

func (s *Server) environment(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	type pluginInfo struct {
		Name            string   `json:"name"`
		Type            string   `json:"type"`
		Version         string   `json:"version"`
		APIVersion      int      `json:"api_version"`
		Languages       []string `json:"languages"`
		Stateful        bool     `json:"stateful"`
		Image           string   `json:"image,omitempty"`
		DefaultImage    string   `json:"default_image,omitempty"`
		LanguageVersion string   `json:"language_version,omitempty"`
		Packages        []string `json:"packages,omitempty"`
		Checksum        string   `json:"checksum"`
		Error           string   `json:"error,omitempty"`
		Restarts        int      `json:"restarts,omitempty"`
		WarmPool        any      `json:"warm_pool,omitempty"`
	}
	plugins := []pluginInfo{}
	images := map[string][]string{} // image → backends that run it
	for _, p := range s.eng.PluginStatuses() {
		c := p.Capabilities
		plugins = append(plugins, pluginInfo{Name: p.Name, Type: string(p.Type), Version: p.Version, APIVersion: p.APIVersion,
			Languages: c.Languages, Stateful: c.Stateful, Image: c.Image, DefaultImage: c.DefaultImage, LanguageVersion: c.LanguageVersion,
			Packages: c.Packages, Checksum: p.Checksum, Error: p.Error, Restarts: p.Restarts})
		if w := s.eng.WarmPool(ctx, p); w != nil {
			plugins[len(plugins)-1].WarmPool = map[string]any{"size": w.Size, "max_size": w.MaxSize, "target": w.Target, "grown": w.Grown, "shrunk": w.Shrunk, "memory_cap": w.MemoryCap, "warm": w.Warm, "starting": w.Starting,
				"in_use": w.InUse, "hits": w.Hits, "misses": w.Misses, "refills": w.Refills, "failures": w.Failures, "retired": w.Retired,
				"last_refill_ms": w.LastRefill.Milliseconds(), "mean_refill_ms": w.MeanRefill.Milliseconds(), "last_failure": w.LastFailure}
		}
		if c.Image != "" {
			images[c.Image] = append(images[c.Image], p.Name)
		}
	}
	type offer struct {
		Backend     string `json:"backend,omitempty"`
		Unavailable string `json:"unavailable,omitempty"`
	}
	languages := map[string]any{}
	for _, l := range s.eng.Languages() {
		languages[l.ID] = map[string]any{"name": l.Name,
			"stateless": offer{l.Stateless.Backend, l.Stateless.Unavailable}, "session": offer{l.Session.Backend, l.Session.Unavailable}}
	}
	e := s.cfg.Execution
	info := map[string]any{
		"server":    map[string]any{"name": "mcp-forge", "version": version.Version},
		"languages": languages,
		"images":    map[string]any{"in_use": images, "allowed": s.cfg.Images.Allowed},
		"limits": map[string]any{
			"default_timeout_s": e.DefaultTimeout, "max_timeout_s": e.MaxTimeout,
			"default_memory": e.DefaultMemory, "max_memory": e.MaxMemory,
			"default_cpu_quota": e.DefaultCPUQuota, "max_cpu_quota": e.MaxCPUQuota,
			"default_pids": e.DefaultPids, "max_output": e.MaxOutput, "max_image_size": e.MaxImageSize,
			"max_code_size": e.MaxCodeSize, "max_env_value": e.MaxEnvValue, "max_env_total": e.MaxEnvTotal,
			"max_sessions": s.cfg.Sessions.MaxConcurrent, "session_idle_timeout_s": s.cfg.Sessions.IdleTimeout,
		},
		"security":    map[string]any{"network": s.cfg.Security.AllowNetwork, "read_only_root": true, "user": s.cfg.Security.SandboxUser, "userns": s.cfg.Security.UserNS},
		"plugins":     plugins,
		"sessions":    sessions.Views(s.eng.Sessions(s.conn(req.Session), false)),
		"checkpoints": sessions.CheckpointInfos(s.eng.Checkpoints(s.conn(req.Session))),
		// Kernels taken warm from a backend's pool or started cold.
		"session_starts": startStats(s.eng.SessionStartStats()),
	}
	if t, why := s.eng.Tools(); t != nil {
		info["tool_bridge"] = t.Health(ctx)
	} else if len(s.cfg.MCPTools) > 0 || why != "" {
		info["tool_bridge"] = map[string]any{"unavailable": why}
	}
	return toolsets.JSON(toolsets.EnvironmentURI, info)
}

// subscribe admits a subscription to one of the caller's jobs or to the
// job list; other URIs change only when the caller acts (or not at all).
func (s *Server) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	if s.noSubscriptions != "" {
		return errors.New(s.noSubscriptions)
	}
	if uri == toolsets.JobsURI {
		return nil
	}
	if id, ok := strings.CutPrefix(uri, "mcp://forge/jobs/"); ok {
		if _, err := s.eng.Job(s.conn(req.Session), id, "resources/subscribe"); err == nil {
			return nil
		}
		return mcp.ResourceNotFoundError(uri)
	}
	return fmt.Errorf("resources/subscribe: %s does not change on its own; only jobs (%s) and the job list (%s) can be subscribed to", uri, toolsets.JobTemplate, toolsets.JobsURI)
}

// NoSubscriptions refuses resources/subscribe with why: a transport
// whose sessions end with each request (stateless streamable HTTP) has no
// one to tell of a change, and a subscription that is accepted and never
// heard from would mislead.
func (s *Server) NoSubscriptions(why string) { s.noSubscriptions = why }
