package kernel

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// The warm pool: kernels started before any session asks, in containers
// created exactly as a session's (same image, limits, mounts, environment,
// confinement) but under a pool id of their own, since the session's id is
// not known yet. OpenSession hands one to the first session whose request
// matches, reports the pool id as SessionInfo.WorkspaceID (the core binds
// that workspace to the session), and starts the next one behind it. A warm
// kernel is taken out of the pool under the backend's lock before it is
// handed over, so no two sessions ever get the same one; it is never
// returned to the pool.
//
// The pool is kept per key: "" for the default sandbox, and, for each
// standing sandbox grant a request carried (OpenSessionRequest.
// SandboxPoolGrant: a sandbox class, such as the gVisor a tenant is held
// to), kernels created with that grant. Such a kernel serves a session of
// the class once the core gave its container to the session's own grant
// (host.Sandbox.Claim).

// poolIDPrefix marks pool ids; session ids from the core always carry a
// '-' and a hash (session.InternalID in the core), pool ids never do.
const poolIDPrefix = "wp"

// startTimeout bounds one warm kernel's start.
const startTimeout = 2 * time.Minute

// pool is the backend's warm kernels (fields under Backend.mu).
type pool struct {
	size     int                   // how many to keep ready per key
	keys     []string              // "" and the pool grants seen, in order
	warm     map[string][]*session // by key: ready, oldest first; id is the pool id
	starting map[string]int
	failures int // consecutive failed starts (for the back-off)
	retry    *time.Timer
	stats    backend.WarmPool // counters; Size, Warm, Starting filled on read
	refillT  time.Duration    // sum of successful start times
}

// Pool reports the warm pool's state, nil when the backend keeps none.
func (b *Backend) Pool() *backend.WarmPool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := &b.pool
	if p.size == 0 && p.stats.Refills == 0 {
		return nil
	}
	st := p.stats
	st.Size = p.size
	for _, k := range p.keys {
		st.Warm += len(p.warm[k])
		st.Starting += p.starting[k]
	}
	if st.Refills > 0 {
		st.MeanRefill = p.refillT / time.Duration(st.Refills)
	}
	return &st
}

// matches reports whether a request can take a warm kernel: a new session
// (a restarted one keeps its workspace) whose kernel would run the
// configured image with the default limits and the spec's environment only,
// and no tools directory, network or host roots to mount (a warm
// container was created without); a sandbox grant only with a pool grant
// of its class.
func (b *Backend) matches(req backend.OpenSessionRequest) bool {
	return req.WorkspaceID == "" && req.ToolsGrant == "" && req.NetworkGrant == "" && (req.SandboxGrant == "" || req.SandboxPoolGrant != "") &&
		(req.Image == "" || req.Image == b.cfg.Image) && req.Memory == "" && len(req.Env) == 0
}

// poolKey is the key of the kernels req may take: its pool grant's.
func poolKey(req backend.OpenSessionRequest) string {
	if req.SandboxGrant == "" {
		return ""
	}
	return req.SandboxPoolGrant
}

// addKey keeps kernels of key from now on (caller holds b.mu).
func (p *pool) addKey(key string) {
	if !slices.Contains(p.keys, key) {
		p.keys = append(p.keys, key)
	}
}

// fill starts kernels until the pool holds its size of each key (ready or
// starting).
func (b *Backend) fill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := &b.pool
	if p.retry != nil {
		return // backing off after a failure; the timer fills
	}
	for _, k := range p.keys {
		for len(p.warm[k])+p.starting[k] < p.size {
			p.starting[k]++
			go b.startWarm(k)
		}
	}
}

