package tenant

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/audit/audittest"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
)

func registry(t *testing.T, keys map[string]string, q config.Quotas, over map[string]config.Tenant) *Registry {
	t.Helper()
	cfg := config.Default()
	if q.MaxRequestsInFlight == 0 {
		q.MaxRequestsInFlight = 1000
	}
	cfg.Quotas = q
	for name, key := range keys {
		tc := over[name]
		tc.APIKeySHA256 = []string{HashKey(key)}
		cfg.Tenants[name] = tc
	}
	if errs := config.Validate(cfg); len(errs) > 0 {
		t.Fatal(errs)
	}
	return New(cfg)
}

func TestNewKeyHashes(t *testing.T) {
	k1, h1, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, _, _ := NewKey()
	if k1 == k2 || !strings.HasPrefix(k1, KeyPrefix) || len(k1) < 40 {
		t.Fatalf("keys %q %q", k1, k2)
	}
	if h1 != HashKey(k1) || len(h1) != 64 {
		t.Fatalf("hash %q", h1)
	}
	// The value printed by `sha256sum` of the key without a newline.
	if got := HashKey("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("HashKey(abc) = %s", got)
	}
}

func TestVerify(t *testing.T) {
	r := registry(t, map[string]string{"alice": "ka", "bob": "kb"}, config.Default().Quotas, nil)
	if !r.Authenticated() {
		t.Fatal("tenants with keys must require authentication")
	}
	for key, want := range map[string]string{"ka": "alice", "kb": "bob"} {
		ti, err := r.Verify(context.Background(), key, nil)
		if err != nil || ti.UserID != want || ti.Expiration.Before(time.Now()) {
			t.Errorf("%s: %+v %v", key, ti, err)
		}
	}
	// Neither an unknown key nor a stored hash used as a key verifies.
	for _, bad := range []string{"kc", "", HashKey("ka")} {
		if _, err := r.Verify(context.Background(), bad, nil); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("%q: %v, want ErrInvalidToken", bad, err)
		}
	}
}

func TestIdentify(t *testing.T) {
	r := registry(t, map[string]string{"alice": "ka"}, config.Default().Quotas, nil)
	req := func(user string) mcp.Request {
		ex := &mcp.RequestExtra{}
		if user != "" {
			ex.TokenInfo = &auth.TokenInfo{UserID: user}
		}
		return &mcp.CallToolRequest{Extra: ex}
	}
	if id, err := r.Identify(req("alice")); err != nil || id != "alice" {
		t.Errorf("alice: %q %v", id, err)
	}
	// Fails closed: no token, or a token naming no configured tenant.
	for _, u := range []string{"", "mallory"} {
		if _, err := r.Identify(req(u)); !errors.Is(err, ErrNoTenant) {
			t.Errorf("%q: %v, want ErrNoTenant", u, err)
		}
	}
	open := New(config.Default())
	if open.Authenticated() {
		t.Fatal("no tenants: no authentication")
	}
	if id, err := open.Identify(req("")); err != nil || id != Local {
		t.Errorf("implicit tenant: %q %v", id, err)
	}
}

func TestAdmitQuotas(t *testing.T) {
	q := config.Quotas{MaxConcurrentRuns: 2, MaxSessions: 2, ExecutionsPerMinute: 60, ExecutionBurst: 100}
	r := registry(t, map[string]string{"alice": "ka", "bob": "kb"}, q, map[string]config.Tenant{"bob": {MaxConcurrentRuns: 1}})
	quota := func(err error) string {
		re, _ := QuotaOf(err)
		if re == nil {
			t.Fatalf("not a quota error: %v", err)
		}
		return re.Rule
	}

	// Concurrent runs: the third of alice's is refused, naming the default;
	// bob's override names his table. Releasing frees the slot.
	r1, err := r.Admit("alice")
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := r.Admit("alice")
	if _, err := r.Admit("alice"); quota(err) != "quotas.max_concurrent_runs" {
		t.Fatal(err)
	}
	b1, _ := r.Admit("bob")
	if _, err := r.Admit("bob"); quota(err) != "tenants.bob.max_concurrent_runs" || !strings.Contains(err.Error(), "tenants.bob.max_concurrent_runs = 1") {
		t.Fatal(err)
	}
	r1()
	r1() // idempotent
	if run := r.Running("alice"); run != 1 {
		t.Fatalf("running after release: %d", run)
	}
	r2()
	b1()
}

