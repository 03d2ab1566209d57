// Package policy holds the security rules every sandbox container must obey,
// applied in the core to every container whoever asks for it. It is pure
// rules: no Podman, and file-system access only through an injected resolver.
package policy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/imageref"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Violation is a refused container operation; Rule names the rule broken.
type Violation struct {
	Rule   string
	Detail string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("security policy violation (%s): %s", v.Rule, v.Detail)
}

func violation(rule, format string, args ...any) *Violation {
	return &Violation{Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

// MinUserNSStart keeps the private user namespace map clear of ordinary
// host accounts.
const MinUserNSStart = 100_000

// Settings are the operator's choices the rules depend on.
type Settings struct {
	AllowedImages []string
	AllowNetwork  bool
	User          string // required sandbox user "uid:gid"
	UserNS        string // "private", "auto" or "host"
	UserNSStart   int64  // first host id of the "private" map
	BasePath      string // volumes.base_path
	TmpfsMax      int64
	Seccomp       string // host path of MCP-Forge's seccomp profile, required on every spec
	SeccompGVisor string // its variant for sandboxes under gVisor (seccomp.GVisorJSON)
	// Isolation is what every sandbox runs under (runtime.Isolations);
	// "" is runtime.IsolationContainer.
	Isolation string
	// ToolGrantTarget is where a tool grant directory is mounted in a
	// sandbox (the bridge protocol's directory, set by the assembly so that
	// the rules import nothing of the plugin SDK); empty refuses every grant.
	ToolGrantTarget string
	// NetworkTarget is where a run's network channel directory is mounted
	// (egress.SandboxDir, set by the assembly); empty refuses every one.
	NetworkTarget string
	// HostRoots are the user's directories the operator allows
	// ([volumes.host_roots] paths), mounted read-only at
	// HostRootsTarget/<name> (host.RootsDir, set by the assembly); empty
	// refuses every host-root mount.
	HostRoots       map[string]string // what a sandbox mounts of each root → the claim pods mount it from ("": none)
	HostRootsTarget string
	// HostRootsStage is where the core binds the roots under base_path
	// (hostroots.StageDir): a bind there was checked against base_path by
	// filesystem when it was made.
	HostRootsStage string
	Defaults       runtime.Limits
	Max            runtime.Limits
	// Waived are the guarantees sandboxes may go without, each with the
	// setting that waived it (config.Waivers); every other one is required.
	Waived map[runtime.Guarantee]string
	// TurnedOff are the guarantees the configuration itself turns off
	// (security.allow_network, security.userns = "host"), waived with it.
	TurnedOff []runtime.Gap
}

// Resolver turns a host path into its real path (symlinks and ".." resolved).
// filepath.EvalSymlinks in production; it may fail for paths that do not exist.
type Resolver func(string) (string, error)

// Policy applies Settings to container specs and limit requests.
type Policy struct {
	s       Settings
	resolve Resolver
}

// New returns a policy; resolve may be nil for pure-lexical checks in tests.
func New(s Settings, resolve Resolver) *Policy {
	if resolve == nil {
		resolve = func(p string) (string, error) { return p, nil }
	}
	return &Policy{s: s, resolve: resolve}
}

// Settings returns the rules' parameters (for diagnostics and resources).
func (p *Policy) Settings() Settings { return p.s }

// CheckImage refuses an image outside the allowlist, saying why.
func (p *Policy) CheckImage(image string) error {
	if _, err := imageref.Check(p.s.AllowedImages, image); err != nil {
		return violation("image-not-allowed", "%v; images.allowed is %v", err, p.s.AllowedImages)
	}
	return nil
}

// CheckCreate refuses any spec that breaks a rule. It returns the first
// violation; rules are checked most-dangerous first.
func (p *Policy) CheckCreate(s runtime.Spec) error {
	switch {
	case s.Privileged:
		return violation("privileged", "privileged containers are never allowed")
	case len(s.CapAdd) > 0:
		return violation("cap-add", "adding capabilities %v is not allowed", s.CapAdd)
	case len(s.Devices) > 0:
		return violation("devices", "host devices %v may not be passed in", s.Devices)
	case s.PidNS == "host":
		return violation("host-pid", "the host PID namespace may not be shared")
	case s.IPCNS == "host":
		return violation("host-ipc", "the host IPC namespace may not be shared")
	case s.Network == "host":
		return violation("host-network", "the host network namespace may not be shared")
	case s.UserNS == "host" && p.s.UserNS != "host":
		return violation("host-userns", "sandboxes run in their own user namespace (security.userns = %q)", p.s.UserNS)
	}
	if err := p.checkIsolation(s); err != nil {
		return err
	}
	if err := p.checkSeccomp(s); err != nil {
		return err
	}
	if err := p.CheckImage(s.Image); err != nil {
		return err
	}
	if s.Network != "none" && !p.s.AllowNetwork {
		return violation("network", "network mode %q requested but security.allow_network is false; sandboxes have no network", s.Network)
	}
	if !slices.ContainsFunc(s.CapDrop, func(c string) bool { return strings.EqualFold(c, "ALL") }) {
		return violation("cap-drop", "all capabilities must be dropped")
	}
	if !s.ReadOnlyRoot {
		return violation("read-only-root", "the root filesystem must be read-only")
	}
	if s.TmpfsSize <= 0 || (p.s.TmpfsMax > 0 && s.TmpfsSize > p.s.TmpfsMax) {
		return violation("tmpfs", "/tmp must be a size-limited tmpfs of at most %s", config.FormatSize(p.s.TmpfsMax))
	}
	if !s.NoNewPrivileges {
		return violation("no-new-privileges", "no-new-privileges must be set")
	}
	if !s.Init {
		return violation("init", "an init process is required (signals and zombie reaping)")
	}
	if err := checkUser(s.User); err != nil {
		return err
	}
	if p.s.UserNS != "host" && s.UserNS != p.s.UserNS {
		return violation("userns", "each sandbox must get its own user namespace (security.userns = %q), got %q", p.s.UserNS, s.UserNS)
	}
	if s.UserNS == "private" && s.UserNSStart < MinUserNSStart {
		return violation("userns", "the user namespace map must start at host id %d or above so that no sandbox user is a host account, got %d", MinUserNSStart, s.UserNSStart)
	}
	if err := p.checkLimits(s.Limits); err != nil {
		return err
	}
	if s.Labels[runtime.LabelManaged] != "true" {
		return violation("labels", "container must carry the %s=true label", runtime.LabelManaged)
	}
	ws := s.Workspace
	if ws == "" {
		ws = s.SessionID
	}
	for _, m := range s.Mounts {
		if err := p.CheckMount(m, ws); err != nil {
			return err
		}
	}
	return nil
}

func checkUser(u string) error {
	uid, gid, ok := strings.Cut(u, ":")
	un, err1 := strconv.Atoi(uid)
	gn, err2 := strconv.Atoi(gid)
	if !ok || err1 != nil || err2 != nil {
		return violation("user", "user must be a numeric uid:gid, got %q", u)
	}
	if un == 0 || gn == 0 {
		return violation("root-user", "containers never run as root (user %q)", u)
	}
	return nil
}

func (p *Policy) checkLimits(l runtime.Limits) error {
	type lim struct {
		name     string
		val, max int64
	}
	for _, c := range []lim{
		{"memory", l.MemoryBytes, p.s.Max.MemoryBytes},
		{"cpu quota", l.CPUQuota, p.s.Max.CPUQuota},
		{"pids", l.Pids, p.s.Max.Pids},
		{"nofile", l.NoFile, p.s.Max.NoFile},
	} {
		if c.val <= 0 {
			return violation("limits", "a %s limit is required", c.name)
		}
		if c.max > 0 && c.val > c.max {
			return violation("limits", "%s limit %d exceeds the maximum %d", c.name, c.val, c.max)
		}
	}
	if l.Timeout <= 0 {
		return violation("limits", "a timeout is required")
	}
	return nil
}

// forbiddenMount reports why a host path may never be mounted, or "".
func forbiddenMount(p string) string {
	switch p {
	case "/", "/etc", "/proc", "/sys", "/dev", "/run", "/var/run", "/root", "/home", "/boot", "/usr", "/var", "/var/lib":
		return "is a system directory"
	}
	for _, pre := range []string{"/etc/", "/proc/", "/sys/", "/dev/", "/boot/", "/run/podman", "/var/run/podman", "/run/docker", "/var/run/docker", "/var/lib/containers"} {
		if strings.HasPrefix(p, pre) || p == strings.TrimSuffix(pre, "/") {
			return "is under a system or container-engine directory"
		}
	}
	base := filepath.Base(p)
	if strings.HasSuffix(base, ".sock") && (strings.Contains(base, "podman") || strings.Contains(base, "docker") || strings.Contains(base, "containerd")) {
		return "is a container-engine socket"
	}
	return ""
}

// CheckMount accepts a bind mount only inside the allowed areas of
// volumes.base_path, after resolving ".." and symlinks:
//
//	<base>/sessions/<session>/…   read-write, only this container's session
//	<base>/uploads/<session>/…    read-write, only this container's session
//	<base>/shared/readonly/…      read-only
//	<base>/tools/<grant>          read-only at Settings.ToolGrantTarget (a tool grant)
//	<base>/net/<channel>          read-only at Settings.NetworkTarget (a network channel)
func (p *Policy) CheckMount(m runtime.Mount, sessionID string) error {
	if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) {
		return violation("mount", "mount paths must be absolute (source %q, target %q)", m.Source, m.Target)
	}
	if m.HostRoot {
		return p.checkHostRoot(m)
	}
	if t := filepath.Clean(m.Target); t == "/" || forbiddenTarget(t) {
		return violation("mount", "mount target %q would cover a system directory in the container", m.Target)
	}
	clean := filepath.Clean(m.Source)
	if why := forbiddenMount(clean); why != "" {
		return violation("forbidden-mount", "%s %s and may never be mounted", clean, why)
	}
	real, err := p.resolve(clean)
	if err != nil {
		return violation("mount", "cannot resolve mount source %q: %v", m.Source, err)
	}
	if why := forbiddenMount(real); why != "" {
		return violation("forbidden-mount", "%s resolves to %s, which %s", m.Source, real, why)
	}
	base, err := p.resolve(filepath.Clean(p.s.BasePath))
	if err != nil {
		base = filepath.Clean(p.s.BasePath)
	}
	rel, err := filepath.Rel(base, real)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return violation("mount-outside-base", "%s resolves to %s, outside volumes.base_path %s", m.Source, real, base)
	}
	parts := strings.Split(rel, string(filepath.Separator))
	switch {
	case (parts[0] == "sessions" || parts[0] == "uploads") && len(parts) >= 2:
		if sessionID == "" || parts[1] != sessionID {
			return violation("mount-other-session", "%s belongs to session %q, not to this container's session %q", m.Source, parts[1], sessionID)
		}
		return checkNoDotDot(m.Source)
	case parts[0] == "tools" && len(parts) == 2:
		// A tool grant (core/toolbridge): the core alone adds this mount,
		// for a grant issued to the plugin that creates the container.
		if !m.ReadOnly {
			return violation("mount-readonly", "%s is a tool grant and must be mounted read-only", m.Source)
		}
		if p.s.ToolGrantTarget == "" {
			return violation("mount", "%s is a tool grant, and this server mounts none (no tool grant target is configured)", m.Source)
		}
		if filepath.Clean(m.Target) != p.s.ToolGrantTarget {
			return violation("mount", "a tool grant is mounted at %s only, not %q", p.s.ToolGrantTarget, m.Target)
		}
		return checkNoDotDot(m.Source)
	case parts[0] == "net" && len(parts) == 2:
		// A network channel (core/egress): the core alone adds this mount,
		// for a channel opened for the plugin that creates the container.
		if !m.ReadOnly {
			return violation("mount-readonly", "%s is a network channel and must be mounted read-only", m.Source)
		}
		if p.s.NetworkTarget == "" || filepath.Clean(m.Target) != p.s.NetworkTarget {
			return violation("mount", "a network channel is mounted at %s only, not %q", p.s.NetworkTarget, m.Target)
		}
		return checkNoDotDot(m.Source)
	case parts[0] == "shared" && len(parts) >= 2 && parts[1] == "readonly":
		if !m.ReadOnly {
			return violation("mount-readonly", "%s is shared and must be mounted read-only", m.Source)
		}
		return checkNoDotDot(m.Source)
	}
	return violation("mount-outside-base", "%s is not in an allowed area (%s/sessions/<id>, %s/uploads/<id>, %s/shared/readonly)", real, base, base, base)
}

