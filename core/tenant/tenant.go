// Package tenant is who calls over HTTP and how much they may use: API keys
// (kept as sha256 hashes) name tenants, and each tenant has quotas on
// concurrent runs, live sessions and execution rate. Sessions belong to a
// tenant, never to an HTTP connection: the tenant name is the engine's
// client key.
package tenant

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/time/rate"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// Local is the one implicit tenant when no [tenants] are configured (stdio,
// or HTTP on loopback without authentication).
const Local = "local"

// KeyPrefix starts every key `mcp-forge tenant new-key` makes, so a leaked
// key is recognisable by secret scanners.
const KeyPrefix = "mcpf_"

// HashKey is how a key is stored in forge.toml: sha256, hex.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// NewKey returns a fresh random API key (256 bits) and its hash.
func NewKey() (key, hash string, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("random key: %w", err)
	}
	key = KeyPrefix + base64.RawURLEncoding.EncodeToString(b)
	return key, HashKey(key), nil
}

// Limits are one tenant's effective quotas, each with the configuration
// field an operator changes to raise it.
type Limits struct {
	MaxConcurrentRuns   int
	MaxSessions         int
	ExecutionsPerMinute int
	ExecutionBurst      int
	field               map[string]string // quota → config path
}

// Field is the configuration path that sets quota q for this tenant.
func (l Limits) Field(q string) string { return l.field[q] }

// Quota names (the keys of Limits.Field).
const (
	QuotaRuns     = "max_concurrent_runs"
	QuotaSessions = "max_sessions"
	QuotaRate     = "executions_per_minute"
	QuotaRequests = "max_requests_in_flight"
)

func limitsFor(name string, q config.Quotas, t config.Tenant) Limits {
	l := Limits{MaxConcurrentRuns: q.MaxConcurrentRuns, MaxSessions: q.MaxSessions, ExecutionsPerMinute: q.ExecutionsPerMinute, ExecutionBurst: q.ExecutionBurst,
		field: map[string]string{QuotaRuns: "quotas.max_concurrent_runs", QuotaSessions: "quotas.max_sessions", QuotaRate: "quotas.executions_per_minute"}}
	over := func(q string, v int, dst *int) {
		if v > 0 {
			*dst = v
			l.field[q] = "tenants." + name + "." + q
		}
	}
	over(QuotaRuns, t.MaxConcurrentRuns, &l.MaxConcurrentRuns)
	over(QuotaSessions, t.MaxSessions, &l.MaxSessions)
	over(QuotaRate, t.ExecutionsPerMinute, &l.ExecutionsPerMinute)
	if t.ExecutionBurst > 0 {
		l.ExecutionBurst = t.ExecutionBurst
	}
	return l
}

// state is one tenant's live usage.
type state struct {
	name     string
	limits   Limits
	limiter  *rate.Limiter
	running  int // executions whose calls or sandboxes are not over
	requests int // HTTP requests in flight
	credit   int // rate tokens given back by refused calls (refund), up to the burst
}

// Registry holds the tenants of one server.
type Registry struct {
	byHash  map[string]string // key hash → tenant
	maxReq  int
	jwt     *JWT
	scopes  []string // what an API key grants: every required scope
	mu      sync.Mutex
	tenants map[string]*state
	now     func() time.Time
	shared  Shared // the other replicas' usage; nil: this server is alone
}

// Usage is what a tenant holds of its quotas.
type Usage struct{ Sessions, Runs int }

// Shared is what the other replicas of a core in a cluster hold of each
// tenant's quotas, so that a quota holds across them: a run or a session
// is admitted only if this replica's count and theirs together stay
// within it.
type Shared interface {
	// Elsewhere is what the other replicas hold of tenant's quotas; an
	// error when that is not known (the quota is then not enforceable,
	// and the call is refused).
	Elsewhere(tenant string) (Usage, error)
	// Changed tells that this replica's usage changed. It must not block.
	Changed()
}

// Share counts the other replicas' usage in every quota of runs and
// sessions.
func (r *Registry) Share(s Shared) { r.shared = s }

// RunningAll is how many runs each tenant has on this replica.
func (r *Registry) RunningAll() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.tenants))
	for name, s := range r.tenants {
		if s.running > 0 {
			out[name] = s.running
		}
	}
	return out
}

