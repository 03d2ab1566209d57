// Package sandboxes decides what a run's or a session's sandbox gets
// beyond the defaults, and grants it: the host roots the call asks for
// (execute_<language>'s host_roots: the user's own directories mounted
// read-only, so code reads a large file where it lies and its bytes never
// pass through MCP), and the isolation its tenant requires
// (tenants.NAME.isolation). The grant is a token the backend copies into
// its container's intent; the core alone turns it into mounts and an
// isolation (core/hostsvc, core/sandboxgrant).
package sandboxes

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/hostroots"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/sandboxgrant"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Rules of refusals (besides hostroots.RuleUnknown and RuleChanged).
const (
	// RuleUnavailable: host roots asked of a server without them, of a
	// runtime or backend that cannot mount them.
	RuleUnavailable = "host-root-unavailable"
	// RuleSession: a later call of a session asks for roots it was not
	// started with (mounts are fixed when its container starts).
	RuleSession = "host-root-session"
	// RuleIsolation: the caller's tenant requires an isolation its
	// backend cannot be told to give (no sandbox grants).
	RuleIsolation = "isolation-unavailable"
)

// EventMount is the audit line of roots granted to a run or session.
const EventMount = "files.host_mount"

// maxRoots bounds the roots one call names.
const maxRoots = 16

// Refuser audits a refusal with its rule and returns it (engine.Engine.Refuse).
type Refuser interface {
	Refuse(client, sessionID, tool string, err error, details map[string]any) error
}

// Sandboxes grants what runs need.
type Sandboxes struct {
	grants *sandboxgrant.Registry
	rec    audit.Recorder
	refuse Refuser
	// roots are the configured host roots; nil: none.
	roots *hostroots.Roots
	// claimsOnly: the runtime's sandboxes cannot mount a directory of the
	// server's machine (a cluster's pods), only a root's claim.
	claimsOnly bool
	// isolation is, by tenant, what its sandboxes run under at least.
	isolation map[string]string
}

// New grants through reg, audited by rec, refusals by r; isolation is
// what each tenant requires (tenants.NAME.isolation: "gvisor" or none);
// roots (nil: none) are the host roots calls may mount, claimsOnly that
// the runtime mounts only roots with a claim (volumes.host_roots.*.claim).
func New(reg *sandboxgrant.Registry, rec audit.Recorder, r Refuser, isolation map[string]string, roots *hostroots.Roots, claimsOnly bool) *Sandboxes {
	return &Sandboxes{grants: reg, rec: rec, refuse: r, isolation: isolation, roots: roots, claimsOnly: claimsOnly}
}

// TenantIsolation is, by tenant, the isolation it requires
// (tenants.NAME.isolation).
func TenantIsolation(cfg config.Config) map[string]string {
	out := map[string]string{}
	for name, t := range cfg.Tenants {
		if t.Isolation != "" {
			out[name] = t.Isolation
		}
	}
	return out
}

// Required is the isolation client's sandboxes run under at least beyond
// the server's ("": none): its tenant's (tenants.NAME.isolation; over
// HTTP the client is its tenant).
func (m *Sandboxes) Required(client string) string {
	if iso := m.isolation[client]; iso == runtime.IsolationGVisor {
		return iso
	}
	return ""
}

// Ask is what a call's sandbox is to get.
type Ask struct {
	Roots []string
	// Client is the caller: over HTTP its tenant, whose isolation applies.
	Client    string
	Session   string // the caller's id, "" for a stateless run
	Internal  string // the session's internal id, for the audit line
	Run, Tool string
	Backend   string
	// BackendGrants: the backend passes sandbox grants on
	// (backend.Capabilities.SandboxGrants).
	BackendGrants bool
}

// Need is what a sandbox gets beyond the defaults; the zero Need is
// nothing (no grant).
type Need struct {
	Roots     []*hostroots.Root
	Isolation string
}

// Empty reports whether n asks for nothing.
func (n Need) Empty() bool { return len(n.Roots) == 0 && n.Isolation == "" }