// startWarm starts a kernel of key (its container created with the pool
// grant key, "" for none).
func (b *Backend) startWarm(key string) {
	raw := make([]byte, 6)
	rand.Read(raw)
	id := poolIDPrefix + hex.EncodeToString(raw)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	start := time.Now()
	s, err := b.open(ctx, backend.OpenSessionRequest{SessionID: id, SandboxGrant: key}, true)
	b.mu.Lock()
	p := &b.pool
	p.starting[key]--
	if err != nil {
		p.failures++
		p.stats.Failures++
		p.stats.LastFailure = err.Error()
		// Back off (1 s, 2 s, ... at most a minute) so that a broken image
		// or an absent Podman does not spin; the next session starts cold.
		wait := min(time.Duration(1<<min(p.failures-1, 6))*time.Second, time.Minute)
		if p.retry == nil {
			p.retry = time.AfterFunc(wait, func() {
				b.mu.Lock()
				b.pool.retry = nil
				b.mu.Unlock()
				b.fill()
			})
		}
		b.mu.Unlock()
		hclog.Default().Warn("could not start a warm kernel", "language", b.spec.Language, "retry_in", wait, "error", err)
		_ = b.sb.RemoveWorkspace(context.Background(), id)
		return
	}
	p.failures = 0
	p.stats.Refills++
	p.stats.LastRefill = time.Since(start)
	p.refillT += p.stats.LastRefill
	if len(p.warm[key]) >= p.size { // drained (or shrunk) while it started
		b.mu.Unlock()
		b.discard(s)
		return
	}
	p.warm[key] = append(p.warm[key], s)
	b.mu.Unlock()
	if b.audit != nil {
		_ = b.audit.Record(context.Background(), host.Event{Event: "kernel.warm", Severity: "info", SessionID: id, Success: true,
			Details: map[string]any{"container": s.ctr, "language": b.spec.Language, "start_ms": time.Since(start).Milliseconds(), "sandbox_class": key != ""}})
	}
}

// take hands a warm kernel to session id, or nil when none matches or is
// ready. A kernel that died while it waited is removed and the next tried;
// one of a sandbox class is the session's once the core gave its container
// to the session's grant, and is removed when it does not.
func (b *Backend) take(ctx context.Context, req backend.OpenSessionRequest) *session {
	if !b.matches(req) {
		if req.WorkspaceID == "" { // a restart is no miss: it keeps its container's workspace
			b.mu.Lock()
			if b.pool.size > 0 {
				b.pool.stats.Misses++
			}
			b.mu.Unlock()
		}
		return nil
	}
	key := poolKey(req)
	for {
		b.mu.Lock()
		p := &b.pool
		if p.size == 0 {
			b.mu.Unlock()
			return nil
		}
		if len(p.warm[key]) == 0 {
			p.stats.Misses++
			refill := !slices.Contains(p.keys, key)
			p.addKey(key) // a class seen for the first time: kept warm from now on
			b.mu.Unlock()
			if refill {
				b.fill()
			}
			return nil
		}
		s := p.warm[key][0]
		p.warm[key] = p.warm[key][1:]
		b.mu.Unlock()
		b.fill() // the next one starts behind it
		// The heartbeat answers within a millisecond from an idle kernel;
		// one that does not (the container died, Podman restarted) is
		// dropped rather than handed over.
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		alive := s.client.Alive(hctx)
		cancel()
		if !alive {
			b.mu.Lock()
			b.pool.stats.Retired++
			b.mu.Unlock()
			b.discard(s)
			continue
		}
		if key != "" {
			if err := b.sb.Claim(ctx, s.ctr, req.SandboxGrant); err != nil {
				hclog.Default().Warn("the core did not give a warm kernel to the session's sandbox grant; it starts cold", "session", req.SessionID, "error", err)
				b.mu.Lock()
				b.pool.stats.Misses++
				b.mu.Unlock()
				b.discard(s)
				return nil
			}
		}
		b.mu.Lock()
		b.pool.stats.Hits++
		b.mu.Unlock()
		s.workspace, s.id = s.id, req.SessionID
		return s
	}
}

// discard removes a warm kernel that will not be used, with its workspace.
func (b *Backend) discard(s *session) {
	ctx := context.Background()
	s.client.Close()
	_ = b.sb.Remove(ctx, s.ctr)
	_ = b.sb.RemoveWorkspace(ctx, s.id)
}

// Drain removes every warm kernel and stops refilling (the plugin is
// stopping). The core removes its containers at shutdown in any case.
func (b *Backend) Drain() {
	b.mu.Lock()
	p := &b.pool
	p.size = 0
	if p.retry != nil {
		p.retry.Stop()
		p.retry = nil
	}
	var warm []*session
	for _, k := range p.keys {
		warm = append(warm, p.warm[k]...)
	}
	p.warm = map[string][]*session{}
	b.mu.Unlock()
	// All at once: a removal takes a runtime call or two, and the plugin's
	// shutdown has a couple of seconds for its pool and its sessions.
	var wg sync.WaitGroup
	for _, s := range warm {
		wg.Add(1)
		go func() { defer wg.Done(); b.discard(s) }()
	}
	wg.Wait()
}
