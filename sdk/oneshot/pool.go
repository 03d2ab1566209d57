package oneshot

import (
	"cmp"
	"context"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// pool keeps up to size ready items per configured key, within a memory
// cap, started in the background, up to parallel at once: a burst that
// drains the pool is refilled by as many starts as the machine has cores,
// not one after another. An item is taken by one run and never returned:
// the run destroys it.
type pool[T any] struct {
	start   func(ctx context.Context, key string) (T, error)
	alive   func(T) bool // false: the item died while idle
	discard func(T)      // removes an item; may block
	keys    map[string]int64
	size    int // ready items wanted per key when the pool is quiet
	maxSize int // what a key's target may grow to on misses
	memCap  int64
	// shrinkAfter: a key not taken from for this long gives one item of
	// its grown target back (and again after as long again).
	shrinkAfter time.Duration
	// maxAge retires an idle item so that its container's lifetime (bounded
	// by the engine from its start) still covers a run's timeout.
	maxAge   time.Duration
	lifetime time.Duration // an item is usable while age + timeout <= lifetime
	now      func() time.Time
	parallel int // starts under way at most

	mu        sync.Mutex
	target    map[string]int       // ready items wanted per key now: size, grown by misses
	lastTake  map[string]time.Time // when the key was last taken from, or its target last changed
	backoff   time.Duration
	notBefore time.Time // after a failed start, none before this
	inflight  int
	starts    sync.WaitGroup
	idle      map[string][]item[T]
	starting  map[string]int
	inUse     int
	closed    bool
	stats     backend.WarmPool
	refillN   int64
	refillT   time.Duration
	kick      chan struct{}
	// holds counts the runs on a warm item that have not answered yet;
	// while there are some, no refill starts before holdUntil. A start
	// (create, start, the runner's warm-up) takes both cores for a moment:
	// begun on a hit, it runs beside the run it replaces (the suspect of
	// issue 40's slower warm R; docs/performance.md).
	holds      int
	holdUntil  time.Time
	refillHold time.Duration
	cancel     context.CancelFunc
	done       chan struct{}
}

type item[T any] struct {
	v    T
	born time.Time
}

type poolOptions struct {
	size     int
	memCap   int64
	maxAge   time.Duration
	lifetime time.Duration
	tick     time.Duration
	parallel int // starts at once; 0: the machine's cores
	maxSize  int // a key's target at most (0: size, no growth)
	// shrinkAfter: idle time after which a grown target gives one back
	// (0: a minute).
	shrinkAfter time.Duration
	// refillHold: how long a hit's refill waits for the run to answer at
	// most (0: 250 ms; negative: it does not wait).
	refillHold time.Duration
}

func newPool[T any](keys map[string]int64, o poolOptions, start func(context.Context, string) (T, error), alive func(T) bool, discard func(T)) *pool[T] {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pool[T]{start: start, alive: alive, discard: discard, keys: keys, size: o.size, memCap: o.memCap,
		maxAge: o.maxAge, lifetime: o.lifetime, now: time.Now, backoff: time.Second, parallel: cmp.Or(o.parallel, runtime.NumCPU()),
		maxSize: max(o.maxSize, o.size), shrinkAfter: cmp.Or(o.shrinkAfter, time.Minute), target: map[string]int{}, lastTake: map[string]time.Time{},
		idle: map[string][]item[T]{}, starting: map[string]int{}, kick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{}),
		refillHold: cmp.Or(o.refillHold, 250*time.Millisecond)}
	p.stats.Size, p.stats.MemoryCap = o.size, o.memCap
	tick := o.tick
	if tick <= 0 {
		tick = 2 * time.Second
	}
	go p.loop(ctx, tick)
	return p
}

// AddKey keeps items of key, each mem bytes, from now on (a key known
// already keeps its size).
func (p *pool[T]) AddKey(key string, mem int64) {
	p.mu.Lock()
	_, known := p.keys[key]
	if !known && !p.closed {
		p.keys[key] = mem
	}
	p.mu.Unlock()
	if !known {
		p.wake()
	}
}