// Resolve checks what a call needs before anything runs: the zero Need
// when nothing, or a refusal (the caller audits it).
func (m *Sandboxes) Resolve(a Ask) (Need, error) {
	var n Need
	if iso := m.Required(a.Client); iso != "" {
		if !a.BackendGrants {
			return Need{}, refusal.New(RuleIsolation, "your sandboxes must run under gVisor (tenants.%s.isolation), and the %s backend cannot be told so (its plugin does not pass sandbox grants on): use another backend", a.Client, a.Backend)
		}
		n.Isolation = iso
	}
	if len(a.Roots) == 0 {
		return n, nil
	}
	names := slices.Compact(slices.Sorted(slices.Values(a.Roots)))
	switch {
	case m.roots == nil:
		return Need{}, refusal.New(RuleUnavailable, "host_roots %s: this server has no host roots (volumes.host_roots): send the file with input_files or upload_file", quotedList(names))
	case !a.BackendGrants:
		return Need{}, refusal.New(RuleUnavailable, "host_roots %s: the %s backend does not mount host roots (its plugin does not pass sandbox grants on): use another backend, or import_file", quotedList(names), a.Backend)
	case len(names) > maxRoots:
		return Need{}, refusal.New(RuleUnavailable, "host_roots names %d roots; at most %d", len(names), maxRoots)
	}
	for _, name := range names {
		r, err := m.roots.Get(a.Client, name, false)
		switch {
		case err != nil:
			return Need{}, refusal.New(hostroots.RuleUnknown, "host_roots: %v", err)
		case m.claimsOnly && r.Claim == "":
			return Need{}, refusal.New(RuleUnavailable, "host_roots %s: this server's sandboxes are pods of a cluster, which mount a root only from its PersistentVolumeClaim, and this root names none (volumes.host_roots.%s.claim); copy the files in with import_file instead", refusal.Quoted(name), name)
		}
		n.Roots = append(n.Roots, r)
	}
	return n, nil
}

// Grant issues n (from Resolve, not empty) to a's backend for its run or
// session; roots are audited. A root changed since the server started is
// refused.
func (m *Sandboxes) Grant(a Ask, n Need) (*sandboxgrant.Grant, error) {
	g, err := m.grants.Issue(a.Backend, sandboxgrant.Spec{Roots: n.Roots, Target: host.RootsDir, Isolation: n.Isolation})
	var names []string
	for _, r := range n.Roots {
		names = append(names, r.Name)
	}
	d := map[string]any{"roots": names, "tool": a.Tool, "backend": a.Backend, "read_only": true}
	if a.Run != "" {
		d["run_id"] = a.Run
	}
	if err != nil {
		if errors.Is(err, hostroots.ErrChanged) {
			return nil, m.refuse.Refuse(a.Client, a.Session, a.Tool, refusal.New(hostroots.RuleChanged, "host_roots: %v", err), d)
		}
		return nil, err
	}
	if len(n.Roots) > 0 {
		d["mounted_at"] = targets(g)
		m.rec.Record(audit.Entry{Event: EventMount, SessionID: a.Internal, UserID: a.Client, Success: true, Severity: audit.Info, Details: d})
	}
	return g, nil
}

// Close ends g (nil: none).
func (m *Sandboxes) Close(g *sandboxgrant.Grant) { m.grants.Close(g) }

// SessionCheck refuses roots asked for on a later call of a session
// (created: this call started it) that its grant g does not hold.
func SessionCheck(g *sandboxgrant.Grant, asked []string, created bool, sessionID string) error {
	if created || len(asked) == 0 {
		return nil
	}
	var have []string
	if g != nil {
		have = g.Names()
	}
	for _, n := range asked {
		if !slices.Contains(have, n) {
			return refusal.New(RuleSession, "host_roots %s: session %q was started with %s, and a session's roots are mounted when its kernel starts: pass host_roots on a session's first call (destroy_session, then call again), copy the file in with import_file, or run this code without session_id",
				quotedList(asked), sessionID, describe(have))
		}
	}
	return nil
}

// Notice says where the run finds its roots, or that its backend did not
// mount them; "" for a grant without roots.
func Notice(g *sandboxgrant.Grant, backendName string) string {
	switch {
	case len(g.Names()) == 0:
		return ""
	case g.Mounted() == 0:
		return fmt.Sprintf("host roots %s were granted but the %s backend did not pass the grant to its sandbox, so nothing was mounted", strings.Join(g.Names(), ", "), backendName)
	}
	return "host roots mounted read-only: " + strings.Join(targets(g), ", ")
}

func targets(g *sandboxgrant.Grant) []string {
	var out []string
	for _, n := range g.Names() {
		out = append(out, n+" at "+g.Target(n))
	}
	return out
}

func describe(names []string) string {
	if len(names) == 0 {
		return "no host roots"
	}
	return "host roots " + strings.Join(names, ", ")
}

func quotedList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = refusal.Quoted(s)
	}
	return strings.Join(q, ", ")
}
