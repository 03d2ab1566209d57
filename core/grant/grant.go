// Package grant is what every capability the core grants a run has in
// common — the tool bridge's grant (core/toolbridge), the network's
// (core/egress): the run it serves (its id, its client, who approves what
// is added to it), its life (live until it ends by a rule, the run's end or
// a spent budget, and refusing every use after that with its owner's
// error), the connections its sandbox holds (cut when it ends), the
// approval of what a run adds, and its audit lines. What a grant grants,
// and what each rule's refusal says, are its owner's.
package grant

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-forge/mcp-forge/core/approval"
	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// Run is the run a grant serves: a stateless run's grant serves one, a
// session's the session's current execute.
type Run struct {
	ID      string            // the audit lines' run_id
	Client  string            // the MCP client of the run: the audit lines' user_id
	Approve approval.Approver // asked to approve what the run adds; nil: nobody can be asked
}

// Config is what a grant is made of.
type Config struct {
	Rec     audit.Recorder // its audit lines
	Session string         // the audit lines' session_id ("" for a stateless run)
	Tenant  string         // the audit lines' tenant ("": none)
	Run     Run
	// Ended is the refusal of a use of the grant after it ended by rule
	// (nil: "the grant has ended (rule)").
	Ended func(rule string) error
	// MaxConns bounds the connections tracked at once (0: no bound).
	MaxConns int
}

// Grant is one grant's run, life, connections and audit. Make it with New.
type Grant struct {
	rec      audit.Recorder
	session  string
	tenant   string
	ended    func(rule string) error
	maxConns int

	mu    sync.Mutex
	run   Run
	rule  string // the rule that ended the grant ("" while it lives)
	timer *time.Timer
	conns map[*Conn]struct{}
}

// New is a live grant serving c.Run.
func New(c Config) *Grant {
	return &Grant{rec: c.Rec, session: c.Session, tenant: c.Tenant, ended: c.Ended, maxConns: c.MaxConns,
		run: c.Run, conns: map[*Conn]struct{}{}}
}

// Run is the run the grant serves now.
func (g *Grant) Run() Run {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.run
}

// BeginRun binds the grant to the next run (a session's next execute):
// its lines name that run and client, and its client approves.
func (g *Grant) BeginRun(r Run) {
	g.mu.Lock()
	g.run = r
	g.mu.Unlock()
}

// End ends the grant by rule: every tracked connection is cut by it and
// every later use refused. The first rule is kept; End reports whether
// this call ended the grant.
func (g *Grant) End(rule string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rule != "" {
		return false
	}
	g.rule = rule
	if g.timer != nil {
		g.timer.Stop()
	}
	for c := range g.conns {
		c.Cut(rule)
	}
	return true
}

// EndAfter ends the grant by rule once d has passed (a time budget).
func (g *Grant) EndAfter(d time.Duration, rule string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rule == "" && g.timer == nil {
		g.timer = time.AfterFunc(d, func() { g.End(rule) })
	}
}

// EndedBy is the rule that ended the grant, "" while it lives.
func (g *Grant) EndedBy() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rule
}

// Err is the refusal of a use of an ended grant, nil while it lives.
func (g *Grant) Err() error {
	if rule := g.EndedBy(); rule != "" {
		return g.refusal(rule)
	}
	return nil
}

func (g *Grant) refusal(rule string) error {
	if g.ended != nil {
		return g.ended(rule)
	}
	return refusal.New(rule, "the grant has ended (%s)", rule)
}

// ErrTooMany refuses a connection past Config.MaxConns.
var ErrTooMany = errors.New("too many connections of one grant")

// Track registers a connection of the grant's sandbox, so that the
// grant's end cuts it: an ended grant refuses it (Err), as does one
// holding MaxConns (ErrTooMany). Untrack it when it ends.
func (g *Grant) Track(c net.Conn) (*Conn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.rule != "":
		return nil, g.refusal(g.rule)
	case g.maxConns > 0 && len(g.conns) >= g.maxConns:
		return nil, ErrTooMany
	}
	t := &Conn{Conn: c}
	g.conns[t] = struct{}{}
	return t, nil
}

// Untrack forgets a connection that ended.
func (g *Grant) Untrack(c *Conn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

// Conn is a connection of a grant; Cut closes it and says why.
type Conn struct {
	net.Conn
	why atomic.Pointer[string]
}

// Cut closes the connection by rule (the first rule given is kept).
func (c *Conn) Cut(rule string) {
	c.why.CompareAndSwap(nil, &rule)
	_ = c.Conn.Close()
}

// CutBy is the rule that cut the connection, "" if none did.
func (c *Conn) CutBy() string {
	if p := c.why.Load(); p != nil {
		return *p
	}
	return ""
}

// Question is what the user of a run is asked to approve, and what each
// answer but yes becomes.
type Question struct {
	Text string // the question
	Rule string // the rule of the refusals
	// Nobody refuses when the run has no client that can be asked ("":
	// CannotAsk does).
	Nobody    string
	CannotAsk string // the client cannot be asked (no elicitation)
	Declined  string // the user said no
	// Failed is the error when asking failed: Failed, ": " and why (not a
	// refusal: the caller could not fix it).
	Failed string
}

// Approve asks the current run's client q: nil when the user approved, a
// *refusal.Error by q.Rule when not, or the error of asking.
func (g *Grant) Approve(ctx context.Context, q Question) error {
	ask := g.Run().Approve
	if ask == nil && q.Nobody != "" {
		return refusal.New(q.Rule, "%s", q.Nobody)
	}
	answer, err := approval.Ask(ctx, ask, q.Text)
	switch answer {
	case approval.Failed:
		return fmt.Errorf("%s: %w", q.Failed, err)
	case approval.CannotAsk:
		return refusal.New(q.Rule, "%s", q.CannotAsk)
	case approval.Declined:
		return refusal.New(q.Rule, "%s", q.Declined)
	}
	return nil
}

// Record writes an audit line of the grant: session_id the grant's
// session and user_id its run's client; info when ok, else a warning with
// errText; d gets the run's id (run_id) and, when the grant has one, its
// tenant.
func (g *Grant) Record(event string, ok bool, errText string, d map[string]any) {
	run := g.Run()
	if d == nil {
		d = map[string]any{}
	}
	d["run_id"] = run.ID
	if g.tenant != "" {
		d["tenant"] = g.tenant
	}
	sev := audit.Info
	if !ok {
		sev = audit.Warning
	}
	g.rec.Record(audit.Entry{Event: event, Severity: sev, SessionID: g.session, UserID: run.Client, Success: ok, Error: errText, Details: d})
}

// CheckAudit fails while the grant's audit lines cannot be written: a
// grant then does nothing nobody could trace.
func (g *Grant) CheckAudit() error { return audit.Check(g.rec) }
