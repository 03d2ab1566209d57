package session

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

func rule(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var re *refusal.Error
	if !errors.As(err, &re) {
		t.Fatalf("not a refusal: %v", err)
	}
	return re.Rule
}

func add(t *testing.T, r *Registry, owner, id string) *Session {
	t.Helper()
	s, created, err := r.Acquire(owner, id, func(Admission) (*Session, error) {
		return &Session{ID: id, Client: owner, Internal: InternalID(owner, id), Backend: "k", State: StateIdle, LastActive: time.Now(), Docs: map[string]string{}}, nil
	})
	if err != nil || !created {
		t.Fatalf("add %s/%s: %v %v", owner, id, created, err)
	}
	return s
}

// Internal ids are valid workspace ids, stable, distinct per owner, and
// keep a readable prefix of the user's id.
func TestInternalID(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 48)
	for _, c := range []struct{ owner, id string }{{"a", "main"}, {"tenant:bob", "main"}, {"conn-1", long}, {"conn-1", strings.Repeat("y", 128)}, {"", "0"}} {
		in := InternalID(c.owner, c.id)
		if err := workspace.CheckSessionID(in); err != nil || len(in) > 48 {
			t.Errorf("InternalID(%q, %q) = %q (%d): %v", c.owner, c.id, in, len(in), err)
		}
		if InternalID(c.owner, c.id) != in {
			t.Errorf("InternalID(%q, %q) is not stable", c.owner, c.id)
		}
	}
	if InternalID("a", "main") == InternalID("b", "main") || InternalID("a", long+"1") == InternalID("a", long+"2") {
		t.Error("two sessions share an internal id")
	}
	if !strings.HasPrefix(InternalID("conn-1", "main"), "main-") {
		t.Error(InternalID("conn-1", "main"))
	}
}

// Acquire finds an owner's session, admits a new one under the lock with
// what the table holds, and returns admit's refusal as it is.
func TestAcquire(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	a := add(t, r, "alice", "main")
	add(t, r, "alice", "other")
	add(t, r, "bob", "main")
	s, created, err := r.Acquire("alice", "main", func(Admission) (*Session, error) { t.Fatal("admit called for a live session"); return nil, nil })
	if s != a || created || err != nil {
		t.Fatalf("Acquire of a live session: %p %v %v", s, created, err)
	}
	var seen Admission
	full := refusal.New(RuleSessionsMax, "full")
	if _, _, err := r.Acquire("alice", "third", func(a Admission) (*Session, error) { seen = a; return nil, full }); err != full {
		t.Fatalf("admit's error: %v", err)
	}
	if d := cmp.Diff(Admission{Open: 3, Owned: []string{"main", "other"}}, seen); d != "" {
		t.Errorf("admission (-want +got):\n%s", d)
	}
	if r.Live("alice", "third") {
		t.Error("a refused session is in the table")
	}
	if r.Get("carol", "main") != nil || !r.Live("bob", "main") {
		t.Error("sessions are not per owner")
	}
	r.Drop(a)
	if r.Live("alice", "main") || a.State != StateGone || !r.Holds(InternalID("bob", "main")) || r.Holds(a.Internal) {
		t.Errorf("after Drop: live %v, state %s", r.Live("alice", "main"), a.State)
	}
}

// Concurrent Acquires of one id admit one session.
func TestAcquireOnce(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, c, _ := r.Acquire("o", "s", func(Admission) (*Session, error) { return &Session{ID: "s", Client: "o"}, nil })
			if c {
				mu.Lock()
				created++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if created != 1 {
		t.Fatalf("%d sessions created for one id", created)
	}
}

func TestListAndView(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	b := add(t, r, "o", "b")
	add(t, r, "o", "a")
	add(t, r, "p", "a")
	r.Update(b, func(s *Session) {
		s.Variables = []backend.Variable{{Name: "x"}, {Name: "y"}}
		s.Docs["x"] = "the x"
	})
	var ids []string
	for _, v := range r.List("o", false) {
		ids = append(ids, v.ID)
		if v.Variables != nil {
			t.Errorf("%s: a listing carries variables", v.ID)
		}
	}
	if d := cmp.Diff([]string{"a", "b"}, ids); d != "" {
		t.Errorf("o's sessions (-want +got):\n%s", d)
	}
	if n := len(r.List("o", true)); n != 3 {
		t.Errorf("all sessions: %d", n)
	}
	v := r.View(b)
	if d := cmp.Diff([]string{"y"}, v.Undocumented); d != "" || v.Documented["x"] != "the x" {
		t.Errorf("undocumented (-want +got):\n%s; documented %v", d, v.Documented)
	}
	v.Documented["x"] = "changed"
	if b.Docs["x"] != "the x" {
		t.Error("a view shares the session's documentation")
	}
	if got := r.List("nobody", false); got == nil || len(got) != 0 {
		t.Errorf("no sessions: %#v, want an empty list", got)
	}
}

func TestDocument(t *testing.T) {
	t.Parallel()
	note := "n"
	long := strings.Repeat("d", MaxDocBytes+1)
	bigNote := strings.Repeat("n", MaxNoteBytes+1)
	for _, c := range []struct {
		name string
		vars map[string]string
		note *string
		want string
	}{
		{"fine", map[string]string{"x": "d"}, &note, ""},
		{"empty name", map[string]string{"": "d"}, nil, RuleVariableName},
		{"long name", map[string]string{strings.Repeat("v", 201): "d"}, nil, RuleVariableName},
		{"long description", map[string]string{"x": long}, nil, RuleStateDocsSize},
		{"long note", nil, &bigNote, RuleStateDocsSize},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := rule(t, CheckDocs(c.vars, c.note)); got != c.want {
				t.Fatalf("CheckDocs: rule %q, want %q", got, c.want)
			}
		})
	}

	r := NewRegistry()
	s := add(t, r, "o", "s")
	many := map[string]string{}
	for i := range MaxDocsVariables {
		many[strings.Repeat("v", i+1)] = "d"
	}
	if err := r.Document(s, many, &note, false); err != nil {
		t.Fatal(err)
	}
	if got := rule(t, r.Document(s, map[string]string{"one-more": "d"}, nil, false)); got != RuleStateDocsSize || len(s.Docs) != MaxDocsVariables {
		t.Fatalf("one over the bound: rule %q, %d documented", got, len(s.Docs))
	}
	// An empty description removes one, which makes room; clear starts over.
	if err := r.Document(s, map[string]string{"v": "", "one-more": "d"}, nil, false); err != nil || len(s.Docs) != MaxDocsVariables || s.Note != "n" {
		t.Fatalf("swap: %v, %d documented, note %q", err, len(s.Docs), s.Note)
	}
	if err := r.Document(s, map[string]string{"x": "d"}, nil, true); err != nil || len(s.Docs) != 1 || s.Note != "" {
		t.Fatalf("clear: %v, %v, note %q", err, s.Docs, s.Note)
	}
}

