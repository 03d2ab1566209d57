// Package config is forge.toml's model: the sections every part of the core
// reads, their defaults, the size strings, and validation with field paths.
// Reading a file into it (${VAR} substitution, FORGE_* overrides, the
// tenants file) is core/config/loader's.
package config

import "os"

// Config is the whole effective configuration. Every field has a toml tag; the
// dotted tag path (for example "execution.max_timeout") is the name used in
// errors, in FORGE_* overrides and in forge.toml.example.
type Config struct {
	Server             Server                `toml:"server"`
	Execution          Execution             `toml:"execution"`
	Images             Images                `toml:"images"`
	Sessions           Sessions              `toml:"sessions"`
	Jobs               Jobs                  `toml:"jobs"`
	Volumes            Volumes               `toml:"volumes"`
	Runtime            Runtime               `toml:"runtime"`
	Security           Security              `toml:"security"`
	EnvironmentBuilder EnvironmentBuilder    `toml:"environment_builder"`
	MCPTools           map[string]MCPTool    `toml:"mcp_tools"`
	Bridge             Bridge                `toml:"bridge"`
	Plugins            map[string]PluginSpec `toml:"plugins"`
	// Quotas are every tenant's limits unless its [tenants.NAME] table
	// overrides one.
	Quotas    Quotas            `toml:"quotas"`
	Tenants   map[string]Tenant `toml:"tenants"`
	Auth      Auth              `toml:"auth"`
	Network   Network           `toml:"network"`
	Telemetry Telemetry         `toml:"telemetry"`
}

// Telemetry exports traces: a span per MCP request, with the plugin calls
// and container operations it makes beneath it, continuing the caller's
// trace (traceparent in the request's _meta or HTTP headers). Off while
// OTLPEndpoint is empty.
type Telemetry struct {
	// OTLPEndpoint is an OTLP/HTTP collector's base URL
	// ("http://localhost:4318"); spans go to its /v1/traces.
	OTLPEndpoint string `toml:"otlp_endpoint"`
	ServiceName  string `toml:"service_name"`
}

// Runtime is where sandboxes run: the local Podman, or a Kubernetes
// cluster when a team outgrows one machine (docs/kubernetes.md).
type Runtime struct {
	Kind       string     `toml:"kind"` // "podman" or "kubernetes"
	Kubernetes Kubernetes `toml:"kubernetes"`
}

// Kubernetes places sandboxes as pods of one namespace.
type Kubernetes struct {
	// Kubeconfig is the file with the core's credentials; empty: the
	// in-cluster service account, else $KUBECONFIG, else ~/.kube/config.
	Kubeconfig string `toml:"kubeconfig"`
	Context    string `toml:"context"` // of Kubeconfig; empty: its current context
	Namespace  string `toml:"namespace"`
	// ImageRegistry prefixes image names ("registry.example.org/team"):
	// mcp-forge/python:3.11 runs as registry.example.org/team/mcp-forge/python:3.11.
	ImageRegistry string `toml:"image_registry"`
	PullPolicy    string `toml:"pull_policy"` // Always, IfNotPresent or Never
	// AgentImage holds mcp-forge-agent (images/agent: FROM scratch, the
	// static binary): an init container of every sandbox pod copies it
	// into the pod, so a user's image needs nothing of the core's. A full
	// reference, taken as it is (image_registry does not prefix it).
	AgentImage   string `toml:"agent_image"`
	RuntimeClass string `toml:"runtime_class"` // e.g. "gvisor"; empty: the cluster's default
	// NodeName pins every sandbox to one node (a cluster without a
	// scheduler); empty: the scheduler places them.
	NodeName     string            `toml:"node_name"`
	NodeSelector map[string]string `toml:"node_selector"`
	Tolerations  []Toleration      `toml:"tolerations"`
	// SeccompProfile is MCP-Forge's profile as a Localhost profile: its
	// path under the kubelet's seccomp directory on every node (install it
	// from `mcp-forge seccomp-profile`). Empty: RuntimeDefault, which
	// leaves the seccomp guarantee missing.
	SeccompProfile string `toml:"seccomp_profile"`
	// CPURequest and MemoryRequest are what a sandbox asks the scheduler
	// for; its limits are the run's. Small, so that warm pods fit.
	CPURequest    string `toml:"cpu_request"`
	MemoryRequest Size   `toml:"memory_request"`
	// WorkspaceMedium is the workspace's emptyDir medium: "" (the node's
	// disk, where a full workspace is evicted, not refused with ENOSPC)
	// or "Memory" (a tmpfs of the quota's size, counted in the memory limit).
	WorkspaceMedium string `toml:"workspace_medium"`
	// UserNamespaces runs pods with hostUsers: false (Kubernetes 1.33+ and a
	// runtime that supports it, containerd 2 or CRI-O).
	UserNamespaces bool `toml:"user_namespaces"`
	// NodePidsLimit is the kubelet's podPidsLimit on the nodes (the API
	// does not show it); 0: unknown, and the pids guarantee is missing.
	NodePidsLimit int `toml:"node_pids_limit"`
	// SessionLifetime bounds a session pod (activeDeadlineSeconds), in
	// seconds: what ends it if the core dies without removing it.
	SessionLifetime int `toml:"session_lifetime"`
	// CorePod is "NAMESPACE/NAME" of the core's own pod when the core runs
	// in the cluster (deploy/ fills it from the downward API): its
	// sandboxes are marked with that pod, and the replica holding the
	// reaper's Lease removes the sandboxes of core pods that are gone.
	CorePod string `toml:"core_pod"`
}