// checkNoDotDot refuses ".." in a mount source that passed the checks: they
// take it lexically, the kernel after following symlinks, so "<ws>/link/../x"
// passes as <ws>/x yet binds <link's target>/../x. Workspace paths never
// contain "..".
func checkNoDotDot(src string) error {
	if slices.Contains(strings.Split(src, "/"), "..") {
		return violation("mount-dotdot", "mount source %q must not contain \"..\" (a symlink before it could lead anywhere)", src)
	}
	return nil
}

func forbiddenTarget(t string) bool {
	for _, d := range []string{"/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64"} {
		if t == d || strings.HasPrefix(t, d+"/") {
			return true
		}
	}
	return false
}

// LimitRequest is what a caller asks for; zero values mean "the default".
type LimitRequest struct {
	Memory   string
	CPUQuota int64
	Pids     int64
	Timeout  int64 // seconds
}

// LimitError is a request beyond what the operator allows.
type LimitError struct {
	Field string
	Msg   string
}

func (e *LimitError) Error() string { return e.Field + ": " + e.Msg }

// ResolveLimits fills defaults and refuses values above the maxima, naming them.
func (p *Policy) ResolveLimits(r LimitRequest) (runtime.Limits, error) {
	l := p.s.Defaults
	if r.Memory != "" {
		// A request writes its memory as the configuration does.
		var b config.Size
		if err := b.UnmarshalText([]byte(r.Memory)); err != nil {
			return l, &LimitError{"memory", err.Error()}
		}
		if int64(b) > p.s.Max.MemoryBytes {
			return l, &LimitError{"memory", fmt.Sprintf("%s exceeds the maximum %s (execution.max_memory)", r.Memory, config.FormatSize(p.s.Max.MemoryBytes))}
		}
		if b < 4<<20 {
			return l, &LimitError{"memory", fmt.Sprintf("%s is below the 4m minimum a container needs", r.Memory)}
		}
		l.MemoryBytes = int64(b)
	}
	if r.CPUQuota != 0 {
		if r.CPUQuota < 1000 || r.CPUQuota > 1_000_000 {
			return l, &LimitError{"cpu_quota", fmt.Sprintf("%d is outside 1000..1000000 (100000 = one core)", r.CPUQuota)}
		}
		if r.CPUQuota > p.s.Max.CPUQuota {
			return l, &LimitError{"cpu_quota", fmt.Sprintf("%d exceeds the maximum %d (execution.max_cpu_quota)", r.CPUQuota, p.s.Max.CPUQuota)}
		}
		l.CPUQuota = r.CPUQuota
	}
	if r.Pids != 0 {
		if r.Pids < 0 || r.Pids > p.s.Max.Pids {
			return l, &LimitError{"pids", fmt.Sprintf("%d is outside 1..%d (execution.max_pids)", r.Pids, p.s.Max.Pids)}
		}
		l.Pids = r.Pids
	}
	if r.Timeout != 0 {
		max := int64(p.s.Max.Timeout.Seconds())
		if r.Timeout < 0 || r.Timeout > max {
			return l, &LimitError{"timeout", fmt.Sprintf("%d seconds is outside 1..%d (the longer of execution.max_timeout and execution.max_background_timeout)", r.Timeout, max)}
		}
		l.Timeout = secs(r.Timeout)
	}
	return l, nil
}