// The session quota is asked by the engine with the tenant's live sessions;
// a refusal is audited as quota.refused, counted, and gives back the rate
// token of the call it refused.
func TestSessionQuota(t *testing.T) {
	q := config.Quotas{MaxConcurrentRuns: 10, MaxSessions: 2, ExecutionsPerMinute: 60, ExecutionBurst: 1}
	r := registry(t, map[string]string{"alice": "ka", "bob": "kb"}, q, map[string]config.Tenant{"bob": {MaxSessions: 1}})
	rec := &memRecorder{}
	obs := &countObserver{}
	sq := r.SessionQuota(rec, obs)
	for _, c := range []struct {
		tenant string
		live   []string
		field  string // "": admitted
	}{
		{"alice", nil, ""},
		{"alice", []string{"a"}, ""},
		{"alice", []string{"a", "b"}, "quotas.max_sessions"},
		{"bob", nil, ""},
		{"bob", []string{"b1"}, "tenants.bob.max_sessions"},
		{"nobody", []string{"x", "y", "z"}, ""}, // not a tenant: no quota of one
	} {
		err := sq.CheckSessions(c.tenant, c.live)
		re, quota := QuotaOf(err)
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s with %v: %v", c.tenant, c.live, err)
		case c.field != "" && (re == nil || re.Rule != c.field || quota != QuotaSessions || !strings.Contains(err.Error(), c.field)):
			t.Errorf("%s with %v: %v, want a refusal naming %s", c.tenant, c.live, err, c.field)
		}
	}

	// alice's burst is one call: admitted, then refused by the session
	// quota in the engine, it may call again at once.
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	a, err := r.admit("alice")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), admissionKey{}, a)
	err = sq.CheckSessions("alice", []string{"a", "b"})
	sq.Refused(ctx, "alice", "restore_session", "c", err)
	a.end()
	if len(rec.entries) != 1 || rec.entries[0].Event != QuotaRefused || rec.entries[0].Details["rule"] != "quotas.max_sessions" || rec.entries[0].Details["tool"] != "restore_session" {
		t.Fatalf("audit: %+v", rec.entries)
	}
	if obs.refused["alice/"+QuotaSessions] != 1 {
		t.Fatalf("metrics: %v", obs.refused)
	}
	if rel, err := r.Admit("alice"); err != nil {
		t.Fatalf("the refused call used up the rate: %v", err)
	} else {
		rel()
	}
}

// A run slot held past the call's end (HoldRun: the run's sandbox is still
// there) is given back only when both the call and every hold are over.
func TestHoldRun(t *testing.T) {
	q := config.Quotas{MaxConcurrentRuns: 1, MaxSessions: 1, ExecutionsPerMinute: 6000, ExecutionBurst: 100}
	r := registry(t, map[string]string{"alice": "ka"}, q, nil)
	if done := HoldRun(context.Background()); done == nil {
		t.Fatal("HoldRun without an admitted call must give a no-op")
	} else {
		done()
	}
	for _, order := range []string{"hold ends first", "call ends first"} {
		a, err := r.admit("alice")
		if err != nil {
			t.Fatalf("%s: %v", order, err)
		}
		done := HoldRun(context.WithValue(context.Background(), admissionKey{}, a))
		if order == "hold ends first" {
			done()
			if r.Running("alice") != 1 {
				t.Fatalf("%s: released before the call ended", order)
			}
			a.end()
		} else {
			a.end()
			if _, err := r.Admit("alice"); err == nil || r.Running("alice") != 1 {
				t.Fatalf("%s: the slot was free while the run's sandbox was held: %v", order, err)
			}
			done()
			done() // idempotent
		}
		if r.Running("alice") != 0 {
			t.Fatalf("%s: slot not returned: %d", order, r.Running("alice"))
		}
	}
}

func TestAdmitRate(t *testing.T) {
	q := config.Quotas{MaxConcurrentRuns: 100, MaxSessions: 1, ExecutionsPerMinute: 60, ExecutionBurst: 2}
	r := registry(t, map[string]string{"alice": "ka"}, q, nil)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	for i := 0; i < 2; i++ {
		rel, err := r.Admit("alice")
		if err != nil {
			t.Fatalf("burst call %d: %v", i, err)
		}
		rel()
	}
	_, err := r.Admit("alice")
	if _, quota := QuotaOf(err); quota != QuotaRate || !strings.Contains(err.Error(), "retry in 1.0 s") {
		t.Fatalf("third call: %v", err)
	}
	// A refused call costs nothing: after one second exactly one more fits.
	now = now.Add(time.Second)
	if rel, err := r.Admit("alice"); err != nil {
		t.Fatalf("after a second: %v", err)
	} else {
		rel()
	}
	if _, err := r.Admit("alice"); err == nil {
		t.Fatal("a second call in the same second passed")
	}
}