// elsewhere is the other replicas' usage of tenant's quotas (none for a
// server alone); an error is a refusal naming the quota it cannot count.
func (r *Registry) elsewhere(name, quota, field string) (Usage, error) {
	if r.shared == nil {
		return Usage{}, nil
	}
	u, err := r.shared.Elsewhere(name)
	if err != nil {
		return Usage{}, quotaRefusal(quota, field,
			"quota %s of tenant %q cannot be counted across the replicas of this server (%v); retry in a few seconds, and if this persists, `mcp-forge doctor` checks the permissions it needs",
			quota, name, err)
	}
	return u, nil
}

// changed passes on a change of this replica's usage.
func (r *Registry) changed() {
	if r.shared != nil {
		r.shared.Changed()
	}
}

// New builds the registry from the configuration. With no [tenants] there
// is one tenant, Local, with the [quotas] limits.
func New(cfg config.Config) *Registry {
	r := &Registry{byHash: map[string]string{}, tenants: map[string]*state{}, now: time.Now, scopes: cfg.Auth.JWT.RequiredScopes, maxReq: cfg.Quotas.MaxRequestsInFlight}
	add := func(name string, t config.Tenant) {
		l := limitsFor(name, cfg.Quotas, t)
		r.tenants[name] = &state{name: name, limits: l,
			limiter: rate.NewLimiter(rate.Limit(float64(l.ExecutionsPerMinute)/60), l.ExecutionBurst)}
	}
	for name, t := range cfg.Tenants {
		add(name, t)
		for _, h := range t.APIKeySHA256 {
			r.byHash[strings.ToLower(h)] = name
		}
	}
	if len(cfg.Tenants) == 0 {
		add(Local, config.Tenant{})
	}
	return r
}

// UseJWT makes bearer JWTs verifiable as well as API keys.
func (r *Registry) UseJWT(j *JWT) { r.jwt = j }

// Authenticated reports whether callers must present a key or token.
func (r *Registry) Authenticated() bool { return len(r.byHash) > 0 || r.jwt != nil }

// Names lists the tenants (bounded by configuration: safe as metric labels).
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.tenants))
	for n := range r.tenants {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Limits are a tenant's effective quotas.
func (r *Registry) Limits(name string) (Limits, bool) {
	s, ok := r.tenants[name]
	if !ok {
		return Limits{}, false
	}
	return s.limits, true
}

// Verify is the auth.TokenVerifier for API keys: the key's hash names the
// tenant. A key is compared only through its hash, so the configuration
// never holds a usable key.
func (r *Registry) Verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	if r.jwt != nil && LooksLikeJWT(token) {
		name, scopes, exp, err := r.jwt.Verify(token)
		if err != nil {
			return nil, err
		}
		if _, ok := r.tenants[name]; !ok {
			return nil, fmt.Errorf("%w: tenant %q (from the token's %s claim) is not configured as [tenants.%s]", auth.ErrInvalidToken, name, r.jwt.cfg.TenantClaim, name)
		}
		return &auth.TokenInfo{UserID: name, Scopes: scopes, Expiration: exp}, nil
	}
	name, ok := r.byHash[HashKey(token)]
	if !ok {
		return nil, fmt.Errorf("%w: unknown API key (keys are configured as [tenants.NAME] api_key_sha256)", auth.ErrInvalidToken)
	}
	// API keys do not expire by themselves (revoking one is removing its
	// hash) and hold every scope the server requires.
	return &auth.TokenInfo{UserID: name, Scopes: r.scopes, Expiration: r.now().Add(24 * time.Hour)}, nil
}

// ErrQuota is the Err of every refusal by a tenant's quota: a
// *refusal.Error whose Rule is the configuration field that sets the
// quota and whose Details["quota"] names it (QuotaRuns, QuotaSessions,
// QuotaRate, QuotaRequests). It is audited as QuotaRefused where the quota
// refuses it, never again as a tool's refusal (the engine's Refuse leaves
// it), and a tool shows it as QuotaExceeded.
var ErrQuota = errors.New("refused by a tenant's quota")

// quotaRefusal is a refusal by quota, which field sets.
func quotaRefusal(quota, field, format string, args ...any) error {
	return &refusal.Error{Rule: field, Msg: fmt.Sprintf(format, args...), Err: ErrQuota, Details: map[string]any{"quota": quota}}
}

