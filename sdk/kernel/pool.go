package kernel

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// poolIDPrefix marks pool ids; session ids from the core always carry a
// '-' and a hash (session.InternalID in the core), pool ids never do.
const poolIDPrefix = "wp"

// startTimeout bounds one warm kernel's start.
const startTimeout = 2 * time.Minute

// pool is the backend's warm kernels (fields under Backend.mu).
type pool struct {
	size     int        // how many to keep ready
	warm     []*session // ready, oldest first; id is the pool id
	starting int
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
	if p.size == 0 && len(p.warm) == 0 && p.stats.Refills == 0 {
		return nil
	}
	st := p.stats
	st.Size, st.Warm, st.Starting = p.size, len(p.warm), p.starting
	if st.Refills > 0 {
		st.MeanRefill = p.refillT / time.Duration(st.Refills)
	}
	return &st
}

// matches reports whether a request can take a warm kernel: a new session
// (a restarted one keeps its workspace) whose kernel would run the
// configured image with the default limits and the spec's environment only,
// and no tools directory, network or host roots to mount (a warm
// container was created without).
func (b *Backend) matches(req backend.OpenSessionRequest) bool {
	return req.WorkspaceID == "" && req.ToolsGrant == "" && req.NetworkGrant == "" && req.SandboxGrant == "" && (req.Image == "" || req.Image == b.cfg.Image) && req.Memory == "" && len(req.Env) == 0
}

// fill starts kernels until the pool holds its size (ready or starting).
func (b *Backend) fill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := &b.pool
	if p.retry != nil {
		return // backing off after a failure; the timer fills
	}
	for len(p.warm)+p.starting < p.size {
		p.starting++
		go b.startWarm()
	}
}

func (b *Backend) startWarm() {
	raw := make([]byte, 6)
	rand.Read(raw)
	id := poolIDPrefix + hex.EncodeToString(raw)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	start := time.Now()
	s, err := b.open(ctx, backend.OpenSessionRequest{SessionID: id}, true)
	b.mu.Lock()
	p := &b.pool
	p.starting--
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
	if len(p.warm) >= p.size { // drained (or shrunk) while it started
		b.mu.Unlock()
		b.discard(s)
		return
	}
	p.warm = append(p.warm, s)
	b.mu.Unlock()
	if b.audit != nil {
		_ = b.audit.Record(context.Background(), host.Event{Event: "kernel.warm", Severity: "info", SessionID: id, Success: true,
			Details: map[string]any{"container": s.ctr, "language": b.spec.Language, "start_ms": time.Since(start).Milliseconds()}})
	}
}

// take hands a warm kernel to session id, or nil when none matches or is
// ready. A kernel that died while it waited is removed and the next tried.
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
	for {
		b.mu.Lock()
		p := &b.pool
		if p.size == 0 {
			b.mu.Unlock()
			return nil
		}
		if len(p.warm) == 0 {
			p.stats.Misses++
			b.mu.Unlock()
			return nil
		}
		s := p.warm[0]
		p.warm = p.warm[1:]
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
	warm := p.warm
	p.warm = nil
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