// Under contention the run quota is never exceeded and every slot comes back.
func TestAdmitConcurrent(t *testing.T) {
	q := config.Quotas{MaxConcurrentRuns: 3, MaxSessions: 1, ExecutionsPerMinute: 1 << 20, ExecutionBurst: 1 << 20}
	r := registry(t, map[string]string{"alice": "ka"}, q, nil)
	var mu sync.Mutex
	inFlight, peak, refused := 0, 0, 0
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, err := r.Admit("alice")
			mu.Lock()
			if err != nil {
				refused++
				mu.Unlock()
				return
			}
			inFlight++
			if inFlight > peak {
				peak = inFlight
			}
			mu.Unlock()
			time.Sleep(time.Millisecond) // hold the slot while others try
			mu.Lock()
			inFlight--
			mu.Unlock()
			release()
		}()
	}
	wg.Wait()
	if peak > 3 || refused == 0 {
		t.Fatalf("peak %d (limit 3), refused %d", peak, refused)
	}
	if run := r.Running("alice"); run != 0 {
		t.Fatalf("slots not returned: %d running", run)
	}
}

func TestEnterRequest(t *testing.T) {
	q := config.Default().Quotas
	q.MaxRequestsInFlight, q.MaxConcurrentRuns = 2, 1
	r := registry(t, map[string]string{"alice": "ka", "bob": "kb"}, q, nil)
	a1, _ := r.EnterRequest("alice")
	a2, _ := r.EnterRequest("alice")
	_, err := r.EnterRequest("alice")
	if re, quota := QuotaOf(err); re == nil || re.Rule != "quotas.max_requests_in_flight" || quota != QuotaRequests {
		t.Fatalf("third request: %v", err)
	}
	if b, err := r.EnterRequest("bob"); err != nil {
		t.Fatalf("bob is limited by alice's requests: %v", err)
	} else {
		b()
	}
	if n := r.Requests("alice"); n != 2 {
		t.Errorf("alice holds %d requests, want 2 (a refusal holds none)", n)
	}
	a1()
	a1() // a second release is a no-op
	if n := r.Requests("alice"); n != 1 {
		t.Errorf("after a release alice holds %d requests, want 1", n)
	}
	if a3, err := r.EnterRequest("alice"); err != nil {
		t.Fatalf("after a release: %v", err)
	} else {
		a3()
	}
	a2()
	if n := r.Requests("alice"); n != 0 {
		t.Errorf("after every release alice holds %d requests", n)
	}
	if _, err := r.EnterRequest("nobody"); err == nil {
		t.Fatal("unknown tenant admitted")
	}
}

type memRecorder struct {
	mu      sync.Mutex
	entries []audit.Entry
}

func (m *memRecorder) Record(e audit.Entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries = append(m.entries, e)
}

type countObserver struct{ refused map[string]int }

func (c *countObserver) ToolCall(string, string, string, time.Duration) {}

func (c *countObserver) QuotaRefused(tenant, quota string) {
	if c.refused == nil {
		c.refused = map[string]int{}
	}
	c.refused[tenant+"/"+quota]++
}

// sharedUsage is what the other replicas hold, as a test sets it.
type sharedUsage struct {
	mu      sync.Mutex
	use     map[string]Usage
	err     error
	changes int
}

func (s *sharedUsage) Elsewhere(t string) (Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.use[t], s.err
}

func (s *sharedUsage) Changed() {
	s.mu.Lock()
	s.changes++
	s.mu.Unlock()
}