// Toleration lets sandboxes run on tainted nodes (a node pool for them).
type Toleration struct {
	Key      string `toml:"key"`
	Operator string `toml:"operator"` // Equal or Exists
	Value    string `toml:"value"`
	Effect   string `toml:"effect"` // NoSchedule, PreferNoSchedule, NoExecute or "" (all)
}

// Auth is token verification beyond API keys.
type Auth struct {
	JWT JWT `toml:"jwt"`
}

// JWT verifies bearer JWTs signed by the issuer's keys; the tenant is a
// claim naming a configured [tenants.NAME]. Off until one key source is
// set: a JWKS file, a JWKS URL, or the issuer's discovery document.
type JWT struct {
	JWKSFile string `toml:"jwks_file"`
	JWKSURI  string `toml:"jwks_uri"`
	// Discovery finds jwks_uri in the issuer's OpenID configuration.
	Discovery bool `toml:"discovery"`
	// JWKSMinRefresh bounds the key set's refetches (seconds between two):
	// a token naming an unknown key makes one, and so may an attacker's.
	JWKSMinRefresh int      `toml:"jwks_min_refresh"`
	Issuer         string   `toml:"issuer"`
	Audience       string   `toml:"audience"`
	TenantClaim    string   `toml:"tenant_claim"`
	RequiredScopes []string `toml:"required_scopes"`
	Leeway         int      `toml:"leeway"` // seconds of clock skew accepted
	// ResourceURL is this server's public MCP URL; when set, the RFC 9728
	// protected-resource metadata is served and announced in 401s.
	ResourceURL          string   `toml:"resource_url"`
	AuthorizationServers []string `toml:"authorization_servers"`
}

// Enabled reports whether bearer JWTs are verified: a key source is set.
func (j JWT) Enabled() bool { return j.JWKSFile != "" || j.JWKSURI != "" || j.Discovery }

