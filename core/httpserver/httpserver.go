// Package httpserver serves MCP-Forge over streamable HTTP: go-sdk's
// handler in stateless mode (every protocol version, SSE responses so
// progress flows), bearer-token authentication naming a tenant, per-tenant
// quotas, a request body limit, cross-origin and DNS-rebinding protection,
// TLS, /healthz, /readyz and Prometheus /metrics, and a graceful shutdown
// that lets running calls finish within a deadline.
package httpserver

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/metrics"
	"github.com/mcp-forge/mcp-forge/core/telemetry"
	"github.com/mcp-forge/mcp-forge/core/tenant"
)

// Path is where the MCP endpoint is served.
const Path = "/mcp"

// Server is the HTTP face of one core.
type Server struct {
	cfg     config.Config
	addr    string
	log     hclog.Logger
	core    Core
	Tenants *tenant.Registry
	Metrics *metrics.Metrics

	main, admin *http.Server
	readiness   readyCache
}

// readyTTL is how long one answer of the core's checks serves /readyz.
// The admin listener needs no key (a pod's probes reach it), and each
// check asks the engine (the API server, on Kubernetes): requests in a
// burst, whoever sends them, share one round of checks.
const readyTTL = time.Second

// readyCache holds the last round of checks.
type readyCache struct {
	mu     sync.Mutex // held through a round: requests meanwhile wait for it
	at     time.Time
	checks []Check
	now    func() time.Time // nil: time.Now
}

// get returns checks at most readyTTL old, running them when there are
// none. A round runs to its own deadline whoever asked for it: a client
// that hangs up would otherwise leave a failed round for the next probe.
func (c *readyCache) get(ctx context.Context, run func(context.Context) []Check) []Check {
	now := c.now
	if now == nil {
		now = time.Now
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && now().Sub(c.at) < readyTTL {
		return c.checks
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	c.checks, c.at = run(rctx), now()
	return c.checks
}

// CheckBind refuses an address that would expose an unauthenticated server
// beyond this machine: fail closed unless the operator said otherwise.
func CheckBind(addr string, authenticated, allowUnauthenticated bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w (use host:port, e.g. 127.0.0.1:3000)", addr, err)
	}
	if authenticated || allowUnauthenticated || config.IsLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("refusing to serve %s without authentication: anyone who reaches it could run code. "+
		"Add a [tenants.NAME] table with api_key_sha256 (`mcp-forge tenant new-key`), bind to 127.0.0.1, "+
		"or set server.allow_unauthenticated = true if something in front of it authenticates", addr)
}

// New wires the HTTP server to a core. It hands the core its tenants
// (identity and quotas) and adds the audit hooks, so build it once per
// core, before serving.
func New(cfg config.Config, core Core, addr string, log hclog.Logger) (*Server, error) {
	reg := tenant.New(cfg)
	if cfg.Auth.JWT.Enabled() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		j, err := tenant.NewJWT(ctx, cfg.Auth.JWT, log.Named("jwt"))
		cancel()
		if err != nil {
			return nil, err
		}
		reg.UseJWT(j)
	}
	if err := CheckBind(addr, reg.Authenticated(), cfg.Server.AllowUnauthenticated); err != nil {
		return nil, err
	}
	if a := cfg.Server.AdminAddr; a != "" && !cfg.Server.AdminPublic {
		// The admin listener has no authentication: it runs no code, but
		// /metrics names tenants and counts their calls. It stays local
		// unless the operator said who reaches it.
		if err := CheckBind(a, false, cfg.Server.AllowUnauthenticated); err != nil {
			return nil, fmt.Errorf("server.admin_addr: %s would serve /metrics (tenant names and call counts) without authentication to anyone who reaches it: "+
				"bind it to 127.0.0.1, or set server.admin_public = true where only probes and scrapers reach it (a pod network)", a)
		}
	}
	s := &Server{cfg: cfg, addr: addr, log: log, core: core, Tenants: reg}

	var languages, backends []string
	for _, p := range core.PluginStatuses() {
		backends = append(backends, p.Name)
		languages = append(languages, p.Languages...)
	}
	s.Metrics = metrics.New(metrics.Source{
		Sessions: func() map[string]int {
			out := map[string]int{}
			for _, t := range reg.Names() {
				out[t] = core.SessionCount(t)
			}
			return out
		},
		PluginRestarts: func() map[string]int {
			out := map[string]int{}
			for _, p := range core.PluginStatuses() {
				out[p.Name] = p.Restarts
			}
			return out
		},
		WarmPools: func() map[string]metrics.Pool {
			out := map[string]metrics.Pool{}
			for _, p := range core.PluginStatuses() {
				if p.WarmPool != nil {
					out[p.Name] = *p.WarmPool
				}
			}
			return out
		},
	}, reg.Names(), languages, backends)

	for _, name := range reg.Names() {
		// Requests holding a tenant's slots (max_requests_in_flight): slow
		// clients show here before they show as 429s.
		s.Metrics.Registry().MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mcp_forge_http_requests_in_flight",
			Help: "HTTP requests of a tenant being served, bounded by quotas.max_requests_in_flight.", ConstLabels: prometheus.Labels{"tenant": name}},
			func() float64 { return float64(reg.Requests(name)) }))
	}

	attr := tenant.NewAttribution()
	core.AddAuditHook(attr.Hook)
	core.AddAuditHook(func(e *audit.Entry) { s.Metrics.Audit(*e) })
	core.UseTenants(reg, s.Metrics)
	return s, nil
}

