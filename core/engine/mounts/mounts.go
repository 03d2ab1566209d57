// Package mounts grants runs and sessions the host roots they ask for
// (execute_<language>'s host_roots): the user's own directories
// ([volumes.host_roots]) mounted read-only into the sandbox, so code reads
// a large file where it lies and its bytes never pass through MCP. The
// grant is a token the backend copies into its container's intent; the
// core alone turns it into mounts (core/hostsvc).
package mounts

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/hostroots"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Rules of host_roots refusals (besides hostroots.RuleUnknown).
const (
	// RuleUnavailable: no roots, or a runtime or backend that cannot
	// mount them.
	RuleUnavailable = "host-root-unavailable"
	// RuleSession: a later call of a session asks for roots it was not
	// started with (mounts are fixed when its container starts).
	RuleSession = "host-root-session"
)

// EventMount is the audit line of roots granted to a run or session.
const EventMount = "files.host_mount"

// maxRoots bounds the roots one call names.
const maxRoots = 16

// Refuser audits a refusal with its rule and returns it (engine.Engine.Refuse).
type Refuser interface {
	Refuse(client, sessionID, tool string, err error, details map[string]any) error
}

// Mounts grants host roots. A nil *Mounts (no roots configured) refuses
// every request for one.
type Mounts struct {
	roots  *hostroots.Roots
	rec    audit.Recorder
	refuse Refuser
	// claimsOnly: the runtime's sandboxes cannot mount a directory of the
	// server's machine (a cluster's pods), only a root's claim.
	claimsOnly bool
}

// New grants roots rs, audited by rec, refusals by r. claimsOnly: the
// runtime mounts only roots with a claim (volumes.host_roots.*.claim).
func New(rs *hostroots.Roots, rec audit.Recorder, r Refuser, claimsOnly bool) *Mounts {
	return &Mounts{roots: rs, rec: rec, refuse: r, claimsOnly: claimsOnly}
}

// Ask is a call's host_roots.
type Ask struct {
	Roots           []string
	Client, Session string // Session: the caller's id, "" for a stateless run
	Internal        string // the session's internal id, for the audit line
	Run, Tool       string
	Backend         string
	// BackendMounts: the backend passes roots grants on
	// (backend.Capabilities.HostRoots).
	BackendMounts bool
}

// Resolve checks what a call asks for before anything runs: nil when it
// asks for nothing, else the roots, or a refusal (the caller audits it).
func (m *Mounts) Resolve(a Ask) ([]*hostroots.Root, error) {
	if len(a.Roots) == 0 {
		return nil, nil
	}
	names := slices.Compact(slices.Sorted(slices.Values(a.Roots)))
	var err error
	switch {
	case m == nil:
		err = refusal.New(RuleUnavailable, "host_roots %s: this server has no host roots (volumes.host_roots): send the file with input_files or upload_file", quotedList(names))
	case !a.BackendMounts:
		err = refusal.New(RuleUnavailable, "host_roots %s: the %s backend does not mount host roots (its plugin does not report the capability): use another backend, or import_file", quotedList(names), a.Backend)
	case len(names) > maxRoots:
		err = refusal.New(RuleUnavailable, "host_roots names %d roots; at most %d", len(names), maxRoots)
	}
	var out []*hostroots.Root
	for _, n := range names {
		if err != nil {
			break
		}
		var r *hostroots.Root
		r, gerr := m.roots.Get(a.Client, n, false)
		switch {
		case gerr != nil:
			err = refusal.New(hostroots.RuleUnknown, "host_roots: %v", gerr)
		case m.claimsOnly && r.Claim == "":
			err = refusal.New(RuleUnavailable, "host_roots %s: this server's sandboxes are pods of a cluster, which mount a root only from its PersistentVolumeClaim, and this root names none (volumes.host_roots.%s.claim); copy the files in with import_file instead", refusal.Quoted(n), n)
		default:
			out = append(out, r)
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Grant issues roots (from Resolve) to a's backend for its run or
// session, audited. A root changed since the server started is refused.
func (m *Mounts) Grant(a Ask, roots []*hostroots.Root) (*hostroots.Grant, error) {
	g, err := m.roots.Issue(a.Backend, host.RootsDir, roots)
	var names []string
	for _, r := range roots {
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
	d["mounted_at"] = targets(g)
	m.rec.Record(audit.Entry{Event: EventMount, SessionID: a.Internal, UserID: a.Client, Success: true, Severity: audit.Info, Details: d})
	return g, nil
}

// Close ends g (nil: none).
func (m *Mounts) Close(g *hostroots.Grant) {
	if m != nil {
		m.roots.Close(g)
	}
}

// SessionCheck refuses roots asked for on a later call of a session
// (created: this call started it) that its grant g does not hold.
func SessionCheck(g *hostroots.Grant, asked []string, created bool, sessionID string) error {
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
// mount them.
func Notice(g *hostroots.Grant, backendName string) string {
	if g.Mounted() == 0 {
		return fmt.Sprintf("host roots %s were granted but the %s backend did not pass the grant to its sandbox, so nothing was mounted", strings.Join(g.Names(), ", "), backendName)
	}
	return "host roots mounted read-only: " + strings.Join(targets(g), ", ")
}

func targets(g *hostroots.Grant) []string {
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