// Server is the MCP transport and the connection to Podman.
type Server struct {
	// Transport is "stdio" (one MCP host that started the process) or
	// "http" (streamable HTTP on Host:Port, many tenants).
	Transport    string `toml:"transport"`
	Host         string `toml:"host"`
	Port         int    `toml:"port"`
	PodmanSocket string `toml:"podman_socket"` // empty: discover
	LogLevel     string `toml:"log_level"`
	LogFormat    string `toml:"log_format"` // "text" or "json"
	LogFile      string `toml:"log_file"`   // empty: stderr
	PluginDir    string `toml:"plugin_dir"`
	// TLSCert and TLSKey are PEM files; both or neither.
	TLSCert        string `toml:"tls_cert"`
	TLSKey         string `toml:"tls_key"`
	MaxRequestBody Size   `toml:"max_request_body"`
	// MaxMessage bounds every answer the server sends (tool results,
	// resource reads, notifications), counted on the encoded JSON-RPC
	// message: the TypeScript SDK's stdio transport drops the connection
	// on a message over 10 MiB. Larger outputs are cut and larger files
	// served in parts.
	MaxMessage     Size     `toml:"max_message"`
	AllowedOrigins []string `toml:"allowed_origins"` // browser origins trusted for cross-origin POSTs
	// AdminAddr serves /healthz, /readyz and /metrics on their own
	// listener; empty serves them on the MCP listener.
	AdminAddr string `toml:"admin_addr"`
	// AdminPublic lets AdminAddr be a non-loopback address: its /metrics
	// (tenant names, counts; no code) is then open to whoever reaches it,
	// as the kubelet's probes and a cluster's Prometheus must.
	AdminPublic     bool `toml:"admin_public"`
	ShutdownTimeout int  `toml:"shutdown_timeout"` // seconds running calls get to finish
	// RequestBodyTimeout is how many seconds an HTTP client has, once its
	// headers arrived, to send the whole request body: a client that stalls
	// would otherwise hold its request slot and a goroutine forever.
	RequestBodyTimeout int `toml:"request_body_timeout"`
	// TenantsFile is a TOML file of [tenants.NAME] tables added to those of
	// forge.toml: the API key hashes kept apart (a Kubernetes Secret).
	TenantsFile string `toml:"tenants_file"`
	// AllowUnauthenticated lets the HTTP transport listen on a non-loopback
	// address with no tenants configured. Off: such a server refuses to start.
	AllowUnauthenticated bool `toml:"allow_unauthenticated"`
}

// Quotas bound what one tenant may use at once and how fast.
type Quotas struct {
	MaxConcurrentRuns   int `toml:"max_concurrent_runs"`   // executions in flight
	MaxSessions         int `toml:"max_sessions"`          // live stateful sessions
	ExecutionsPerMinute int `toml:"executions_per_minute"` // sustained rate
	ExecutionBurst      int `toml:"execution_burst"`       // calls allowed at once above the rate
	// MaxRequestsInFlight bounds one tenant's open HTTP requests (any
	// method), so slow or flooding clients hold bounded memory.
	MaxRequestsInFlight int `toml:"max_requests_in_flight"`
}

// Tenant is one team member or agent over HTTP: its API keys (sha256 hex of
// the key, never the key) and quota overrides (0: the [quotas] value).
type Tenant struct {
	APIKeySHA256        []string `toml:"api_key_sha256"`
	MaxConcurrentRuns   int      `toml:"max_concurrent_runs"`
	MaxSessions         int      `toml:"max_sessions"`
	ExecutionsPerMinute int      `toml:"executions_per_minute"`
	ExecutionBurst      int      `toml:"execution_burst"`
	// CheckpointQuotaMB bounds, in MiB, this tenant's share of the
	// checkpoint store (sessions.checkpoint_store_quota): its checkpoints
	// and suspended sessions together; 0: only the store's bound. (A count
	// of MiB, not a size string: a tenant is a map entry, and sizes are
	// struct fields only.)
	CheckpointQuotaMB int `toml:"checkpoint_quota_mb"`
	// Credentials are this tenant's own ([tenants.NAME.credentials.X]):
	// only its runs may ask for them, and one named as a
	// [network.credentials] one takes its place for this tenant.
	Credentials map[string]Credential `toml:"credentials"`
	// Isolation is what this tenant's sandboxes run under at least:
	// "gvisor" requires gVisor for them whatever security.isolation says;
	// "": security.isolation. Nothing the tenant sends lowers it.
	Isolation string `toml:"isolation"`
}

