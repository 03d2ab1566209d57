package runtime

import "time"

// Labels that mark a container as ours.
const (
	LabelManaged  = "io.mcp-forge.managed"
	LabelInstance = "io.mcp-forge.instance"
	LabelSession  = "io.mcp-forge.session"
	LabelPlugin   = "io.mcp-forge.owner"
	LabelCodeHash = "io.mcp-forge.code-sha256"
	// LabelOneShot marks a container that lives for one run only; sessions'
	// containers lack it and are removed by the idle reaper instead.
	LabelOneShot = "io.mcp-forge.one-shot"
	// LabelServer identifies the live server process that owns a container
	// (core/procid), so that reconciliation and the watchdog never remove
	// containers of another running forge.
	LabelServer = "io.mcp-forge.server"
	// LabelPluginPrefix prefixes the labels a plugin asks for
	// (host.Intent.Labels): key k is LabelPluginPrefix+k on the container.
	LabelPluginPrefix = "io.mcp-forge.x-"
	// LabelRun is the plugin label host.LabelRun as the container carries
	// it: the run a stateless container serves (audited as its run_id; the
	// run's slots are held until every container of the run is gone).
	// core/runtime imports no sdk, so it is spelled out here; a test of
	// core/hostsvc binds the two.
	LabelRun = LabelPluginPrefix + "run"
)

// Mount is a bind mount of a host directory into the container.
type Mount struct {
	Source   string // host path
	Target   string // path in the container
	ReadOnly bool
	// HostRoot: Source is a directory of the user's ([volumes.host_roots]),
	// not the core's. It is bound without the mounts beneath it and never
	// changed: no chown to the sandbox's user, read-only.
	HostRoot bool
	// Claim is the PersistentVolumeClaim holding a host root's files for
	// a runtime whose sandboxes cannot mount Source (a cluster's pods).
	Claim string
}

// Limits are the resources one container may use.
type Limits struct {
	MemoryBytes int64
	CPUQuota    int64 // µs per 100 ms period
	Pids        int64
	NoFile      int64
	Timeout     time.Duration
}

// Spec is a complete container description as the runtime will create it.
// Fields that the rules forbid exist here so that the rules can be tested and
// so that a spec that somehow carries them is refused, not silently fixed.
type Spec struct {
	Name            string
	Image           string // as requested; checked against images.allowed
	ImageID         string // what Image resolved to when checked; the container is created from this ID
	Command         []string
	Env             map[string]string
	WorkDir         string
	Labels          map[string]string
	User            string // "uid:gid"
	Network         string // "none" unless security.allow_network; never "host"
	ReadOnlyRoot    bool
	TmpfsSize       int64 // size of the writable /tmp
	NoNewPrivileges bool
	SeccompProfile  string // host path of MCP-Forge's seccomp profile (required)
	CapDrop         []string
	CapAdd          []string
	Privileged      bool
	Devices         []string
	PidNS           string // "" (private) or "host" (forbidden)
	IPCNS           string
	UserNS          string // "private" (fixed map at UserNSStart), "auto" (Podman picks a range), "" (host)
	UserNSStart     int64  // host uid/gid of container id 0 for "private"
	Mounts          []Mount
	Init            bool
	Limits          Limits
	SessionID       string
	Workspace       string // directory under <base>/sessions and <base>/uploads; SessionID if empty
	// WorkspacePath is the host directory of the workspace the mounts lie
	// in: a runtime whose sandboxes cannot see the core's filesystem
	// (Kubernetes) copies it into the sandbox and mounts its subdirectories
	// from there.
	WorkspacePath string
	Plugin        string // plugin that asked for it
	// Isolation is the kernel the code talks to: IsolationContainer (the
	// host's, behind seccomp) or IsolationGVisor (gVisor's Sentry).
	Isolation string
	// Endpoints is how many sockets bound inside the sandbox the core
	// reaches (host.Intent.Endpoints): under gVisor each is relayed by a
	// process of the sandbox's user, which its process limit must allow.
	Endpoints int
}

// The isolations a sandbox may run under (security.isolation).
const (
	IsolationContainer = "container"
	IsolationGVisor    = "gvisor"
)

// Isolations lists them, weakest first: a setting may raise another, never
// lower it.
var Isolations = []string{IsolationContainer, IsolationGVisor}

// UserNSSize is how many ids a private user namespace map covers.
const UserNSSize = 65536
