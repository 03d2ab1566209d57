package config

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// FieldError is one problem with one configuration field.
type FieldError struct {
	Path string // dotted toml path, e.g. "execution.max_timeout"
	Msg  string
}

func (e FieldError) Error() string { return e.Path + ": " + e.Msg }

// Errors is every problem found in one load; it is returned whole so that a
// user fixes a file in one pass.
type Errors []FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// MaxCPUQuota is ten cores worth of CPU time per 100 ms period.
const MaxCPUQuota = 1_000_000

// Validate checks every field and cross-field rule and returns all problems.
func Validate(c Config) Errors {
	var v validator

	v.oneOf("server.transport", c.Server.Transport, "stdio", "http")
	v.nonEmpty("server.host", c.Server.Host)
	v.port("server.port", c.Server.Port)
	v.oneOf("server.log_level", c.Server.LogLevel, "trace", "debug", "info", "warn", "error")
	v.oneOf("server.log_format", c.Server.LogFormat, "text", "json")
	v.absOrEmpty("server.tls_cert", c.Server.TLSCert)
	v.absOrEmpty("server.tls_key", c.Server.TLSKey)
	if (c.Server.TLSCert == "") != (c.Server.TLSKey == "") {
		v.add("server.tls_cert", "tls_cert and tls_key go together: set both (PEM files) or neither")
	}
	v.sizeAtLeast("server.max_request_body", c.Server.MaxRequestBody, "execution.max_code_size", c.Execution.MaxCodeSize)
	if n, ok := v.size("server.max_message", c.Server.MaxMessage); ok {
		// An answer carries stdout and stderr (each up to max_output once
		// JSON-escaped) and the images beside them.
		if o, ok := v.size("execution.max_output", c.Execution.MaxOutput); ok && n < 4*o {
			v.add("server.max_message", fmt.Sprintf("must be at least 4 × execution.max_output (%s), got %s: an answer holds stdout and stderr and its images; raise it or lower max_output", c.Execution.MaxOutput, c.Server.MaxMessage))
		}
		if n < 1<<20 {
			v.add("server.max_message", fmt.Sprintf("must be at least 1m, got %s", c.Server.MaxMessage))
		}
	}
	for i, o := range c.Server.AllowedOrigins {
		if u, ok := httpURL(o); !ok || (u.Path != "" && u.Path != "/") {
			v.add(fmt.Sprintf("server.allowed_origins[%d]", i), fmt.Sprintf("%q is not an origin (scheme://host[:port], e.g. https://agents.example.com)", o))
		}
	}
	if a := c.Server.AdminAddr; a != "" {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			v.add("server.admin_addr", fmt.Sprintf("%q is not host:port (e.g. 127.0.0.1:9090)", a))
		}
	}
	v.positive("server.shutdown_timeout", c.Server.ShutdownTimeout)
	v.positive("server.request_body_timeout", c.Server.RequestBodyTimeout)
	v.absOrEmpty("server.podman_socket", c.Server.PodmanSocket)
	v.absOrEmpty("server.log_file", c.Server.LogFile)
	v.absOrEmpty("server.plugin_dir", c.Server.PluginDir)

	validateRuntime(&v, c.Runtime)
	validateNetwork(&v, c)

	e := c.Execution
	v.backends("execution.default_backend", e.DefaultBackend)
	v.positive("execution.default_timeout", e.DefaultTimeout)
	v.positive("execution.max_timeout", e.MaxTimeout)
	v.atLeast("execution.max_timeout", e.MaxTimeout, "execution.default_timeout", e.DefaultTimeout)
	v.sizeAtLeast("execution.max_memory", e.MaxMemory, "execution.default_memory", e.DefaultMemory)
	v.cpu("execution.default_cpu_quota", e.DefaultCPUQuota)
	v.cpu("execution.max_cpu_quota", e.MaxCPUQuota)
	v.atLeast("execution.max_cpu_quota", e.MaxCPUQuota, "execution.default_cpu_quota", e.DefaultCPUQuota)
	v.positive("execution.default_pids", e.DefaultPids)
	v.positive("execution.max_pids", e.MaxPids)
	v.atLeast("execution.max_pids", e.MaxPids, "execution.default_pids", e.DefaultPids)
	v.positive("execution.nofile", e.NoFile)
	v.positive("execution.max_concurrent_runs", e.MaxConcurrentRuns)
	v.size("execution.max_code_size", e.MaxCodeSize)
	v.size("execution.max_output", e.MaxOutput)
	v.size("execution.max_image_size", e.MaxImageSize)
	if n, ok := v.size("execution.max_env_value", e.MaxEnvValue); ok && n > MaxEnvValue {
		v.add("execution.max_env_value", fmt.Sprintf("must be at most %s: the kernel refuses a longer environment variable (got %s)", FormatSize(MaxEnvValue), e.MaxEnvValue))
	}
	if n, ok := v.size("execution.max_env_total", e.MaxEnvTotal); ok && n > MaxEnvTotal {
		v.add("execution.max_env_total", fmt.Sprintf("must be at most %s: environment and arguments share the kernel's exec limit (got %s)", FormatSize(MaxEnvTotal), e.MaxEnvTotal))
	}
	v.sizeAtLeast("execution.max_env_total", e.MaxEnvTotal, "execution.max_env_value", e.MaxEnvValue)
	if n := e.ProgressInterval; n < 1 || n > MaxProgressInterval {
		// A keep-alive rarer than a client's usual request timeout (the
		// TypeScript SDK's is 60 s) would not keep that client waiting.
		v.add("execution.progress_interval", fmt.Sprintf("must be 1-%d seconds, below the usual 60 s client request timeout that progress resets (got %d)", MaxProgressInterval, n))
	}
	v.positive("execution.max_background_timeout", e.MaxBackgroundTimeout)
	v.atLeast("execution.max_background_timeout", e.MaxBackgroundTimeout, "execution.max_timeout", e.MaxTimeout)
	v.positive("jobs.default_timeout", c.Jobs.DefaultTimeout)
	v.atLeast("execution.max_background_timeout", e.MaxBackgroundTimeout, "jobs.default_timeout", c.Jobs.DefaultTimeout)
	v.positive("jobs.result_ttl", c.Jobs.ResultTTL)
	if n := c.Jobs.MaxPerClient; n < 1 || n > MaxJobsPerClient {
		v.add("jobs.max_per_client", fmt.Sprintf("must be 1-%d: every job's record is kept in the server's memory (got %d)", MaxJobsPerClient, n))
	}

	if len(c.Images.Allowed) == 0 {
		v.add("images.allowed", "must list at least one image pattern")
	}

	v.positive("sessions.idle_timeout", c.Sessions.IdleTimeout)
	if n := c.Sessions.SuspendAfter; n < 0 {
		v.add("sessions.suspend_after", fmt.Sprintf("must be 0 (never) or seconds > 0, got %d", n))
	}
	v.positive("sessions.max_concurrent", c.Sessions.MaxConcurrent)
	v.positive("sessions.cleanup_interval", c.Sessions.CleanupInterval)
	v.positive("sessions.checkpoint_ttl", c.Sessions.CheckpointTTL)
	v.backends("sessions.default_backend", c.Sessions.DefaultBackend)
	if n := c.Sessions.HistoryCells; n < 0 || n > MaxHistoryCells {
		v.add("sessions.history_cells", fmt.Sprintf("must be between 0 (no history) and %d, got %d", MaxHistoryCells, n))
	}
	if n, ok := v.size("sessions.history_bytes", c.Sessions.HistoryBytes); ok && (n < MinHistoryBytes || n > MaxHistoryBytes) {
		v.add("sessions.history_bytes", fmt.Sprintf("must be between %s and %s: a session's history is exported as one notebook in one MCP message (got %s)",
			FormatSize(MinHistoryBytes), FormatSize(MaxHistoryBytes), c.Sessions.HistoryBytes))
	}

	v.abs("volumes.base_path", c.Volumes.BasePath)
	for _, name := range sortedKeys(c.Volumes.HostRoots) {
		p, r := "volumes.host_roots."+name, c.Volumes.HostRoots[name]
		v.name(p, name)
		v.abs(p+".path", r.Path)
		if r.Claim != "" && !objectName.MatchString(r.Claim) {
			v.add(p+".claim", fmt.Sprintf("%q is not a PersistentVolumeClaim name (lower-case letters, digits, '-' and '.', at most 253)", r.Claim))
		}
		if overlaps(r.Path, c.Volumes.BasePath) {
			v.add(p+".path", fmt.Sprintf("%s overlaps volumes.base_path %s, which holds every session's files: name a directory outside it", r.Path, c.Volumes.BasePath))
		}
		for i, t := range r.Tenants {
			if _, ok := c.Tenants[t]; !ok {
				v.add(fmt.Sprintf("%s.tenants[%d]", p, i), fmt.Sprintf("no tenant %q is configured ([tenants.%s])", t, t))
			}
		}
	}
	// The store must hold at least one session's checkpoint.
	v.absOrEmpty("sessions.checkpoint_dir", c.Sessions.CheckpointDir)
	v.sizeAtLeast("sessions.checkpoint_store_quota", c.Sessions.CheckpointStoreQuota, "volumes.session_quota", c.Volumes.SessionQuota)
	v.sizeAtLeast("volumes.max_session_quota", c.Volumes.MaxSessionQuota, "volumes.session_quota", c.Volumes.SessionQuota)
	v.sizeAtLeast("volumes.max_file_size", c.Volumes.MaxFileSize, "volumes.inline_file_size", c.Volumes.InlineFileSize)
	if c.Volumes.MaxFileSize > MaxFileSizeLimit {
		v.add("volumes.max_file_size", fmt.Sprintf("must be at most %s: a file travels base64-encoded in one MCP message, and stdio messages are limited to 16 MiB", FormatSize(MaxFileSizeLimit)))
	}
	if c.Volumes.URLCacheSize != 0 { // 0: no cache
		// A bound below one file would keep nothing.
		v.sizeAtLeast("volumes.url_cache_size", c.Volumes.URLCacheSize, "volumes.max_file_size", c.Volumes.MaxFileSize)
	}

	s := c.Security
	v.abs("security.audit_log", s.AuditLog)
	v.size("security.audit_max_size", s.AuditMaxSize)
	if s.AuditKeep < 0 {
		v.add("security.audit_keep", "must be >= 0")
	}
	v.user("security.sandbox_user", s.SandboxUser)
	v.nonEmpty("security.oci_runtime", s.OCIRuntime)
	v.oneOf("security.userns", s.UserNS, "private", "auto", "host")
	if s.UserNS == "private" && (s.UserNSStart < 100_000 || int64(s.UserNSStart)+65536 > 1<<32-1) {
		v.add("security.userns_start", fmt.Sprintf("must be between 100000 and %d so that sandbox users are never host accounts (got %d)", int64(1<<32-1)-65536, s.UserNSStart))
	}
	v.size("security.tmpfs_size", s.TmpfsSize)
	v.oneOf("security.isolation", s.Isolation, "container", "gvisor")
	v.abs("security.runsc", s.Runsc)

	b := c.EnvironmentBuilder
	v.positive("environment_builder.max_packages_per_build", b.MaxPackagesPerBuild)
	v.name("environment_builder.builder", b.Builder)
	v.oneOf("environment_builder.security_scan", b.SecurityScan, "auto", "required", "off")
	for i, sev := range b.ScanFailOn {
		if !slices.Contains([]string{"UNKNOWN", "LOW", "MEDIUM", "HIGH", "CRITICAL"}, sev) {
			v.add(fmt.Sprintf("environment_builder.scan_fail_on[%d]", i), fmt.Sprintf("%q is not a trivy severity (UNKNOWN, LOW, MEDIUM, HIGH or CRITICAL)", sev))
		}
	}
	for i, d := range b.FindLinks {
		v.absOrEmpty(fmt.Sprintf("environment_builder.find_links[%d]", i), d)
	}
	v.positive("environment_builder.max_build_time", b.MaxBuildTime)
	v.size("environment_builder.max_image_size", b.MaxImageSize)
	v.absOrEmpty("environment_builder.uv_cache_path", b.UVCachePath)
	if b.Storage.MaxAgeDays < 0 {
		v.add("environment_builder.storage.max_age_days", fmt.Sprintf("must be >= 0 (0: no age bound), got %d", b.Storage.MaxAgeDays))
	}
	if b.Storage.MaxSize != 0 { // 0: no bound
		// A bound below one image would prune the layer a build just made.
		v.sizeAtLeast("environment_builder.storage.max_size", b.Storage.MaxSize, "environment_builder.max_image_size", b.MaxImageSize)
	}
	v.positive("environment_builder.max_concurrent_builds", b.MaxConcurrentBuilds)
	v.positive("environment_builder.build_rate_limit.max_builds_per_hour", b.BuildRateLimit.MaxBuildsPerHour)
	v.positive("environment_builder.build_rate_limit.max_builds_per_day", b.BuildRateLimit.MaxBuildsPerDay)
	v.atLeast("environment_builder.build_rate_limit.max_builds_per_day", b.BuildRateLimit.MaxBuildsPerDay,
		"environment_builder.build_rate_limit.max_builds_per_hour", b.BuildRateLimit.MaxBuildsPerHour)
	v.absOrEmpty("environment_builder.package_validation.allowlist_path", b.PackageValidation.AllowlistPath)
	v.absOrEmpty("environment_builder.package_validation.blocklist_path", b.PackageValidation.BlocklistPath)
	for i, p := range b.PackageValidation.RequireApprovalPatterns {
		if _, err := path.Match(p, "x"); err != nil || p == "" {
			v.add(fmt.Sprintf("environment_builder.package_validation.require_approval_patterns[%d]", i), fmt.Sprintf("%q is not a valid glob pattern", p))
		}
	}
	for i, p := range b.PackageValidation.ApprovedPackages {
		if !approvedRe.MatchString(p) {
			v.add(fmt.Sprintf("environment_builder.package_validation.approved_packages[%d]", i),
				fmt.Sprintf("%q is not a package name (optionally prefixed python: or r:; no wildcards, no versions)", p))
		}
	}
	for _, name := range sortedKeys(b.Templates) {
		if len(b.Templates[name].Packages) == 0 {
			v.add("environment_builder.templates."+name+".packages", "must list at least one package")
		}
	}

	for _, name := range sortedKeys(c.MCPTools) {
		t, p := c.MCPTools[name], "mcp_tools."+name
		v.name(p, name)
		switch {
		case t.Command == "" && t.URL == "":
			v.add(p+".command", "must not be empty: set command (a stdio server) or url (a streamable HTTP server)")
		case t.Command != "" && t.URL != "":
			v.add(p+".url", "command and url exclude each other: a server is started (command) or reached (url)")
		case t.URL != "":
			if _, ok := httpURL(t.URL); !ok {
				v.add(p+".url", fmt.Sprintf("%q is not an http(s) URL", t.URL))
			}
		}
		if t.Default != "" {
			v.oneOf(p+".default", t.Default, "allow", "deny", "approve")
		}
		for _, list := range []struct {
			key   string
			globs []string
		}{{"allow", t.Allow}, {"deny", t.Deny}, {"approve", t.Approve}} {
			for i, g := range list.globs {
				if _, err := path.Match(g, ""); err != nil || g == "" {
					v.add(fmt.Sprintf("%s.%s[%d]", p, list.key, i), fmt.Sprintf("%q is not a glob over tool names (e.g. \"read_*\")", g))
				}
			}
		}
		if t.CallTimeout < 0 {
			v.add(p+".call_timeout", "must be 0 (bridge.call_timeout) or a positive number of seconds")
		}
		if t.MaxCallsPerRun < 0 {
			v.add(p+".max_calls_per_run", "must be 0 (only bridge.max_calls_per_run) or a positive number of calls")
		}
	}
	v.positive("bridge.call_timeout", c.Bridge.CallTimeout)
	v.positive("bridge.max_calls_per_run", c.Bridge.MaxCallsPerRun)
	v.positive("bridge.max_concurrent_calls", c.Bridge.MaxConcurrentCalls)
	if c.Bridge.Plugin != "" {
		v.name("bridge.plugin", c.Bridge.Plugin)
	}
	for _, name := range sortedKeys(c.Plugins) {
		p := c.Plugins[name]
		v.name("plugins."+name, name)
		if p.SHA256 != "" && !sha256Hex.MatchString(p.SHA256) {
			v.add("plugins."+name+".sha256", "must be 64 hexadecimal digits (the output of sha256sum)")
		}
		for i, lang := range p.Languages {
			v.language(fmt.Sprintf("plugins.%s.languages[%d]", name, i), lang)
		}
	}
	q := c.Quotas
	v.positive("quotas.max_concurrent_runs", q.MaxConcurrentRuns)
	v.positive("quotas.max_sessions", q.MaxSessions)
	v.positive("quotas.executions_per_minute", q.ExecutionsPerMinute)
	v.positive("quotas.execution_burst", q.ExecutionBurst)
	v.positive("quotas.max_requests_in_flight", q.MaxRequestsInFlight)
	v.atLeast("quotas.max_requests_in_flight", q.MaxRequestsInFlight, "quotas.max_concurrent_runs", q.MaxConcurrentRuns)
	j := c.Auth.JWT
	if e := c.Telemetry.OTLPEndpoint; e != "" {
		if _, ok := httpURL(e); !ok {
			v.add("telemetry.otlp_endpoint", fmt.Sprintf("%q is not an http(s) URL (an OTLP/HTTP collector, e.g. http://localhost:4318)", e))
		}
		v.nonEmpty("telemetry.service_name", c.Telemetry.ServiceName)
	}
	jwt := j.Enabled()
	if jwt {
		var sources []string
		if j.JWKSFile != "" {
			v.abs("auth.jwt.jwks_file", j.JWKSFile)
			sources = append(sources, "jwks_file")
		}
		if j.JWKSURI != "" {
			v.fetchURL("auth.jwt.jwks_uri", j.JWKSURI)
			sources = append(sources, "jwks_uri")
		}
		if j.Discovery {
			v.fetchURL("auth.jwt.issuer", j.Issuer)
			sources = append(sources, "discovery")
		}
		if len(sources) > 1 {
			v.add("auth.jwt."+sources[1], fmt.Sprintf("set one key source, not %s: jwks_file (a file, reread when it changes), jwks_uri (the issuer's JWKS URL) or discovery = true (jwks_uri from the issuer's OpenID configuration)", strings.Join(sources, " and ")))
		}
		v.nonEmpty("auth.jwt.issuer", j.Issuer)
		v.nonEmpty("auth.jwt.audience", j.Audience)
		if len(c.Tenants) == 0 {
			v.add("auth.jwt", "JWTs name tenants by a claim: configure at least one [tenants.NAME]")
		}
	}
	if j.JWKSMinRefresh < 1 || j.JWKSMinRefresh > 3600 {
		v.add("auth.jwt.jwks_min_refresh", fmt.Sprintf("must be 1-3600 seconds (got %d)", j.JWKSMinRefresh))
	}
	v.nonEmpty("auth.jwt.tenant_claim", j.TenantClaim)
	if j.Leeway < 0 || j.Leeway > 300 {
		v.add("auth.jwt.leeway", fmt.Sprintf("must be 0-300 seconds (got %d)", j.Leeway))
	}
	if j.ResourceURL != "" {
		if _, ok := httpURL(j.ResourceURL); !ok {
			v.add("auth.jwt.resource_url", fmt.Sprintf("%q is not an http(s) URL (the public URL of /mcp)", j.ResourceURL))
		}
		if !jwt {
			v.add("auth.jwt.resource_url", "needs a key source (auth.jwt.jwks_file, jwks_uri or discovery): metadata announces how to get a token this server verifies")
		}
	}
	for i, a := range j.AuthorizationServers {
		if u, err := url.Parse(a); err != nil || u.Scheme != "https" || u.Host == "" {
			v.add(fmt.Sprintf("auth.jwt.authorization_servers[%d]", i), fmt.Sprintf("%q is not an https URL (an issuer identifier)", a))
		}
	}
	keyOwner := map[string]string{}
	for _, name := range sortedKeys(c.Tenants) {
		t, p := c.Tenants[name], "tenants."+name
		v.name(p, name)
		if name == "local" || strings.HasPrefix(name, "conn-") {
			// The owners of a stdio client and of an HTTP connection
			// without a tenant: a tenant so named would be them.
			v.add(p, fmt.Sprintf("%q is reserved (\"local\" owns a stdio client's sessions and roots, \"conn-N\" a connection's): name the tenant otherwise", name))
		}
		if len(t.APIKeySHA256) == 0 && !jwt {
			v.add(p+".api_key_sha256", "must list at least one key hash (make one with `mcp-forge tenant new-key`)")
		}
		for i, h := range t.APIKeySHA256 {
			hp := fmt.Sprintf("%s.api_key_sha256[%d]", p, i)
			if !sha256Hex.MatchString(h) {
				v.add(hp, "must be the sha256 of the key as 64 hexadecimal digits (`mcp-forge tenant hash-key`), never the key itself")
				continue
			}
			if other, dup := keyOwner[strings.ToLower(h)]; dup {
				v.add(hp, fmt.Sprintf("the same key hash is also a key of tenant %q: one key names one tenant", other))
			}
			keyOwner[strings.ToLower(h)] = name
		}
		for _, f := range []struct {
			k string
			n int
		}{{"max_concurrent_runs", t.MaxConcurrentRuns}, {"max_sessions", t.MaxSessions}, {"executions_per_minute", t.ExecutionsPerMinute}, {"execution_burst", t.ExecutionBurst}} {
			if f.n < 0 {
				v.add(p+"."+f.k, fmt.Sprintf("must be >= 0 (0: the [quotas] value), got %d", f.n))
			}
		}
		switch {
		case t.Isolation == "":
		case t.Isolation != "container" && t.Isolation != "gvisor":
			v.add(p+".isolation", fmt.Sprintf("must be one of gvisor, container or empty (security.isolation), got %q", t.Isolation))
		case t.Isolation == "container" && c.Security.Isolation == "gvisor":
			v.add(p+".isolation", "cannot lower security.isolation = \"gvisor\" for one tenant: a tenant's isolation only raises the server's (leave it empty)")
		}
		switch q := int64(t.CheckpointQuotaMB) << 20; {
		case q < 0:
			v.add(p+".checkpoint_quota_mb", fmt.Sprintf("must be >= 0 (0: no share of its own, the store's bound), got %d", t.CheckpointQuotaMB))
		case q > int64(c.Sessions.CheckpointStoreQuota):
			v.add(p+".checkpoint_quota_mb", fmt.Sprintf("%d MiB is more than the whole store (sessions.checkpoint_store_quota = %s): set at most that, or 0 for no share of its own", t.CheckpointQuotaMB, c.Sessions.CheckpointStoreQuota))
		}
	}
	return v.errs
}

