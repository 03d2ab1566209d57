package grant

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/approval"
	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/audit/audittest"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// endedMsg is an owner's refusal after an end: one message per rule.
func endedMsg(rule string) error {
	if rule == "closed" {
		return refusal.New(rule, "the run has ended")
	}
	return refusal.New(rule, "spent by %s", rule)
}

// A grant ends once, by its first rule, and refuses every use after that
// with its owner's error (or a default naming the rule).
func TestEnd(t *testing.T) {
	cases := []struct {
		name    string
		ended   func(string) error
		ends    []string
		first   []bool // what each End returned
		rule    string // EndedBy after
		wantErr string // Err after ("": nil)
	}{
		{"live", endedMsg, nil, nil, "", ""},
		{"closed", endedMsg, []string{"closed"}, []bool{true}, "closed", "the run has ended"},
		{"budget, then closed", endedMsg, []string{"budget", "closed"}, []bool{true, false}, "budget", "spent by budget"},
		{"closed twice", endedMsg, []string{"closed", "closed"}, []bool{true, false}, "closed", "the run has ended"},
		{"the owner's error, whatever the rule", func(string) error { return errors.New("the tool grant has ended") }, []string{"x"}, []bool{true}, "x", "the tool grant has ended"},
		{"no owner's error", nil, []string{"some-rule"}, []bool{true}, "some-rule", "the grant has ended (some-rule)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := New(Config{Rec: &audittest.Recorder{}, Ended: tc.ended})
			for i, r := range tc.ends {
				if got := g.End(r); got != tc.first[i] {
					t.Errorf("End(%q) #%d = %v, want %v", r, i, got, tc.first[i])
				}
			}
			if got := g.EndedBy(); got != tc.rule {
				t.Errorf("EndedBy = %q, want %q", got, tc.rule)
			}
			err := g.Err()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Err = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Errorf("Err = %v, want %q", err, tc.wantErr)
			}
			if _, err := g.Track(nopConn()); (err != nil) != (tc.wantErr != "") {
				t.Errorf("Track after the ends: %v", err)
			}
		})
	}
}

// nopConn is one end of a pipe nobody reads.
func nopConn() net.Conn {
	a, _ := net.Pipe()
	return a
}

// Tracked connections are cut by the rule that ends the grant; Track
// refuses past MaxConns and after the end.
func TestTrack(t *testing.T) {
	cases := []struct {
		name     string
		maxConns int
		track    int    // connections tracked
		untrack  int    // of them, untracked before the last Track
		wantLast error  // the last Track's error (after track, untrack)
		endBy    string // then End
	}{
		{"unbounded", 0, 40, 0, nil, "closed"},
		{"within the bound", 3, 2, 0, nil, "closed"},
		{"at the bound", 3, 3, 0, ErrTooMany, "budget"},
		{"room again once one ends", 3, 3, 1, nil, "budget"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := New(Config{Rec: &audittest.Recorder{}, MaxConns: tc.maxConns, Ended: endedMsg})
			var live []*Conn
			for range tc.track {
				c, err := g.Track(nopConn())
				if err != nil {
					t.Fatal(err)
				}
				live = append(live, c)
			}
			for _, c := range live[:tc.untrack] {
				g.Untrack(c)
				c.Close()
			}
			live = live[tc.untrack:]
			last, err := g.Track(nopConn())
			if !errors.Is(err, tc.wantLast) || (tc.wantLast == nil && err != nil) {
				t.Fatalf("last Track: %v, want %v", err, tc.wantLast)
			}
			if last != nil {
				live = append(live, last)
			}
			g.End(tc.endBy)
			for i, c := range live {
				if c.CutBy() != tc.endBy {
					t.Errorf("connection %d: cut by %q, want %q", i, c.CutBy(), tc.endBy)
				}
				if _, err := c.Write([]byte("x")); err == nil {
					t.Errorf("connection %d still writable after the end", i)
				}
			}
			if _, err := g.Track(nopConn()); err == nil || err.Error() != endedMsg(tc.endBy).Error() {
				t.Errorf("Track after the end: %v", err)
			}
		})
	}
}

// A connection keeps the first rule that cut it.
func TestCutKeepsFirstRule(t *testing.T) {
	c := &Conn{Conn: nopConn()}
	if c.CutBy() != "" {
		t.Fatalf("uncut connection cut by %q", c.CutBy())
	}
	c.Cut("budget")
	c.Cut("closed")
	if c.CutBy() != "budget" {
		t.Errorf("CutBy = %q, want budget", c.CutBy())
	}
}

// A time budget ends the grant by its rule, unless the grant ended first.
func TestEndAfter(t *testing.T) {
	cases := []struct {
		name   string
		after  time.Duration
		endBy  string // ended before the deadline ("": not)
		wantBy string
	}{
		{"the deadline passes", 10 * time.Millisecond, "", "duration"},
		{"ended first", time.Hour, "closed", "closed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := New(Config{Rec: &audittest.Recorder{}})
			c, err := g.Track(nopConn())
			if err != nil {
				t.Fatal(err)
			}
			g.EndAfter(tc.after, "duration")
			if tc.endBy != "" {
				g.End(tc.endBy)
			}
			deadline := time.Now().Add(5 * time.Second)
			for g.EndedBy() == "" && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if g.EndedBy() != tc.wantBy || c.CutBy() != tc.wantBy {
				t.Errorf("ended by %q, connection cut by %q; want %q", g.EndedBy(), c.CutBy(), tc.wantBy)
			}
		})
	}
}

