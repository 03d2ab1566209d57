package handover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/enginerig"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// heldBy is the replica a refusal names as serving its session, as
// core/forward reads it.
func heldBy(err error) string {
	var held *runtime.HeldError
	if !errors.As(err, &held) {
		return ""
	}
	return held.By
}

// cluster is a session store shared by replicas, as the Kubernetes runtime
// keeps it: records by internal id, the replica serving each container,
// which replicas are alive and which containers were handed over.
type cluster struct {
	mu       sync.Mutex
	records  map[string]runtime.SessionRecord // internal id → record
	ctrOf    map[string]string                // internal id → container
	holder   map[string]string                // container → replica
	dead     map[string]bool                  // replica → gone
	released map[string]bool                  // container → handed over
}

func newCluster() *cluster {
	return &cluster{records: map[string]runtime.SessionRecord{}, ctrOf: map[string]string{}, holder: map[string]string{}, dead: map[string]bool{}, released: map[string]bool{}}
}

// replicaStore is one replica's view of the cluster (runtime.SessionStore).
type replicaStore struct {
	c       *cluster
	name    string
	owns    int    // OwnsSession calls
	claimed func() // when set, runs before each claim (a slow API server)
}

func (s *replicaStore) RecordSession(_ context.Context, ctr string, r runtime.SessionRecord) error {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.records[r.Internal], s.c.ctrOf[r.Internal], s.c.holder[ctr] = r, ctr, s.name
	return nil
}

func (s *replicaStore) FindSession(_ context.Context, internal string) (runtime.SessionRecord, string, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	r, ok := s.c.records[internal]
	if !ok {
		return runtime.SessionRecord{}, "", runtime.ErrNoRecord
	}
	return r, s.c.ctrOf[internal], nil
}