// QuotaOf is the refusal by a tenant's quota that err is, and the quota's
// name; nil when err is no such refusal.
func QuotaOf(err error) (*refusal.Error, string) {
	var re *refusal.Error
	if !errors.As(err, &re) || !errors.Is(re.Err, ErrQuota) {
		return nil, ""
	}
	quota, _ := re.Details["quota"].(string)
	return re, quota
}

// Admit reserves what an execution needs before it runs: a run slot and a
// token of the rate. release gives the slot back when the run is over.
// (Room for a new session is not reserved here: the engine asks
// SessionQuota when it admits a live session, whichever tool creates it.)
func (r *Registry) Admit(name string) (release func(), err error) {
	a, err := r.admit(name)
	if err != nil {
		return nil, err
	}
	return a.end, nil
}

func (r *Registry) admit(name string) (*admission, error) {
	s, ok := r.tenants[name]
	if !ok {
		return nil, fmt.Errorf("unknown tenant %q", name)
	}
	l := s.limits
	var other Usage
	for try := 0; ; try++ {
		var err error
		if other, err = r.elsewhere(name, QuotaRuns, l.Field(QuotaRuns)); err != nil {
			return nil, err
		}
		// Full only through what another replica published: its news of
		// a run just over may be on its way (it publishes each change at
		// once); wait for it a little before refusing.
		r.mu.Lock()
		wait := s.running < l.MaxConcurrentRuns && s.running+other.Runs >= l.MaxConcurrentRuns && try < settleTries
		r.mu.Unlock()
		if !wait {
			break
		}
		time.Sleep(settleStep)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := s.running + other.Runs; n >= l.MaxConcurrentRuns {
		return nil, quotaRefusal(QuotaRuns, l.Field(QuotaRuns),
			"quota %s exceeded: tenant %q already has %d execution(s) running%s (a run counts until its sandbox is gone), the limit (%s = %d); wait for one to finish",
			QuotaRuns, name, n, onOthers(other.Runs), l.Field(QuotaRuns), l.MaxConcurrentRuns)
	}
	if s.credit > 0 {
		s.credit-- // a token a refused call gave back
	} else {
		res := s.limiter.ReserveN(r.now(), 1)
		if d := res.DelayFrom(r.now()); !res.OK() || d > 0 {
			res.CancelAt(r.now())
			return nil, quotaRefusal(QuotaRate, l.Field(QuotaRate),
				"quota %s exceeded: tenant %q may start %d executions per minute (%s, bursts of %d); retry in %.1f s",
				QuotaRate, name, l.ExecutionsPerMinute, l.Field(QuotaRate), l.ExecutionBurst, d.Seconds())
		}
	}
	s.running++
	r.changed()
	return &admission{r: r, s: s}, nil
}

// RateLeft says whether tenant name may start an execution now (a token
// of its rate, not taken): a call that will be refused by the rate does
// no work before (core/forward's lookup of who serves its session).
func (r *Registry) RateLeft(name string) bool {
	s, ok := r.tenants[name]
	if !ok {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.credit > 0 || s.limiter.TokensAt(r.now()) >= 1
}

// How long a run refused only for what other replicas hold waits for
// their news: 300 ms, against a few ms for a replica's change to reach
// the others (test/cluster).
const (
	settleStep  = 10 * time.Millisecond
	settleTries = 30
)

// onOthers says how much of a count is the other replicas'.
func onOthers(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d of them through other replicas of this server", n)
}

// admission is one admitted execution: its run slot is held until the call
// has ended and every hold on it (HoldRun) is done.
type admission struct {
	r *Registry
	s *state

	mu       sync.Mutex
	holds    int
	ended    bool
	released bool
	refunded bool
}

// end is the call's end.
func (a *admission) end() {
	a.mu.Lock()
	a.ended = true
	a.mu.Unlock()
	a.maybeRelease()
}

func (a *admission) maybeRelease() {
	a.mu.Lock()
	if !a.ended || a.holds > 0 || a.released {
		a.mu.Unlock()
		return
	}
	a.released = true
	a.mu.Unlock()
	a.r.mu.Lock()
	a.s.running--
	a.r.mu.Unlock()
	a.r.changed()
}

// refund gives the rate token back: the call was refused after admission
// (by the session quota), and a refused call does not use up the rate.
func (a *admission) refund() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refunded {
		return
	}
	a.refunded = true
	// A credit the next admission spends: a reservation's own cancel
	// gives nothing back once its instant has passed.
	a.r.mu.Lock()
	a.s.credit = min(a.s.credit+1, a.s.limits.ExecutionBurst)
	a.r.mu.Unlock()
}

type admissionKey struct{}

// HoldRun keeps the run slot of the call ctx belongs to (an execute_* the
// middleware admitted) after the call returns, until done is called: a
// run's answer may come back while its sandbox still exits, and the slot
// counts sandboxes. done is idempotent; without an admitted call in ctx
// (stdio, a tool without quotas) it does nothing.
func HoldRun(ctx context.Context) (done func()) {
	a, _ := ctx.Value(admissionKey{}).(*admission)
	if a == nil {
		return func() {}
	}
	a.mu.Lock()
	a.holds++
	a.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			a.holds--
			a.mu.Unlock()
			a.maybeRelease()
		})
	}
}