// Execution holds the per-run limits: defaults and the maxima a request may ask for.
type Execution struct {
	// DefaultBackend names, per language, the plugin that runs code without
	// a session when a call names none. A language missing here goes to the
	// one loaded stateless backend that serves it.
	DefaultBackend    map[string]string `toml:"default_backend"`
	DefaultTimeout    int               `toml:"default_timeout"` // seconds
	MaxTimeout        int               `toml:"max_timeout"`
	DefaultMemory     Size              `toml:"default_memory"`
	MaxMemory         Size              `toml:"max_memory"`
	DefaultCPUQuota   int               `toml:"default_cpu_quota"` // µs per 100 ms period
	MaxCPUQuota       int               `toml:"max_cpu_quota"`
	DefaultPids       int               `toml:"default_pids"`
	MaxPids           int               `toml:"max_pids"`
	NoFile            int               `toml:"nofile"`
	MaxConcurrentRuns int               `toml:"max_concurrent_runs"`
	MaxCodeSize       Size              `toml:"max_code_size"`
	MaxOutput         Size              `toml:"max_output"`     // stdout/stderr cap per stream
	MaxImageSize      Size              `toml:"max_image_size"` // per returned image file
	MaxEnvValue       Size              `toml:"max_env_value"`  // per environment variable of a call
	MaxEnvTotal       Size              `toml:"max_env_total"`  // all environment variables of a call, names and values
	// ProgressInterval (seconds) bounds the gap between two progress
	// notifications of a running call whose client sent a progressToken:
	// with no output in that time a keep-alive is sent, so a client that
	// resets its request timeout on progress keeps waiting for a long run.
	ProgressInterval int `toml:"progress_interval"`
	// MaxBackgroundTimeout (seconds) bounds a background job's run
	// (background: true), which may be longer than a call's max_timeout.
	MaxBackgroundTimeout int `toml:"max_background_timeout"`
}

// LongestTimeout is the longest any run may last, a call's or a job's: the
// bound of a sandbox's life.
func (e Execution) LongestTimeout() int { return max(e.MaxTimeout, e.MaxBackgroundTimeout) }

// Jobs configures background runs (execute_<language> with background:
// true): docs/jobs.md.
type Jobs struct {
	// DefaultTimeout (seconds) is a job's limit when its call gives none.
	DefaultTimeout int `toml:"default_timeout"`
	// ResultTTL (seconds) is how long a finished job (its state, output and
	// result) is kept for its owner, across client connections and server
	// restarts.
	ResultTTL int `toml:"result_ttl"`
	// MaxPerClient bounds the jobs one client (a tenant over HTTP) holds,
	// finished ones included: the oldest finished one makes room, and a
	// new job is refused while all of them still run.
	MaxPerClient int `toml:"max_per_client"`
}

// MaxJobsPerClient bounds jobs.max_per_client: every job's record is
// kept in the server's memory.
const MaxJobsPerClient = 1000

// Images says which images containers may use. Which image a backend runs
// is its plugin's setting: [plugins.NAME.config] image, by default the one
// the plugin declares.
type Images struct {
	Allowed []string `toml:"allowed"`
}

// Sessions configures stateful sessions.
type Sessions struct {
	IdleTimeout int `toml:"idle_timeout"`
	// SuspendAfter is how long (seconds) a session that can be saved whole
	// (gVisor) waits idle before it is suspended: snapshotted into the
	// checkpoint store and its sandbox removed, its memory freed; the next
	// call on it resumes it. 0: never; at or past idle_timeout, the
	// session is removed first.
	SuspendAfter    int `toml:"suspend_after"`
	MaxConcurrent   int `toml:"max_concurrent"`
	CleanupInterval int `toml:"cleanup_interval"`
	// DefaultBackend names, per language, the stateful plugin that keeps
	// sessions. A language missing here goes to the one loaded stateful
	// backend that serves it.
	DefaultBackend map[string]string `toml:"default_backend"`
	// CheckpointOnShutdown checkpoints every live idle session when the
	// server stops gracefully, so that its owner finds it again after a
	// restart (docs/session-data.md).
	CheckpointOnShutdown bool `toml:"checkpoint_on_shutdown"`
	// CheckpointTTL is how long (seconds) a checkpoint is kept after it was
	// made; the cleanup every cleanup_interval removes older ones.
	CheckpointTTL int `toml:"checkpoint_ttl"`
	// CheckpointStoreQuota bounds the bytes all checkpoints together take
	// on the host (<base_path>/state/checkpoints): a checkpoint that would
	// pass it is refused (rule checkpoint-store-full).
	CheckpointStoreQuota Size `toml:"checkpoint_store_quota"`
	// CheckpointDir is where checkpoints are kept; empty: the host's own
	// <base_path>/state/checkpoints. Replicas of a core in a cluster name
	// a directory on a volume they all mount (ReadWriteMany), so that a
	// session checkpointed through one is restored through any other.
	CheckpointDir string `toml:"checkpoint_dir"`
	// HistoryCells bounds the executed cells a session keeps (code,
	// outputs, images, errors, timing) for its history resource and
	// export_notebook; the oldest go first. 0: no history is kept.
	HistoryCells int `toml:"history_cells"`
	// HistoryBytes bounds the bytes of one session's history, in the
	// server's memory, counted as the cells take them in a notebook
	// (escapes, one string per line, images in base64: session.Cell.Size);
	// at most MaxHistoryBytes, because an exported notebook travels in one
	// MCP message.
	HistoryBytes Size `toml:"history_bytes"`
}