// checkHostRoot accepts a mount of a whole host root the operator allows,
// read-only, at its place under Settings.HostRootsTarget, resolving to
// neither a system directory nor a place overlapping volumes.base_path
// (where every session's files are). That the root itself is no link is
// core/hostroots' check, right before the mount.
func (p *Policy) checkHostRoot(m runtime.Mount) error {
	src := filepath.Clean(m.Source)
	claim, ok := p.s.HostRoots[src]
	if !ok {
		return violation("mount", "%s is not one of the host roots the operator allows (volumes.host_roots)", m.Source)
	}
	if m.Claim != claim {
		return violation("mount", "host root %s is mounted from claim %q only, not %q (volumes.host_roots.*.claim)", m.Source, claim, m.Claim)
	}
	if !m.ReadOnly {
		return violation("mount-readonly", "host root %s is mounted read-only only", m.Source)
	}
	if t := filepath.Clean(m.Target); p.s.HostRootsTarget == "" || filepath.Dir(t) != p.s.HostRootsTarget || t != m.Target {
		return violation("mount", "a host root is mounted at %s/<name> only, not %q", p.s.HostRootsTarget, m.Target)
	}
	real, err := p.resolve(src)
	switch {
	case err != nil:
		return violation("mount", "cannot resolve host root %q: %v", m.Source, err)
	case real != src:
		return violation("mount", "host root %s resolves to %s: a link is never followed (was the root replaced by one?)", m.Source, real)
	}
	for _, q := range []string{src, real} {
		if why := forbiddenMount(q); why != "" {
			return violation("forbidden-mount", "host root %s: %s %s and may never be mounted", m.Source, q, why)
		}
	}
	if p.s.HostRootsStage != "" && filepath.Dir(src) == p.s.HostRootsStage {
		return nil // the core's own bind of the root, made from what it checked
	}
	base, err := p.resolve(filepath.Clean(p.s.BasePath))
	if err != nil {
		base = filepath.Clean(p.s.BasePath)
	}
	if within(base, real) || within(real, base) {
		return violation("mount-outside-base", "host root %s (%s) overlaps volumes.base_path %s, which holds every session's files", m.Source, real, base)
	}
	return nil
}

// within reports whether p is dir or beneath it.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