// With replicas, a quota counts what the others hold too: a run or a
// session past the tenant's limit across them is refused, saying how much
// is elsewhere; a quota that cannot be counted refuses; every change of
// this replica's runs is passed on.
func TestSharedAcrossReplicas(t *testing.T) {
	q := config.Quotas{MaxConcurrentRuns: 2, MaxSessions: 2, ExecutionsPerMinute: 600, ExecutionBurst: 100}
	r := registry(t, map[string]string{"alice": "ka", "bob": "kb"}, q, nil)
	sh := &sharedUsage{use: map[string]Usage{"alice": {Sessions: 1, Runs: 1}}}
	r.Share(sh)
	sq := r.SessionQuota(&memRecorder{}, &countObserver{})

	rel, err := r.Admit("alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admit("alice"); err == nil || !strings.Contains(err.Error(), "already has 2 execution(s) running, 1 of them through other replicas") {
		t.Fatalf("alice's third run across replicas: %v", err)
	}
	if b, err := r.Admit("bob"); err != nil {
		t.Fatalf("bob: %v", err)
	} else {
		b()
	}
	rel()
	if got := r.RunningAll(); len(got) != 0 {
		t.Errorf("running after release: %v", got)
	}
	if sh.changes != 4 { // (counted before the run below)
		t.Errorf("%d changes passed on, want 4 (two admitted, two released)", sh.changes)
	}

	if err := sq.CheckSessions("alice", nil); err != nil {
		t.Errorf("alice's first session here, one elsewhere: %v", err)
	}
	err = sq.CheckSessions("alice", []string{"a"})
	if _, quota := QuotaOf(err); quota != QuotaSessions || !strings.Contains(err.Error(), "has 2 live session(s), 1 of them through other replicas") {
		t.Errorf("alice's third session across replicas: %v", err)
	}

	// Full through the other replicas only, and their news of a run
	// over arrives meanwhile: admitted.
	sh.mu.Lock()
	sh.use["alice"] = Usage{Runs: 2}
	sh.mu.Unlock()
	go func() {
		time.Sleep(50 * time.Millisecond)
		sh.mu.Lock()
		sh.use["alice"] = Usage{Runs: 1}
		sh.mu.Unlock()
	}()
	if rel, err := r.Admit("alice"); err != nil {
		t.Errorf("a run admitted once the other replica's news came: %v", err)
	} else {
		rel()
	}

	sh.err = errors.New("not known yet")
	for _, err := range []error{second(r.Admit("bob")), sq.CheckSessions("bob", nil)} {
		if re, _ := QuotaOf(err); re == nil || !strings.Contains(err.Error(), "cannot be counted across the replicas") || !strings.Contains(err.Error(), "not known yet") {
			t.Errorf("a quota that cannot be counted: %v", err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// A refund gives the token back with the real clock too: a call refused
// after admission (the session quota, or forwarded to another replica)
// leaves the tenant's burst as it was; the credit never passes the burst.
func TestRefundRealClock(t *testing.T) {
	q := config.Quotas{MaxConcurrentRuns: 10, MaxSessions: 2, ExecutionsPerMinute: 1, ExecutionBurst: 1}
	r := registry(t, map[string]string{"alice": "ka"}, q, nil)
	a, err := r.admit("alice")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the reservation's instant has passed
	a.refund()
	a.refund() // once
	a.end()
	if !r.RateLeft("alice") {
		t.Error("no rate left after the refund")
	}
	b, err := r.admit("alice")
	if err != nil {
		t.Fatalf("the refunded token is not there: %v", err)
	}
	b.end()
	if _, err := r.admit("alice"); err == nil {
		t.Error("a second call within the burst of one admitted")
	}
	if r.RateLeft("alice") {
		t.Error("rate left with the burst spent")
	}
}

// The middleware gives a call's rate token back only when the call,
// refused here, is forwarded to the replica that serves its session
// (core/forward calls toolcall.Forwarded on the result): a refusal that
// stays, or a call that ran, keeps its charge. A call past the rate is
// refused with the quota's field, audited as quota.refused.
func TestMiddlewareRefund(t *testing.T) {
	for _, tc := range []struct {
		name      string
		refused   bool // the tool answers with an error it keeps beside the result
		forwarded bool // the forwarder sent the call on
		refund    bool
	}{
		{"refused, then forwarded", true, true, true},
		{"refused, not forwarded", true, false, false},
		{"ran here", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := config.Quotas{MaxConcurrentRuns: 10, MaxSessions: 2, ExecutionsPerMinute: 1, ExecutionBurst: 1}
			r := registry(t, map[string]string{"alice": "ka"}, q, nil)
			rec := &audittest.Recorder{}
			h := r.Middleware(rec, nil)(func(context.Context, string, mcp.Request) (mcp.Result, error) {
				res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}
				if tc.refused {
					res.SetError(errors.New("session-held"))
				}
				return res, nil
			})
			call := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "execute_python", Arguments: []byte(`{"session_id":"s1"}`)},
				Extra: &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: "alice"}}}
			res, err := h(context.Background(), "tools/call", call)
			if err != nil {
				t.Fatal(err)
			}
			if tc.forwarded {
				toolcall.Forwarded(res.(*mcp.CallToolResult))
			}
			if got := r.RateLeft("alice"); got != tc.refund {
				t.Fatalf("rate left %v, want %v", got, tc.refund)
			}
			if tc.refund {
				return
			}
			res, err = h(context.Background(), "tools/call", call)
			out, _ := res.(*mcp.CallToolResult)
			if err != nil || out == nil || !out.IsError || !strings.Contains(out.Content[0].(*mcp.TextContent).Text, "quota executions_per_minute exceeded") {
				t.Fatalf("the next call: %+v %v, want the rate's refusal", res, err)
			}
			if es := rec.Take(); len(es) != 1 || es[0].Event != QuotaRefused || es[0].UserID != "alice" || es[0].SessionID != "s1" ||
				len(es[0].Details) != 3 || es[0].Details["rule"] != "quotas.executions_per_minute" || es[0].Details["quota"] != QuotaRate || es[0].Details["tool"] != "execute_python" {
				t.Fatalf("audited %+v", es)
			}
		})
	}
}