// identify names the tenant of an HTTP request, as the MCP server names
// the tenant of each of its requests (tenant.Registry.Identify).
func (s *Server) identify(r *http.Request) (string, error) {
	return s.Tenants.Identify(&mcp.CallToolRequest{Extra: &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context())}})
}

// Handler is the MCP endpoint with every protection in front of it.
func (s *Server) Handler() (http.Handler, error) {
	maxBody := int64(s.cfg.Server.MaxRequestBody)
	var h http.Handler = mcp.NewStreamableHTTPHandler(s.core.MCPServer, &mcp.StreamableHTTPOptions{
		// Stateless: the newest protocol version is sessionless and older
		// clients work too; our sessions are keyed by tenant, not by the
		// MCP session id (which stateless mode ignores).
		Stateless:                    true,
		MaxRequestBodyBytes:          maxBody,
		PropagateRequestCancellation: true,
		Logger:                       slog.New(slog.NewTextHandler(s.log.Named("mcp").StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true}), nil)),
		// DNS-rebinding protection stays on (DisableLocalhostProtection false).
	})
	h = s.core.Tasks(h, s.identify, maxBody)
	mcpHandler := h
	// A traceparent header continues the caller's trace (as _meta does).
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mcpHandler.ServeHTTP(w, telemetry.FromHTTP(r)) })
	h = s.limitRequests(h)
	if s.Tenants.Authenticated() {
		h = withChallenge(auth.RequireBearerToken(s.Tenants.Verify, s.bearerOptions())(h))
	}
	cop := http.NewCrossOriginProtection()
	for _, o := range s.cfg.Server.AllowedOrigins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("server.allowed_origins: %w", err)
		}
	}
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Forbidden: cross-origin request from "+r.Header.Get("Origin")+" (allowed origins are server.allowed_origins)", http.StatusForbidden)
	}))
	h = cop.Handler(h)
	return s.count(h), nil
}

const wellKnown = "/.well-known/oauth-protected-resource"

func resourcePath(resource string) string {
	u, err := url.Parse(resource)
	if err != nil || u.Path == "/" {
		return ""
	}
	return u.Path
}

// bearerOptions: the scopes a token must carry, the clock skew accepted,
// and the metadata URL announced in 401s when there is one.
func (s *Server) bearerOptions() *auth.RequireBearerTokenOptions {
	j := s.cfg.Auth.JWT
	o := &auth.RequireBearerTokenOptions{Scopes: j.RequiredScopes, ClockSkew: time.Duration(j.Leeway) * time.Second}
	if j.ResourceURL != "" {
		u, _ := url.Parse(j.ResourceURL)
		o.ResourceMetadataURL = u.Scheme + "://" + u.Host + wellKnown + resourcePath(j.ResourceURL)
	}
	return o
}

// limitRequests bounds each tenant's open requests (after authentication,
// so the tenant is known and anonymous floods never get this far): a slow
// or flooding client gets 429 instead of holding memory and goroutines.
func (s *Server) limitRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := tenant.Local
		if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
			name = ti.UserID
		}
		noteTenant(r, name)
		release, err := s.Tenants.EnterRequest(name)
		if err != nil {
			if re, quota := tenant.QuotaOf(err); re != nil {
				s.core.Record(audit.Entry{Event: tenant.QuotaRefused, Severity: audit.Warning, UserID: name, Error: re.Msg,
					Details: map[string]any{"rule": re.Rule, "quota": quota}})
				s.Metrics.QuotaRefused(name, quota)
				w.Header().Set("Retry-After", "1")
				http.Error(w, err.Error(), http.StatusTooManyRequests)
				return
			}
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		defer release()
		h.ServeHTTP(w, r)
	})
}