func (s *replicaStore) ClaimSession(_ context.Context, ctr string) error {
	if s.claimed != nil {
		s.claimed()
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if h := s.c.holder[ctr]; h != s.name && !s.c.dead[h] && !s.c.released[ctr] {
		return &runtime.HeldError{By: h}
	}
	s.c.holder[ctr], s.c.released[ctr] = s.name, false
	return nil
}

func (s *replicaStore) Holder(_ context.Context, ctr string) (string, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if h := s.c.holder[ctr]; h != s.name && !s.c.dead[h] && !s.c.released[ctr] {
		return h, nil
	}
	return "", nil
}

func (s *replicaStore) OwnsSession(_ context.Context, ctr string) (bool, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.owns++
	return s.c.holder[ctr] == s.name && !s.c.released[ctr], nil
}

func (s *replicaStore) Forget(string) {}

func (s *replicaStore) ReleaseAll(context.Context) (int, error) { return 0, nil }

func (s *replicaStore) Successors(context.Context) (int, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	n := 0
	for _, r := range []string{"a", "b"} {
		if r != s.name && !s.c.dead[r] {
			n++
		}
	}
	return n, nil
}

func (s *replicaStore) ReleaseSession(_ context.Context, ctr string) error {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.released[ctr] = true
	return nil
}

// fakeHosts records what the engine asks of the host services.
type fakeHosts struct {
	mu      sync.Mutex
	events  []string
	stopped map[string]bool // containers whose kernel stopped
}

func (h *fakeHosts) event(e string) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

func (h *fakeHosts) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

func (h *fakeHosts) Endpoints(plugin, ctr string) (string, []runtime.SessionEndpoint, bool) {
	return strings.TrimPrefix(ctr, "ctr-"), []runtime.SessionEndpoint{{Name: "shell", Path: "/k/shell"}}, true
}

func (h *fakeHosts) Adopt(plugin, ctr, ws string, eps []runtime.SessionEndpoint) error {
	h.event("adopt " + plugin + " " + ctr + " " + eps[0].Path)
	return nil
}

func (h *fakeHosts) Release(plugin, ctr string) { h.event("release " + plugin + " " + ctr) }

func (h *fakeHosts) Running(_ context.Context, plugin, ctr string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.stopped[ctr], nil
}

func (h *fakeHosts) Remove(_ context.Context, plugin, ctr string) error {
	h.event("remove " + plugin + " " + ctr)
	return nil
}

type replica struct {
	*rig
	store *replicaStore
	hosts *fakeHosts
}

func newReplica(t *testing.T, c *cluster, name string) replica {
	r := newRig(t, nil, func(r *enginerig.Rig) { r.Kernel.Resumable = true })
	st, h := &replicaStore{c: c, name: name}, &fakeHosts{}
	r.e.SetSessionStore(st, h)
	return replica{rig: r, store: st, hosts: h}
}

// events are the audit lines of one event, as "event:success".
func events(r replica, event string) []string {
	var out []string
	for _, e := range r.Audit() {
		if e.Event == event {
			out = append(out, fmt.Sprintf("%s:%t", e.Event, e.Success))
		}
	}
	return out
}

// A session opened on one replica is recorded; another replica refuses it
// while the first serves it, takes it over (resuming the same kernel, no
// new one) once the first is gone, and the first then refuses it as moved
// without touching the kernel. Another client's id is never taken over,
// and a graceful stop hands a session over instead of closing it.
func TestHandover(t *testing.T) {
	c := newCluster()
	a, b := newReplica(t, c, "a"), newReplica(t, c, "b")
	internal := session.InternalID("c1", "s1")
	if _, err := a.Exec(t, engine.Request{Language: "python", SessionID: "s1", Code: "x = 1"}); err != nil {
		t.Fatal(err)
	}
	rec, ctr, err := a.store.FindSession(context.Background(), internal)
	if err != nil || ctr != "ctr-"+internal || rec.Client != "c1" || rec.ID != "s1" || rec.Backend != "kernel" || string(rec.Resume) != "state of "+internal {
		t.Fatalf("record %+v in %q: %v", rec, ctr, err)
	}

	// Served by a live replica: refused, nothing opened; the refusal names
	// the replica, where the HTTP transport forwards the call
	// (core/forward).
	_, err = b.Exec(t, engine.Request{Language: "python", SessionID: "s1", Code: "x"})
	if rule := refusedBy(t, err); rule != RuleSessionHeld {
		t.Fatalf("rule %s: %v", rule, err)
	}
	if by := heldBy(err); by != "a" {
		t.Fatalf("the refusal names %q as the replica serving the session, want a", by)
	}
	if len(b.Kernel.Events) != 0 {
		t.Fatalf("the second replica's plugin was asked: %v", b.Kernel.Events)
	}
	// Who serves it, asked before anything is admitted (core/forward).
	if by := b.e.HeldElsewhere(context.Background(), "c1", "s1"); by != "a" {
		t.Fatalf("held elsewhere: %q, want a", by)
	}
	if by := a.e.HeldElsewhere(context.Background(), "c1", "s1"); by != "" {
		t.Fatalf("a serves it, yet holds it elsewhere: %q", by)
	}
	if by := b.e.HeldElsewhere(context.Background(), "c2", "s1"); by != "" {
		t.Fatalf("another client's s1 held elsewhere: %q", by)
	}
	// A destroy reaching b is refused (and forwarded over HTTP), not
	// taken for the destroy of a session that is only a checkpoint.
	err = b.e.DestroySession(context.Background(), "c1", "s1")
	if rule := refusedBy(t, err); rule != RuleSessionHeld || heldBy(err) != "a" {
		t.Fatalf("destroy through b: rule %s, held by %q", rule, heldBy(err))
	}
	if !a.e.sessions.Live("c1", "s1") {
		t.Fatal("the session is gone from a")
	}

	// The first replica dies: the second resumes its kernel.
	c.dead["a"] = true
	if _, err := b.Exec(t, engine.Request{Language: "python", SessionID: "s1", Code: "x"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"resume " + internal + " ctr-" + internal + " state of " + internal, "exec " + internal}; !slices.Equal(b.Kernel.Events, want) {
		t.Fatalf("plugin events %v, want %v", b.Kernel.Events, want)
	}
	if want := []string{"adopt kernel ctr-" + internal + " /k/shell"}; !slices.Equal(b.hosts.seen(), want) {
		t.Fatalf("hosts %v", b.hosts.seen())
	}
	if got := events(b, audit.SessionAdopt); !slices.Equal(got, []string{"session.adopt:false", "session.adopt:false", "session.adopt:true"}) { // the exec, the destroy, the takeover
		t.Fatalf("audit %v", got)
	}
	// Each later call confirms ownership once.
	before := b.store.owns
	b.Exec(t, engine.Request{Language: "python", SessionID: "s1", Code: "x"})
	if b.store.owns != before+1 {
		t.Fatalf("%d ownership checks for one call", b.store.owns-before)
	}

	// The first replica (say, it was only cut off) no longer serves it:
	// not even a destroy reaches the kernel from there.
	c.dead["a"] = false
	err = a.e.DestroySession(context.Background(), "c1", "s1")
	if rule := refusedBy(t, err); rule != RuleSessionMoved {
		t.Fatalf("rule %s: %v", rule, err)
	}
	if !slices.ContainsFunc(a.Audit(), func(e audit.Entry) bool {
		return e.Event == engine.EventRefused && e.Details["rule"] == RuleSessionMoved
	}) {
		t.Fatal("the refusal of a session moved away is not audited with its rule")
	}
	if want := []string{"release kernel ctr-" + internal}; !slices.Equal(a.hosts.seen(), want) {
		t.Fatalf("hosts of the replica that lost it: %v", a.hosts.seen())
	}
	if a.e.sessions.Get("c1", "s1") != nil {
		t.Fatal("the replica that lost the session still lists it")
	}

	// Another client's session of the same id is its own.
	if _, err := b.Exec(t, engine.Request{Language: "python", SessionID: "s1", Client: "c2"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(b.Kernel.Events, "open "+session.InternalID("c2", "s1")) {
		t.Fatalf("events %v", b.Kernel.Events)
	}

	// A graceful stop hands the sessions over: no kernel is closed.
	b.e.CloseAll(context.Background())
	for _, e := range b.Kernel.Events {
		if strings.HasPrefix(e, "close") {
			t.Fatalf("a handed-over session's kernel was closed: %v", b.Kernel.Events)
		}
	}
	if !c.released["ctr-"+internal] {
		t.Fatal("not released")
	}
	if got := events(b, audit.SessionHandover); len(got) != 2 {
		t.Fatalf("handover audit %v", got)
	}
	// ...and the other replica takes it at once, though b lives.
	if _, err := a.Exec(t, engine.Request{Language: "python", SessionID: "s1", Code: "x"}); err != nil {
		t.Fatal(err)
	}
}

// A record that names another client is not followed (audited as a
// violation); a kernel that cannot be reached again is removed with the
// state lost, and a plugin that cannot resume hands the session back.
func TestHandoverFailures(t *testing.T) {
	c := newCluster()
	a, b := newReplica(t, c, "a"), newReplica(t, c, "b")
	for _, id := range []string{"s1", "s2", "s3"} {
		if _, err := a.Exec(t, engine.Request{Language: "python", SessionID: id}); err != nil {
			t.Fatal(err)
		}
	}
	c.dead["a"] = true
	forged := c.records[session.InternalID("c1", "s1")]
	forged.Client = "mallory"
	c.records[session.InternalID("c1", "s1")] = forged
	if _, err := b.Exec(t, engine.Request{Language: "python", SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(b.Kernel.Events, "open "+session.InternalID("c1", "s1")) {
		t.Fatalf("a forged record was followed: %v", b.Kernel.Events)
	}
	if got := events(b, audit.SecurityViolation); len(got) != 1 {
		t.Fatalf("violations %v", got)
	}

	// The kernel's container stopped: the state is lost, the container goes.
	b.hosts.stopped = map[string]bool{"ctr-" + session.InternalID("c1", "s2"): true}
	b.Kernel.ResumeErr = &host.Error{Kind: host.KindUnavailable, Message: "the kernel's container has stopped"}
	_, err := b.Exec(t, engine.Request{Language: "python", SessionID: "s2"})
	if err == nil || !strings.Contains(err.Error(), "its state is lost") {
		t.Fatalf("lost kernel: %v", err)
	}
	if !slices.Contains(b.hosts.seen(), "remove kernel ctr-"+session.InternalID("c1", "s2")) {
		t.Fatalf("hosts %v", b.hosts.seen())
	}

	// A kernel that runs but did not answer (busy with a long cell), or a
	// plugin that failed: handed back for a later call, never removed.
	for _, fail := range []error{&host.Error{Kind: host.KindUnavailable, Message: "the running kernel did not answer"}, errors.New("plugin busy")} {
		b.Kernel.ResumeErr = fail
		_, err = b.Exec(t, engine.Request{Language: "python", SessionID: "s3"})
		if err == nil || !strings.Contains(err.Error(), "retry") {
			t.Fatalf("failed resume: %v", err)
		}
		ctr := "ctr-" + session.InternalID("c1", "s3")
		if !c.released[ctr] || !slices.Contains(b.hosts.seen(), "release kernel "+ctr) || slices.Contains(b.hosts.seen(), "remove kernel "+ctr) {
			t.Fatalf("%v: not handed back: %v %v", fail, c.released, b.hosts.seen())
		}
		if b.e.sessions.Get("c1", "s3") != nil {
			t.Fatal("a session that was not taken over is listed")
		}
	}
	// ...and taken over by the next call once the kernel answers.
	b.Kernel.ResumeErr = nil
	if _, err := b.Exec(t, engine.Request{Language: "python", SessionID: "s3"}); err != nil {
		t.Fatal(err)
	}
}

// A destroy that arrives while a session is being taken over waits for
// the takeover, then closes the kernel it resumed: nothing comes back.
func TestDestroyDuringTakeover(t *testing.T) {
	defer func(g time.Duration) { engine.ClaimGrace = g }(engine.ClaimGrace)
	engine.ClaimGrace = 10 * time.Millisecond
	c := newCluster()
	a, b := newReplica(t, c, "a"), newReplica(t, c, "b")
	if _, err := a.Exec(t, engine.Request{Language: "python", SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	c.dead["a"] = true
	gate := make(chan struct{})
	b.store.claimed = func() { <-gate }
	execDone := make(chan error, 1)
	go func() { _, err := b.Exec(t, engine.Request{Language: "python", SessionID: "s1"}); execDone <- err }()
	for b.e.sessions.Get("c1", "s1") == nil {
		time.Sleep(time.Millisecond)
	}
	destroyed := make(chan error, 1)
	go func() { destroyed <- b.e.DestroySession(context.Background(), "c1", "s1") }()
	time.Sleep(50 * time.Millisecond) // past engine.ClaimGrace: a destroy would close the kernel now
	close(gate)
	if err := <-destroyed; err != nil {
		t.Fatal(err)
	}
	// It ran before the destroy, or found the session it took over gone:
	// never a new session in its place.
	if err := <-execDone; err != nil && !strings.Contains(err.Error(), "destroyed while this call waited") {
		t.Fatalf("the call that took the session over: %v", err)
	}
	// Whichever came first, the kernel resumed is the one closed, last.
	internal := session.InternalID("c1", "s1")
	ev := withoutInterrupts(b.Kernel.Events)
	if len(ev) < 2 || ev[0] != "resume "+internal+" ctr-"+internal+" state of "+internal || ev[len(ev)-1] != "close "+internal {
		t.Fatalf("plugin events %v: want the resume first and the close last", b.Kernel.Events)
	}
	if b.e.sessions.Get("c1", "s1") != nil {
		t.Fatal("the destroyed session is listed")
	}
}

func withoutInterrupts(events []string) []string {
	return slices.DeleteFunc(slices.Clone(events), func(e string) bool { return strings.HasPrefix(e, "interrupt") })
}
