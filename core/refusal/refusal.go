// Package refusal is the error of a request the caller can fix: a rule it
// broke and what to do. The engine and the packages it splits its work
// into (route, session, checkpoint) refuse with it; the engine audits each
// refusal with its rule, the MCP layer shows it as a tool error. It
// imports nothing of the core.
package refusal

import "fmt"

// Error is a refused request: the caller can fix it. Rule names the rule
// for the audit log.
type Error struct {
	Rule string
	Msg  string
	// Err is a sentinel callers test with errors.Is (engine.ErrNoSession,
	// tenant.ErrQuota), or the cause a layer above acts on (the
	// *runtime.HeldError of rule session-held, which names the replica
	// core/forward passes the call to), or nil.
	Err error
	// Audit replaces Msg in the audit log: when Msg names something that
	// may be a secret (an environment variable's name), or says more than
	// the audit line's rule and details do.
	Audit string
	// Details are what the audit line adds to the rule: the package
	// refused and the pattern that refused it, say.
	Details map[string]any
}

// AuditText is what the audit log says of the refusal.
func (e *Error) AuditText() string {
	if e.Audit != "" {
		return e.Audit
	}
	return e.Msg
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error { return e.Err }

// New is a refusal by rule with a formatted message.
func New(rule, format string, args ...any) error {
	return &Error{Rule: rule, Msg: fmt.Sprintf(format, args...)}
}

// Quoted shows a name the caller sent, cut so that a refusal stays short.
func Quoted(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q… (%d bytes)", s[:64], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// Cut is s as Quoted cuts it, unquoted: for an audit detail.
func Cut(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%s… (%d bytes)", s[:64], len(s))
	}
	return s
}