// Mux is every route of the main listener (and of the admin routes when
// server.admin_addr is empty).
func (s *Server) Mux() (*http.ServeMux, *http.ServeMux, error) {
	h, err := s.Handler()
	if err != nil {
		return nil, nil, err
	}
	main := http.NewServeMux()
	main.Handle(Path, h)
	admin := main
	if s.cfg.Server.AdminAddr != "" {
		admin = http.NewServeMux()
	}
	admin.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "ok")
	})
	admin.HandleFunc("/readyz", s.ready)
	var m http.Handler = s.Metrics.Handler()
	if admin == main && s.Tenants.Authenticated() {
		// On the public listener, metrics (tenant names, counts) need a key.
		m = withChallenge(auth.RequireBearerToken(s.Tenants.Verify, s.bearerOptions())(m))
	}
	admin.Handle("/metrics", m)
	if j := s.cfg.Auth.JWT; j.ResourceURL != "" {
		// RFC 9728: where a client learns which authorization server
		// issues tokens for this resource.
		meta := auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
			Resource: j.ResourceURL, AuthorizationServers: j.AuthorizationServers, ScopesSupported: j.RequiredScopes,
			BearerMethodsSupported: []string{"header"}, ResourceName: "MCP-Forge"})
		main.Handle(wellKnown, meta)
		main.Handle(wellKnown+resourcePath(j.ResourceURL), meta)
	}
	return main, admin, nil
}

// Serve listens until ctx ends, then shuts down gracefully: no new
// requests, running calls get server.shutdown_timeout seconds to finish.
// ready, if not nil, receives the bound addresses once listening.
func (s *Server) Serve(ctx context.Context, ready func(mainAddr, adminAddr string)) error {
	mainMux, adminMux, err := s.Mux()
	if err != nil {
		return err
	}
	// Every route's body has a deadline, not only /mcp's: a handler that
	// ignores the body (/healthz, a 401) still has net/http drain it.
	bodyTime := time.Duration(s.cfg.Server.RequestBodyTimeout) * time.Second
	if bodyTime <= 0 {
		return fmt.Errorf("server.request_body_timeout must be a positive number of seconds, got %d", s.cfg.Server.RequestBodyTimeout)
	}
	bounded := func(h http.Handler) http.Handler { return limitBodyTime(h, bodyTime, s.core, s.log.Named("http")) }
	var tlsCfg *tls.Config
	if s.cfg.Server.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.Server.TLSCert, s.cfg.Server.TLSKey)
		if err != nil {
			return fmt.Errorf("server.tls_cert/tls_key: %w", err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.addr, err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	s.main = &http.Server{Handler: bounded(mainMux), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: hclogStd(s.log), BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	servers := []*http.Server{s.main}
	listeners := []net.Listener{ln}
	adminAddr := ln.Addr().String()
	if s.cfg.Server.AdminAddr != "" {
		aln, err := net.Listen("tcp", s.cfg.Server.AdminAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("listen on server.admin_addr %s: %w", s.cfg.Server.AdminAddr, err)
		}
		s.admin = &http.Server{Handler: bounded(adminMux), ReadHeaderTimeout: 10 * time.Second, ErrorLog: hclogStd(s.log)}
		servers, listeners = append(servers, s.admin), append(listeners, aln)
		adminAddr = aln.Addr().String()
	}
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	s.log.Info("serving MCP over streamable HTTP", "url", scheme+"://"+ln.Addr().String()+Path, "admin", adminAddr,
		"authenticated", s.Tenants.Authenticated(), "tenants", strings.Join(s.Tenants.Names(), ","))
	if ready != nil {
		ready(ln.Addr().String(), adminAddr)
	}
	errc := make(chan error, len(servers))
	for i := range servers {
		go func(srv *http.Server, l net.Listener) {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}(servers[i], listeners[i])
	}
	select {
	case err := <-errc:
		for _, srv := range servers {
			srv.Close()
		}
		return err
	case <-ctx.Done():
	}
	grace := time.Duration(s.cfg.Server.ShutdownTimeout) * time.Second
	s.log.Info("shutting down: no new requests; running calls may finish", "deadline", grace)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var wg sync.WaitGroup
	var cut bool
	var mu sync.Mutex
	for _, srv := range servers {
		wg.Add(1)
		go func(srv *http.Server) {
			defer wg.Done()
			if err := srv.Shutdown(sctx); err != nil {
				mu.Lock()
				cut = true
				mu.Unlock()
				srv.Close()
			}
		}(srv)
	}
	wg.Wait()
	if cut {
		s.log.Warn("shutdown deadline passed: calls still running were cut", "deadline", grace)
	}
	return nil
}

// ready answers 200 when the server can run code now (every check of the
// core passes: Podman answers, a backend plugin is loaded, its images
// exist); 503 with what is missing otherwise.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	checks := s.readiness.get(r.Context(), s.core.Ready)
	all := len(checks) > 0
	for _, c := range checks {
		all = all && c.OK
	}
	w.Header().Set("Content-Type", "application/json")
	if !all {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"ready": all, "checks": checks})
}