var (
	sha256Hex = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
	nameRe    = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	// approvedRe is a PEP 508 name (R names are a subset), optionally
	// prefixed with its language; core/packages parses it fully.
	approvedRe = regexp.MustCompile(`^((python|r):)?[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$`)
	langRe     = regexp.MustCompile(`^[a-z][a-z0-9_]{0,40}$`)
)

// Limits the kernel sets on a process's environment (MAX_ARG_STRLEN, and a
// safe share of ARG_MAX).
const (
	MaxEnvValue = 128 << 10
	MaxEnvTotal = 1 << 20
)

// MaxProgressInterval is the longest execution.progress_interval (seconds):
// half the TypeScript SDK's default 60 s request timeout, so that one lost
// or late keep-alive does not let such a client give up.
const MaxProgressInterval = 30

// ValidLanguage reports whether s can be a language id: lower-case letters,
// digits and '_', starting with a letter, so that execute_<id> is a tool name.
func ValidLanguage(s string) bool { return langRe.MatchString(s) }

type validator struct{ errs Errors }

func (v *validator) add(p, msg string) { v.errs = append(v.errs, FieldError{Path: p, Msg: msg}) }

func (v *validator) positive(p string, n int) {
	if n <= 0 {
		v.add(p, fmt.Sprintf("must be > 0 (got %d)", n))
	}
}