// Bounds of a session's history. MaxHistoryBytes: a notebook of that many
// bytes, its images in base64, fits one 16 MiB stdio message;
// MinHistoryBytes: room for a few cells of ordinary size.
const (
	MaxHistoryBytes = 8 << 20
	MinHistoryBytes = 64 << 10
	MaxHistoryCells = 10000
)

// Volumes is where per-session and per-run directories live on the host.
type Volumes struct {
	BasePath        string `toml:"base_path"`
	SessionQuota    Size   `toml:"session_quota"`
	MaxSessionQuota Size   `toml:"max_session_quota"`
	// EnforceQuota = false is the old form of waiving workspace-quota
	// (core/policy/waive.go).
	EnforceQuota bool `toml:"enforce_quota"`
	// MaxFileSize caps one file uploaded to, downloaded from or read as a
	// resource of a session's workspace. At most 12m: in base64 it must fit
	// one MCP stdio frame, which the go-sdk caps at 16 MiB.
	MaxFileSize Size `toml:"max_file_size"`
	// InlineFileSize: an output file up to this size comes back inside the
	// execute result; a larger one as a link to read with resources/read.
	InlineFileSize Size `toml:"inline_file_size"`
	// URLCacheSize bounds the cache of URL input files (<base_path>/state/url-cache),
	// kept per caller and revalidated with the server on every use; the
	// least recently used go first. 0 (""): no cache.
	URLCacheSize Size `toml:"url_cache_size"`
	// HostRoots are directories of the server's machine whose files a
	// session may copy in (import_file) and, writable, out (export_file):
	// the user's own data, its bytes never passing through the model
	// (docs/session-data.md). None by default.
	HostRoots map[string]HostRoot `toml:"host_roots"`
}

// HostRoot is one directory of [volumes.host_roots].
type HostRoot struct {
	Path     string `toml:"path"`     // absolute; the directory itself may not be a link
	Writable bool   `toml:"writable"` // export_file may write into it
	// Tenants may use it over HTTP; empty: only the local client (stdio,
	// or an HTTP server without tenants).
	Tenants []string `toml:"tenants"`
	// Claim is the PersistentVolumeClaim (in runtime.kubernetes.namespace)
	// holding the same files for pods: on Kubernetes a run's host_roots
	// mounts it read-only; "": the root is not mounted into pods (Path is
	// where the server itself reads it, import_file and export_file).
	Claim string `toml:"claim"`
}

// DefaultRunsc is where scripts/setup.sh installs gVisor's runsc.
const DefaultRunsc = "/usr/local/lib/mcp-forge/runsc"