// SessionQuota is a tenant's max_sessions as the engine asks it, in the one
// place where a live session is admitted (an execute's new session_id,
// restore_session of a session that is gone), so that no tool creates a
// session past the quota. Refusals are audited as quota.refused and counted
// like the middleware's.
type SessionQuota struct {
	r   *Registry
	rec audit.Recorder
	obs Observer
}

// SessionQuota returns the session quota check for the engine.
func (r *Registry) SessionQuota(rec audit.Recorder, obs Observer) *SessionQuota {
	return &SessionQuota{r: r, rec: rec, obs: obs}
}

// CheckSessions refuses a new live session of tenant when it already has
// live (the engine's count, taken under the lock that adds the session, so
// that two calls cannot both take the last place), with what the other
// replicas of a core in a cluster hold (Registry.Share). An unknown name
// (a client that is no tenant) has no quota.
func (q *SessionQuota) CheckSessions(name string, live []string) error {
	s, ok := q.r.tenants[name]
	if !ok {
		return nil
	}
	l := s.limits
	other, err := q.r.elsewhere(name, QuotaSessions, l.Field(QuotaSessions))
	if err != nil {
		return err
	}
	n := len(live) + other.Sessions
	if n < l.MaxSessions {
		return nil
	}
	sorted := append([]string(nil), live...)
	sort.Strings(sorted)
	return quotaRefusal(QuotaSessions, l.Field(QuotaSessions),
		"quota %s exceeded: tenant %q has %d live session(s)%s, the limit (%s = %d); destroy one with destroy_session, or reuse one of %v",
		QuotaSessions, name, n, onOthers(other.Sessions), l.Field(QuotaSessions), l.MaxSessions, sorted)
}

// Refused audits and counts a refusal by CheckSessions, before the answer
// goes back, and gives back the rate token of the call it refused.
func (q *SessionQuota) Refused(ctx context.Context, name, tool, sessionID string, err error) {
	re, quota := QuotaOf(err)
	if re == nil {
		return
	}
	if a, _ := ctx.Value(admissionKey{}).(*admission); a != nil && a.s.name == name {
		a.refund()
	}
	recordRefusal(q.rec, q.obs, name, sessionID, tool, re, quota)
}

// EnterRequest counts one open HTTP request of a tenant, refusing it over
// quotas.max_requests_in_flight; release ends it.
func (r *Registry) EnterRequest(name string) (release func(), err error) {
	s, ok := r.tenants[name]
	if !ok {
		return nil, fmt.Errorf("unknown tenant %q", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.requests >= r.maxReq {
		return nil, quotaRefusal(QuotaRequests, "quotas.max_requests_in_flight",
			"quota %s exceeded: tenant %q has %d HTTP requests open, the limit (quotas.max_requests_in_flight = %d); wait for responses before sending more",
			QuotaRequests, name, s.requests, r.maxReq)
	}
	s.requests++
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			s.requests--
			r.mu.Unlock()
		})
	}, nil
}

// Requests is how many HTTP requests of a tenant hold a slot now (the
// in-flight gauge, so an operator and the tests see slow clients).
func (r *Registry) Requests(name string) int {
	s, ok := r.tenants[name]
	if !ok {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.requests
}

// Running is how many runs of a tenant hold a slot (for tests and metrics).
func (r *Registry) Running(name string) int {
	s, ok := r.tenants[name]
	if !ok {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.running
}

// Name is the tenant of the call ctx belongs to, "" when no tenant was
// admitted (stdio, or a server without tenants).
func Name(ctx context.Context) string {
	if a, _ := ctx.Value(admissionKey{}).(*admission); a != nil {
		return a.s.name
	}
	return ""
}