// An approver answering as given, remembering the question.
func answering(approved, supported bool, err error, asked *string) approval.Approver {
	return func(_ context.Context, msg string) (bool, bool, error) {
		*asked = msg
		return approved, supported, err
	}
}

// Approve asks the current run's client and turns each answer but yes
// into the question's refusal (rule and message) or, when asking failed,
// an error that is not a refusal.
func TestApprove(t *testing.T) {
	q := Question{Text: "Allow?", Rule: "r-approval", CannotAsk: "cannot ask", Declined: "declined", Failed: "asking failed"}
	withNobody := q
	withNobody.Nobody = "nobody to ask"
	boom := errors.New("boom")
	cases := []struct {
		name     string
		q        Question
		nobody   bool // the run has no approver
		approved bool
		support  bool
		err      error
		wantMsg  string // "": approved
		refused  bool   // a *refusal.Error by q.Rule
	}{
		{"approved", q, false, true, true, nil, "", false},
		{"declined", q, false, false, true, nil, "declined", true},
		{"client cannot be asked", q, false, false, false, nil, "cannot ask", true},
		{"asking failed", q, false, false, true, boom, "asking failed: boom", false},
		{"no approver", q, true, false, false, nil, "cannot ask", true},
		{"no approver, its own message", withNobody, true, false, false, nil, "nobody to ask", true},
		{"an approver, Nobody unused", withNobody, false, false, true, nil, "declined", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var asked string
			g := New(Config{Rec: &audittest.Recorder{}, Run: Run{ID: "r1", Client: "c1"}})
			var ask approval.Approver
			if !tc.nobody {
				ask = answering(tc.approved, tc.support, tc.err, &asked)
			}
			g.BeginRun(Run{ID: "r2", Client: "c2", Approve: ask}) // the current run's client is asked
			err := g.Approve(context.Background(), tc.q)
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("Approve = %v, want nil", err)
				}
			} else if err == nil || err.Error() != tc.wantMsg {
				t.Fatalf("Approve = %v, want %q", err, tc.wantMsg)
			}
			var re *refusal.Error
			if got := errors.As(err, &re); got != tc.refused || (got && re.Rule != tc.q.Rule) {
				t.Errorf("refusal: %v (%+v), want %v by %s", got, re, tc.refused, tc.q.Rule)
			}
			if tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("the failure does not wrap its cause: %v", err)
			}
			if !tc.nobody && asked != "Allow?" {
				t.Errorf("asked %q", asked)
			}
		})
	}
}

// Every audit line names the grant's session, the current run's client
// and id, and its tenant when it has one; a failure is a warning.
func TestRecord(t *testing.T) {
	cases := []struct {
		name    string
		tenant  string
		run     *Run // BeginRun before recording (nil: the first run)
		ok      bool
		errText string
		d       map[string]any
		want    audit.Entry
	}{
		{"ok", "", nil, true, "", map[string]any{"hosts": "a"},
			audit.Entry{Event: "e", Severity: audit.Info, SessionID: "s", UserID: "c1", Success: true, Details: map[string]any{"hosts": "a", "run_id": "r1"}}},
		{"failed", "", nil, false, "refused", map[string]any{"rule": "x"},
			audit.Entry{Event: "e", Severity: audit.Warning, SessionID: "s", UserID: "c1", Error: "refused", Details: map[string]any{"rule": "x", "run_id": "r1"}}},
		{"tenant", "alice", nil, true, "", nil,
			audit.Entry{Event: "e", Severity: audit.Info, SessionID: "s", UserID: "c1", Success: true, Details: map[string]any{"run_id": "r1", "tenant": "alice"}}},
		{"the tenant the caller names stays", "", nil, true, "", map[string]any{"tenant": ""},
			audit.Entry{Event: "e", Severity: audit.Info, SessionID: "s", UserID: "c1", Success: true, Details: map[string]any{"run_id": "r1", "tenant": ""}}},
		{"a later run", "", &Run{ID: "r2", Client: "c2"}, true, "", nil,
			audit.Entry{Event: "e", Severity: audit.Info, SessionID: "s", UserID: "c2", Success: true, Details: map[string]any{"run_id": "r2"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &audittest.Recorder{}
			g := New(Config{Rec: rec, Session: "s", Tenant: tc.tenant, Run: Run{ID: "r1", Client: "c1"}})
			if tc.run != nil {
				g.BeginRun(*tc.run)
			}
			g.Record("e", tc.ok, tc.errText, tc.d)
			es := rec.Entries()
			if len(es) != 1 {
				t.Fatalf("%d lines", len(es))
			}
			if got, want := fmt.Sprintf("%+v", es[0]), fmt.Sprintf("%+v", tc.want); got != want {
				t.Errorf("line\n got %s\nwant %s", got, want)
			}
		})
	}
}

// failing is an audit log that cannot be written.
type failing struct{ audittest.Recorder }

func (*failing) Write(audit.Entry) error { return errors.New("disk full") }
func (*failing) Check() error            { return errors.New("disk full") }

func TestCheckAudit(t *testing.T) {
	for _, tc := range []struct {
		rec  audit.Recorder
		want string
	}{{&audittest.Recorder{}, ""}, {&failing{}, "disk full"}} {
		err := New(Config{Rec: tc.rec}).CheckAudit()
		if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && !strings.Contains(got, tc.want)) {
			t.Errorf("CheckAudit = %v, want %q", err, tc.want)
		}
	}
}