// Security holds the sandbox hardening switches and the audit log.
type Security struct {
	AuditLog string `toml:"audit_log"`
	// AuditStdout copies every audit line to standard output as well, where
	// a cluster's log collection picks it up; HTTP transport only (over
	// stdio, standard output carries MCP).
	AuditStdout           bool   `toml:"audit_stdout"`
	AuditMaxSize          Size   `toml:"audit_max_size"`
	AuditKeep             int    `toml:"audit_keep"`
	EnforceResourceLimits bool   `toml:"enforce_resource_limits"`
	AllowNetwork          bool   `toml:"allow_network"`
	SandboxUser           string `toml:"sandbox_user"`
	OCIRuntime            string `toml:"oci_runtime"`
	UserNS                string `toml:"userns"`
	UserNSStart           int    `toml:"userns_start"`
	TmpfsSize             Size   `toml:"tmpfs_size"`
	// Isolation is the kernel sandboxed code talks to: "container" (the
	// host's, behind seccomp, a user namespace and no capabilities) or
	// "gvisor" (gVisor's Sentry, a second kernel in between). A tenant may
	// raise it, never lower it.
	Isolation string `toml:"isolation"`
	// Runsc is gVisor's runtime binary (make setup installs a pinned build
	// there); used where isolation is "gvisor".
	Runsc string `toml:"runsc"`

	// Waive names the runtime guarantees sandboxes may go without
	// (runtime.Guarantees); every other one is required. The policy reads
	// it with its aliases: EnforceResourceLimits = false is the old form of
	// waiving memory, cpu and pids (core/policy/waive.go).
	Waive []string `toml:"waive"`
}

// EnvironmentBuilder configures custom image builds.
type EnvironmentBuilder struct {
	Enabled bool `toml:"enabled"`
	// Builder names the builder plugin (mcp-forge-plugin-NAME) that
	// resolves and fetches packages; the core layers what it produces.
	Builder string `toml:"builder"`
	// Where packages come from, passed to every builder. Credentials in a
	// URL are never logged or audited.
	IndexURL       string   `toml:"index_url"`        // "": the language's default index
	ExtraIndexURLs []string `toml:"extra_index_urls"` // searched besides index_url
	FindLinks      []string `toml:"find_links"`       // absolute host directories of distributions
	Offline        bool     `toml:"offline"`          // only what is cached or in find_links
	// SecurityScan is "auto" (scan with trivy when it is on PATH, else say
	// the image was not scanned), "required" (refuse builds without trivy)
	// or "off".
	SecurityScan string `toml:"security_scan"`
	// ScanFailOn lists the trivy severities that refuse an image.
	ScanFailOn          []string            `toml:"scan_fail_on"`
	UVCachePath         string              `toml:"uv_cache_path"`
	MaxPackagesPerBuild int                 `toml:"max_packages_per_build"`
	MaxBuildTime        int                 `toml:"max_build_time"`
	MaxImageSize        Size                `toml:"max_image_size"`
	MaxConcurrentBuilds int                 `toml:"max_concurrent_builds"`
	BuildRateLimit      BuildRateLimit      `toml:"build_rate_limit"`
	PackageValidation   PackageValidation   `toml:"package_validation"`
	AutoCleanup         AutoCleanup         `toml:"auto_cleanup"`
	Storage             BuildStorage        `toml:"storage"`
	Templates           map[string]Template `toml:"templates"`
}

// BuildStorage bounds what builders keep between builds under their work
// directory and cache (layers, downloads, unpacked archives): after every
// build, entries unused for MaxAgeDays go, then the least recently used
// until all take at most MaxSize. 0 / "": no such bound.
type BuildStorage struct {
	MaxAgeDays int  `toml:"max_age_days"`
	MaxSize    Size `toml:"max_size"`
}

// BuildRateLimit caps how many builds may start.
type BuildRateLimit struct {
	MaxBuildsPerHour int `toml:"max_builds_per_hour"`
	MaxBuildsPerDay  int `toml:"max_builds_per_day"`
}

// PackageValidation decides which packages a build may install.
type PackageValidation struct {
	UseAllowlist            bool     `toml:"use_allowlist"`
	AllowlistPath           string   `toml:"allowlist_path"`
	BlocklistPath           string   `toml:"blocklist_path"`
	RequireApprovalPatterns []string `toml:"require_approval_patterns"`
	// ApprovedPackages are packages an operator approved in advance:
	// "name", "python:name" or "r:name". They pass the approval patterns and
	// the allowlist, never the blocklist.
	ApprovedPackages []string `toml:"approved_packages"`
}