// Take hands out a ready item of key whose remaining lifetime covers
// timeout, or reports a miss. Dead items met on the way are discarded.
// A hit's refill waits until Done or refillHold, whichever comes first.
func (p *pool[T]) Take(key string, timeout time.Duration) (T, bool) {
	var zero T
	p.mu.Lock()
	if _, ok := p.keys[key]; !ok || p.closed {
		p.stats.Misses++
		p.mu.Unlock()
		return zero, false
	}
	var dead []T
	hit := false
	defer func() {
		for _, d := range dead {
			go p.discard(d)
		}
		if !hit || p.refillHold < 0 {
			p.wake()
		}
	}()
	defer p.mu.Unlock()
	p.lastTake[key] = p.now()
	q := p.idle[key]
	for len(q) > 0 {
		it := q[0]
		q = q[1:]
		if p.lifetime > 0 && p.now().Sub(it.born)+timeout > p.lifetime || !p.alive(it.v) {
			dead = append(dead, it.v)
			p.stats.Retired++
			continue
		}
		p.idle[key] = q
		p.inUse++
		p.stats.Hits++
		hit = true
		if p.refillHold > 0 {
			// Only the first hit of a busy spell sets the deadline: a steady
			// stream of hits must not hold the refill back for good.
			if p.holds == 0 {
				p.holdUntil = p.now().Add(p.refillHold)
				time.AfterFunc(p.refillHold, p.wake)
			}
			p.holds++
		}
		return it.v, true
	}
	p.idle[key] = q
	p.stats.Misses++
	// A miss of a configured key: the pool was too small for this pace.
	if t := p.want(key); t < p.maxSize {
		p.target[key] = t + 1
		p.stats.Grown++
	}
	return zero, false
}

// want is key's target now (caller holds p.mu).
func (p *pool[T]) want(key string) int {
	if t, ok := p.target[key]; ok {
		return t
	}
	return p.size
}

// Done ends a run that took an item: its answer is in, and the refill it
// held back may start.
func (p *pool[T]) Done() {
	p.mu.Lock()
	p.inUse--
	if p.holds > 0 {
		p.holds--
	}
	p.mu.Unlock()
	p.wake()
}

// Stats reports the pool's state.
func (p *pool[T]) Stats() backend.WarmPool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	for _, q := range p.idle {
		s.Warm += len(q)
	}
	for _, n := range p.starting {
		s.Starting += n
	}
	s.InUse = p.inUse
	s.MaxSize = p.maxSize
	s.Target = map[string]int{}
	for k := range p.keys {
		s.Target[keyLabel(k)] += p.want(k)
	}
	if p.refillN > 0 {
		s.MeanRefill = p.refillT / time.Duration(p.refillN)
	}
	return s
}

// Close stops refilling, removes every idle item and waits for the starts
// under way, each of which removes its item when it finishes.
func (p *pool[T]) Close() {
	p.stop()
	p.starts.Wait() // each removes its item, the pool being closed (no start begins after)
}

// Stop is Close without waiting for the starts under way: they are
// cancelled, and each removes its item when it finishes, if its process
// still runs. A create cannot be cut short (its container would be left),
// and under load one takes seconds: a plugin that stops leaves their
// containers to the core, which removes every container it made once its
// creates end (sandbox.Manager.Shutdown).
func (p *pool[T]) Stop() { p.stop() }

// stop closes the pool and removes its idle items, all at once.
func (p *pool[T]) stop() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var all []T
	for k, q := range p.idle {
		for _, it := range q {
			all = append(all, it.v)
		}
		delete(p.idle, k)
	}
	p.mu.Unlock()
	p.cancel()
	<-p.done
	var wg sync.WaitGroup
	for _, v := range all {
		wg.Add(1)
		go func() { defer wg.Done(); p.discard(v) }()
	}
	wg.Wait()
}

func (p *pool[T]) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *pool[T]) loop(ctx context.Context, tick time.Duration) {
	defer close(p.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		p.sweep()
		p.fill(ctx)
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-t.C:
		}
	}
}