func (v *validator) atLeast(p string, n int, otherPath string, other int) {
	if n > 0 && other > 0 && n < other {
		v.add(p, fmt.Sprintf("must be >= %s (%d), got %d", otherPath, other, n))
	}
}

func (v *validator) port(p string, n int) {
	if n < 1 || n > 65535 {
		v.add(p, fmt.Sprintf("must be 1-65535 (got %d)", n))
	}
}

func (v *validator) cpu(p string, n int) {
	if n < 1 || n > MaxCPUQuota {
		v.add(p, fmt.Sprintf("must be 1..%d microseconds per 100ms period (100000 = one core), got %d", MaxCPUQuota, n))
	}
}

func (v *validator) nonEmpty(p, s string) {
	if strings.TrimSpace(s) == "" {
		v.add(p, "must not be empty")
	}
}

func (v *validator) name(p, s string) {
	if !nameRe.MatchString(s) {
		v.add(p, "name must be lower-case letters, digits, '-' or '_', starting with a letter")
	}
}

func (v *validator) language(p, s string) {
	if !ValidLanguage(s) {
		v.add(p, fmt.Sprintf("%q is not a language id: use lower-case letters, digits and '_', starting with a letter (as in execute_<language>)", s))
	}
}

// backends checks a language → plugin table.
func (v *validator) backends(p string, m map[string]string) {
	for _, lang := range sortedKeys(m) {
		v.language(p+"."+lang, lang)
		v.name(p+"."+lang, m[lang])
	}
}