// AutoCleanup removes old custom images.
type AutoCleanup struct {
	Enabled    bool `toml:"enabled"`
	MaxAgeDays int  `toml:"max_age_days"`
	MaxImages  int  `toml:"max_images"`
}

// Template is a named package set a build can start from.
type Template struct {
	Description string   `toml:"description"`
	Packages    []string `toml:"packages"`
}

// MCPTool is an upstream MCP server whose tools the sandbox may call
// (docs/tool-bridge.md): started by the bridge plugin over stdio (Command,
// Args, Env) or reached over streamable HTTP (URL, Headers). Env and header
// values are secrets: they go to the bridge plugin only.
type MCPTool struct {
	Command string            `toml:"command"`
	Args    []string          `toml:"args"`
	Env     map[string]string `toml:"env"`
	URL     string            `toml:"url"`
	Headers map[string]string `toml:"headers"`
	// Policy per tool, by globs over the tool's name (without the server):
	// deny wins over approve, approve over allow; a tool no list names gets
	// Default ("allow", "deny" or "approve"). A non-empty Allow with
	// Default unset makes Default "deny": listing what is allowed means
	// nothing else is.
	Allow   []string `toml:"allow"`
	Deny    []string `toml:"deny"`
	Approve []string `toml:"approve"`
	Default string   `toml:"default"`
	// CallTimeout overrides bridge.call_timeout for this server's tools
	// (seconds; 0: bridge.call_timeout).
	CallTimeout int `toml:"call_timeout"`
	// MaxCallsPerRun bounds one run's calls of this server's tools, within
	// bridge.max_calls_per_run (0: only that bound).
	MaxCallsPerRun int `toml:"max_calls_per_run"`
}

// Bridge configures how sandbox code calls MCP tools (mcp_tools).
type Bridge struct {
	// Plugin names the bridge plugin; "": the one bridge plugin loaded.
	Plugin string `toml:"plugin"`
	// CallTimeout bounds one tool call, in seconds.
	CallTimeout int `toml:"call_timeout"`
	// MaxCallsPerRun is the call budget of one run (a stateless run, or
	// one execute in a session).
	MaxCallsPerRun int `toml:"max_calls_per_run"`
	// MaxConcurrentCalls bounds the calls one sandbox has in flight.
	MaxConcurrentCalls int `toml:"max_concurrent_calls"`
}

// PluginSpec declares a plugin binary.
type PluginSpec struct {
	Path   string `toml:"path"`
	SHA256 string `toml:"sha256"`
	// Languages the plugin serves, as it reports them. Optional; with them a
	// plugin that is refused (say, for a checksum mismatch) keeps its
	// execute_<language> tools, which answer why, instead of another plugin
	// taking its place.
	Languages []string       `toml:"languages"`
	Config    map[string]any `toml:"config"`
}

// Default returns the built-in configuration of this process: what runs
// with no forge.toml. Its paths depend on the effective uid (see DefaultFor).
func Default() Config { return DefaultFor(os.Geteuid(), os.LookupEnv) }