// The reaper takes idle sessions only: not busy, starting or recently used
// ones, nor one used between its scan and its turn.
func TestReapIdle(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	old := time.Now().Add(-time.Hour)
	for _, c := range []struct{ id, state string }{{"idle", StateIdle}, {"dead", StateDead}, {"busy", StateBusy}, {"starting", StateStarting}} {
		s := add(t, r, "o", c.id)
		r.Update(s, func(s *Session) { s.State, s.LastActive = c.state, old })
	}
	add(t, r, "o", "fresh")
	used := add(t, r, "o", "used")
	r.Update(used, func(s *Session) { s.LastActive = old })
	used.Lock() // a call holds it while the reaper scans
	var reaped []string
	done := make(chan int)
	go func() {
		done <- r.ReapIdle(time.Minute, func(s *Session) { reaped = append(reaped, s.ID); r.Drop(s) })
	}()
	time.Sleep(20 * time.Millisecond)
	r.Touch(used)
	used.Unlock()
	n := <-done
	slices.Sort(reaped)
	if d := cmp.Diff([]string{"dead", "idle"}, reaped); d != "" || n != 2 {
		t.Fatalf("reaped %d (-want +got):\n%s", n, d)
	}
}

func TestMarkBackendDeadAndStarts(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	s := add(t, r, "o", "s")
	other := add(t, r, "o", "t")
	r.Update(other, func(s *Session) { s.Backend = "other" })
	r.MarkBackendDead("k")
	if r.State(s) != StateDead || !strings.Contains(s.LostReason, "k plugin crashed") || r.State(other) != StateIdle {
		t.Fatalf("%s %q / %s", s.State, s.LostReason, other.State)
	}
	r.CountStart("k", true, 1500*time.Microsecond)
	r.CountStart("k", false, 2*time.Millisecond)
	r.CountStart("k", false, 3*time.Millisecond)
	want := map[string]Starts{"k": {Warm: 1, Cold: 2, LastWarmMS: 1.5, LastColdMS: 3}}
	if d := cmp.Diff(want, r.StartStats()); d != "" {
		t.Fatalf("starts (-want +got):\n%s", d)
	}
}

func TestCheckID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{"main": "", "a_b-1": "", strings.Repeat("x", 49): "", strings.Repeat("x", 128): "",
		"../x": RuleSessionID, "": RuleSessionID, strings.Repeat("x", 129): RuleSessionID, "a~b": RuleSessionID, "a.b": RuleSessionID, "-a": RuleSessionID} {
		if got := rule(t, CheckID(id)); got != want {
			t.Errorf("CheckID(%q): rule %q, want %q", id, got, want)
		}
	}
	if err := NotFound("s"); rule(t, err) != RuleSessionNotFound || !errors.Is(err, ErrNoSession) {
		t.Errorf("NotFound: %v", err)
	}
}

// What each client holds is counted, and every session added or dropped
// is told (a tenant's quota shared across replicas); a refused admission
// and a second drop change nothing.
func TestPerClient(t *testing.T) {
	r := NewRegistry()
	changes := 0
	r.OnChange(func() { changes++ })
	a := add(t, r, "alice", "a")
	add(t, r, "alice", "b")
	add(t, r, "bob", "a")
	if _, _, err := r.Acquire("bob", "c", func(Admission) (*Session, error) { return nil, errors.New("full") }); err == nil {
		t.Fatal("admitted")
	}
	if got := r.PerClient(); got["alice"] != 2 || got["bob"] != 1 || len(got) != 2 {
		t.Errorf("per client %v", got)
	}
	r.Drop(a)
	r.Drop(a)
	if got := r.PerClient(); got["alice"] != 1 || changes != 4 {
		t.Errorf("per client %v after a drop, %d changes told (want 4)", got, changes)
	}
}