// sweep retires idle items that died or grew too old.
func (p *pool[T]) sweep() {
	p.mu.Lock()
	var gone []T
	for k, t := range p.target {
		if t > p.size && p.now().Sub(p.lastTake[k]) > p.shrinkAfter {
			p.target[k] = t - 1
			p.lastTake[k] = p.now() // one step per quiet period
			p.stats.Shrunk++
			if q := p.idle[k]; len(q) > t-1 {
				gone = append(gone, q[len(q)-1].v) // the youngest: the oldest go first anyway
				p.idle[k] = q[:len(q)-1]
				p.stats.Retired++
			}
		}
	}
	for k, q := range p.idle {
		keep := q[:0]
		for _, it := range q {
			if (p.maxAge > 0 && p.now().Sub(it.born) > p.maxAge) || !p.alive(it.v) {
				gone = append(gone, it.v)
				p.stats.Retired++
				continue
			}
			keep = append(keep, it)
		}
		p.idle[k] = keep
	}
	p.mu.Unlock()
	for _, v := range gone {
		go p.discard(v)
	}
}

// used is the memory the warm containers (idle and starting) may use.
func (p *pool[T]) used() int64 {
	var n int64
	for k, q := range p.idle {
		n += int64(len(q)) * p.keys[k]
	}
	for k, s := range p.starting {
		n += int64(s) * p.keys[k]
	}
	return n
}

// fill starts items, up to parallel at once, until every key has size or
// the memory cap is reached (items starting count against both). It does
// not wait for them: each start wakes the loop when it ends.
func (p *pool[T]) fill(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, len(p.keys))
	for k := range p.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if p.holds > 0 && p.now().Before(p.holdUntil) {
		return // a run on a warm item is answering: Done or the timer wakes the loop
	}
	for !p.closed && ctx.Err() == nil && p.inflight < p.parallel && !p.now().Before(p.notBefore) {
		key := ""
		for _, k := range keys {
			if len(p.idle[k])+p.starting[k] < p.want(k) && (p.memCap <= 0 || p.used()+p.keys[k] <= p.memCap) {
				key = k
				break
			}
		}
		if key == "" {
			return
		}
		p.starting[key]++
		p.inflight++
		p.starts.Add(1)
		go p.startOne(ctx, key)
	}
}

// startOne starts one item of key for the pool. A failure holds further
// starts back, doubling up to 30 s while they keep failing.
func (p *pool[T]) startOne(ctx context.Context, key string) {
	defer p.starts.Done()
	t0 := p.now()
	v, err := p.start(ctx, key)
	took := p.now().Sub(t0)
	p.mu.Lock()
	p.starting[key]--
	p.inflight--
	if err != nil {
		p.stats.Failures++
		p.stats.LastFailure = err.Error()
		p.notBefore = p.now().Add(p.backoff)
		p.backoff = min(2*p.backoff, 30*time.Second)
		p.mu.Unlock()
		return
	}
	p.backoff = time.Second
	p.stats.Refills++
	p.stats.LastRefill = took
	p.refillN++
	p.refillT += took
	if p.closed {
		p.mu.Unlock()
		p.discard(v)
		return
	}
	p.idle[key] = append(p.idle[key], item[T]{v: v, born: t0}) // the lifetime counts from before create
	p.mu.Unlock()
	p.wake()
}

// keyLabel names a pool key for people: its image, its memory limit when
// it has one, and whether it is a sandbox class's (never the environment
// or the pool grant a key may hold).
func keyLabel(key string) string {
	key, grant := classOf(key)
	image, rest, _ := strings.Cut(key, "\x00")
	label := image
	if mem, _, _ := strings.Cut(rest, "\x00"); mem != "" {
		label += " memory=" + mem
	}
	if grant != "" {
		label += " (sandbox class)"
	}
	return label
}

// classKey is key for the containers of a sandbox class: created with the
// standing grant poolGrant (backend.ExecuteRequest.SandboxPoolGrant; ""
// is key itself). No environment a request names can make a key of the
// form, whose \x01 follows the memory limit where an environment's \x00
// would.
func classKey(key, poolGrant string) string {
	if poolGrant == "" {
		return key
	}
	return key + "\x01" + poolGrant
}

// classOf splits a key from classKey into its own key and pool grant.
func classOf(key string) (string, string) {
	k, grant, _ := strings.Cut(key, "\x01")
	return k, grant
}