// systemDefault is the configuration of a server run as root: the paths are
// system directories. forge.toml.example documents these values.
func systemDefault() Config {
	return Config{
		Server: Server{
			Transport:          "stdio",
			Host:               "localhost",
			Port:               3000,
			LogLevel:           "info",
			LogFormat:          "text",
			PluginDir:          "",
			MaxRequestBody:     8 << 20,
			MaxMessage:         9 << 20,
			AllowedOrigins:     []string{},
			ShutdownTimeout:    60,
			RequestBodyTimeout: 60,
		},
		Execution: Execution{
			DefaultBackend:       map[string]string{},
			DefaultTimeout:       300,
			MaxTimeout:           1800,
			DefaultMemory:        512 << 20,
			MaxMemory:            2 << 30,
			DefaultCPUQuota:      50000,
			MaxCPUQuota:          100000,
			DefaultPids:          128,
			MaxPids:              1024,
			NoFile:               1024,
			MaxConcurrentRuns:    8,
			MaxCodeSize:          4 << 20,
			MaxOutput:            1 << 20,
			MaxImageSize:         5 << 20,
			MaxEnvValue:          32 << 10,
			MaxEnvTotal:          256 << 10,
			ProgressInterval:     10,
			MaxBackgroundTimeout: 4 * 3600,
		},
		Jobs: Jobs{DefaultTimeout: 3600, ResultTTL: 3600, MaxPerClient: 20},
		Images: Images{
			Allowed: []string{"mcp-forge/python:*", "mcp-forge/r:*", "mcp-forge/custom:*"},
		},
		Sessions: Sessions{IdleTimeout: 3600, SuspendAfter: 600, MaxConcurrent: 10, CleanupInterval: 300, DefaultBackend: map[string]string{},
			CheckpointOnShutdown: true, CheckpointTTL: 7 * 24 * 3600, CheckpointStoreQuota: 10 << 30, HistoryCells: 200, HistoryBytes: 4 << 20},
		Volumes: Volumes{
			BasePath:        "/var/lib/mcp-forge",
			SessionQuota:    1 << 30,
			MaxSessionQuota: 10 << 30,
			EnforceQuota:    true,
			MaxFileSize:     10 << 20,
			InlineFileSize:  256 << 10,
			URLCacheSize:    1 << 30,
			HostRoots:       map[string]HostRoot{},
		},
		Runtime: Runtime{Kind: "podman", Kubernetes: Kubernetes{
			Namespace: "mcp-forge", PullPolicy: "IfNotPresent", AgentImage: "localhost/mcp-forge/agent:dev", NodeSelector: map[string]string{}, Tolerations: []Toleration{},
			CPURequest: "50m", MemoryRequest: 64 << 20, SessionLifetime: 24 * 3600,
		}},
		Security: Security{
			AuditLog:              "/var/log/mcp-forge/audit.log",
			AuditMaxSize:          100 << 20,
			AuditKeep:             5,
			EnforceResourceLimits: true,
			Waive:                 []string{},
			AllowNetwork:          false,
			SandboxUser:           "1000:1000",
			OCIRuntime:            "runc",
			UserNS:                "private",
			UserNSStart:           2147483647,
			TmpfsSize:             64 << 20,
			Isolation:             "container",
			Runsc:                 DefaultRunsc,
		},
		EnvironmentBuilder: EnvironmentBuilder{
			Enabled:             true,
			Builder:             "uv",
			ExtraIndexURLs:      []string{},
			FindLinks:           []string{},
			SecurityScan:        "auto",
			ScanFailOn:          []string{"CRITICAL"},
			UVCachePath:         "/var/cache/mcp-forge/uv",
			MaxPackagesPerBuild: 50,
			MaxBuildTime:        600,
			MaxImageSize:        2 << 30,
			MaxConcurrentBuilds: 3,
			BuildRateLimit:      BuildRateLimit{MaxBuildsPerHour: 10, MaxBuildsPerDay: 50},
			PackageValidation: PackageValidation{
				UseAllowlist:            true,
				RequireApprovalPatterns: []string{"*-dev", "*-nightly"},
				ApprovedPackages:        []string{},
			},
			AutoCleanup: AutoCleanup{Enabled: true, MaxAgeDays: 30, MaxImages: 20},
			Storage:     BuildStorage{MaxAgeDays: 30, MaxSize: 20 << 30},
			Templates:   map[string]Template{},
		},
		MCPTools: map[string]MCPTool{},
		Bridge:   Bridge{CallTimeout: 30, MaxCallsPerRun: 100, MaxConcurrentCalls: 8},
		Plugins:  map[string]PluginSpec{},
		Quotas:   Quotas{MaxConcurrentRuns: 4, MaxSessions: 5, ExecutionsPerMinute: 120, ExecutionBurst: 20, MaxRequestsInFlight: 32},
		Tenants:  map[string]Tenant{},
		Auth: Auth{JWT: JWT{TenantClaim: "sub", RequiredScopes: []string{}, Leeway: 30, JWKSMinRefresh: 30,
			AuthorizationServers: []string{}}},
		Network:   defaultNetwork(),
		Telemetry: Telemetry{ServiceName: "mcp-forge"},
	}
}