func (v *validator) oneOf(p, s string, allowed ...string) {
	for _, a := range allowed {
		if s == a {
			return
		}
	}
	v.add(p, fmt.Sprintf("must be one of %s (got %q)", strings.Join(allowed, ", "), s))
}

func (v *validator) fetchURL(p, s string) {
	if err := CheckFetchURL(p, s); err != nil {
		v.errs = append(v.errs, *err)
	}
}

// CheckFetchURL checks a URL the server fetches keys from: https, or http
// to this machine only (keys over plain http elsewhere could be anyone's).
func CheckFetchURL(p, s string) *FieldError {
	u, ok := httpURL(s)
	switch {
	case !ok:
		return &FieldError{Path: p, Msg: fmt.Sprintf("%q is not an https URL", s)}
	case u.Scheme == "http" && !IsLoopbackHost(u.Hostname()):
		return &FieldError{Path: p, Msg: fmt.Sprintf("%q: keys are fetched over https only (plain http is allowed to localhost alone: anyone on the path could hand out keys)", s)}
	}
	return nil
}

// httpURL parses s as an absolute http or https URL with a host.
func httpURL(s string) (*url.URL, bool) {
	u, err := url.Parse(s)
	return u, err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// IsLoopbackHost reports whether host (a name, an address, or an IPv6
// address in brackets) stays on this machine.
func IsLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

func (v *validator) abs(p, s string) {
	if !filepath.IsAbs(s) {
		v.add(p, fmt.Sprintf("must be an absolute path (got %q)", s))
	}
}

func (v *validator) absOrEmpty(p, s string) {
	if s != "" {
		v.abs(p, s)
	}
}

func (v *validator) size(p string, s Size) (int64, bool) {
	if err := s.check(); err != nil {
		v.add(p, err.Error())
		return 0, false
	}
	return int64(s), true
}

func (v *validator) sizeAtLeast(p string, s Size, otherPath string, other Size) {
	n, ok1 := v.size(p, s)
	o, ok2 := v.size(otherPath, other)
	if ok1 && ok2 && n < o {
		v.add(p, fmt.Sprintf("must be >= %s (%s), got %s", otherPath, other, s))
	}
}

func (v *validator) user(p, s string) {
	uid, gid, ok := strings.Cut(s, ":")
	u, err1 := strconv.Atoi(uid)
	g, err2 := strconv.Atoi(gid)
	if !ok || err1 != nil || err2 != nil || u < 0 || g < 0 {
		v.add(p, fmt.Sprintf("must be numeric \"uid:gid\" (got %q)", s))
		return
	}
	if u == 0 || g == 0 {
		v.add(p, "must not be root (uid or gid 0): sandboxes always run as a non-root user")
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// MaxFileSizeLimit is the largest volumes.max_file_size: 4/3 of it (base64)
// plus the message around it stays under the go-sdk's 16 MiB stdio frame.
const MaxFileSizeLimit = 12 << 20

// dnsLabel is a Kubernetes namespace or node name segment (RFC 1123).
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// objectName is a Kubernetes object name (a DNS subdomain): a node, a pod.
var objectName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// cpuQuantity is a Kubernetes CPU quantity: cores ("0.5", "2") or millicores ("50m").
var cpuQuantity = regexp.MustCompile(`^([0-9]+(\.[0-9]{1,3})?|[0-9]+m)$`)

func validateRuntime(v *validator, r Runtime) {
	v.oneOf("runtime.kind", r.Kind, "podman", "kubernetes")
	k := r.Kubernetes
	const p = "runtime.kubernetes."
	v.absOrEmpty(p+"kubeconfig", k.Kubeconfig)
	if !dnsLabel.MatchString(k.Namespace) {
		v.add(p+"namespace", fmt.Sprintf("%q is not a namespace name (lower-case letters, digits and '-', at most 63)", k.Namespace))
	}
	v.oneOf(p+"pull_policy", k.PullPolicy, "Always", "IfNotPresent", "Never")
	if k.AgentImage == "" || strings.ContainsAny(k.AgentImage, " \t\n") {
		v.add(p+"agent_image", fmt.Sprintf("%q is not an image reference (mcp-forge-agent's image: every sandbox pod copies the agent from it)", k.AgentImage))
	}
	if k.ImageRegistry != "" && (strings.Contains(k.ImageRegistry, "://") || strings.HasSuffix(k.ImageRegistry, "/") || strings.ContainsAny(k.ImageRegistry, " @")) {
		v.add(p+"image_registry", fmt.Sprintf("%q is not a registry prefix (host[:port][/path], no scheme, no trailing '/')", k.ImageRegistry))
	}
	if k.CorePod != "" {
		ns, name, ok := strings.Cut(k.CorePod, "/")
		if !ok || !dnsLabel.MatchString(ns) || !objectName.MatchString(name) {
			v.add(p+"core_pod", fmt.Sprintf("%q is not NAMESPACE/NAME of a pod (deploy/ sets it to \"${POD_NAMESPACE}/${POD_NAME}\")", k.CorePod))
		}
	}
	if k.RuntimeClass != "" && !dnsLabel.MatchString(k.RuntimeClass) {
		v.add(p+"runtime_class", fmt.Sprintf("%q is not a RuntimeClass name", k.RuntimeClass))
	}
	if k.NodeName != "" && !objectName.MatchString(k.NodeName) {
		v.add(p+"node_name", fmt.Sprintf("%q is not a node name", k.NodeName))
	}
	for i, t := range k.Tolerations {
		tp := fmt.Sprintf("%stolerations[%d].", p, i)
		v.oneOf(tp+"operator", t.Operator, "Equal", "Exists")
		v.oneOf(tp+"effect", t.Effect, "", "NoSchedule", "PreferNoSchedule", "NoExecute")
		if t.Operator == "Exists" && t.Value != "" {
			v.add(tp+"value", "a toleration with operator Exists takes no value")
		}
	}
	if k.SeccompProfile != "" && (path.IsAbs(k.SeccompProfile) || strings.Contains(k.SeccompProfile, "..")) {
		v.add(p+"seccomp_profile", fmt.Sprintf("%q must be a path relative to the kubelet's seccomp directory (e.g. \"mcp-forge.json\")", k.SeccompProfile))
	}
	if !cpuQuantity.MatchString(k.CPURequest) {
		v.add(p+"cpu_request", fmt.Sprintf("%q is not a CPU quantity (\"50m\", \"0.5\", \"1\")", k.CPURequest))
	}
	v.size(p+"memory_request", k.MemoryRequest)
	v.oneOf(p+"workspace_medium", k.WorkspaceMedium, "", "Memory")
	if k.NodePidsLimit < 0 {
		v.add(p+"node_pids_limit", "must be 0 (unknown) or the kubelet's podPidsLimit")
	}
	v.positive(p+"session_lifetime", k.SessionLifetime)
}

// overlaps reports whether one of two absolute paths is the other or
// beneath it.
func overlaps(a, b string) bool {
	if !filepath.IsAbs(a) || !filepath.IsAbs(b) {
		return false
	}
	beneath := func(dir, p string) bool {
		rel, err := filepath.Rel(dir, p)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
	}
	a, b = filepath.Clean(a), filepath.Clean(b)
	return beneath(a, b) || beneath(b, a)
}
