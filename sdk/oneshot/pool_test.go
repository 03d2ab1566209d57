package oneshot

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeItems is a fake host for the pool: items are numbers, started
// instantly (or failing), killed on demand, and every discard recorded.
type fakeItems struct {
	mu        sync.Mutex
	next      int
	dead      map[int]bool
	discarded map[int]bool
	fail      error
	started   map[string]int
}

func newFake() *fakeItems {
	return &fakeItems{dead: map[int]bool{}, discarded: map[int]bool{}, started: map[string]int{}}
}

func (f *fakeItems) start(_ context.Context, key string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return 0, f.fail
	}
	f.next++
	f.started[key]++
	return f.next, nil
}

func (f *fakeItems) alive(v int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.dead[v]
}

func (f *fakeItems) discard(v int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.discarded[v] = true
}

func (f *fakeItems) kill(v int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dead[v] = true
}

func (f *fakeItems) count(m map[int]bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(m)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestPool(t *testing.T) {
	const mb = 1 << 20
	cases := []struct {
		name string
		keys map[string]int64
		opts poolOptions
		run  func(t *testing.T, p *pool[int], f *fakeItems)
	}{
		{"fills every key to its size", map[string]int64{"a": mb, "b": mb}, poolOptions{size: 2}, func(t *testing.T, p *pool[int], f *fakeItems) {
			waitUntil(t, "4 warm", func() bool { return p.Stats().Warm == 4 })
			if f.started["a"] != 2 || f.started["b"] != 2 {
				t.Fatalf("started %v", f.started)
			}
		}},
		{"a take is a hit, never handed out twice, and refilled", map[string]int64{"a": mb}, poolOptions{size: 1}, func(t *testing.T, p *pool[int], f *fakeItems) {
			waitUntil(t, "1 warm", func() bool { return p.Stats().Warm == 1 })
			v1, ok := p.Take("a", time.Second)
			if !ok {
				t.Fatal("miss with a warm item")
			}
			waitUntil(t, "refill", func() bool { return p.Stats().Warm == 1 })
			v2, ok := p.Take("a", time.Second)
			if !ok || v2 == v1 {
				t.Fatalf("second take %d %v after %d", v2, ok, v1)
			}
			s := p.Stats()
			if s.Hits != 2 || s.InUse != 2 || s.Misses != 0 {
				t.Fatalf("%+v", s)
			}
			p.Done()
			p.Done()
			if p.Stats().InUse != 0 {
				t.Fatal("in use after done")
			}
		}},
		{"a key added is kept from then on, within the memory cap", map[string]int64{"a": mb}, poolOptions{size: 1, memCap: 2 * mb}, func(t *testing.T, p *pool[int], f *fakeItems) {
			waitUntil(t, "1 warm", func() bool { return p.Stats().Warm == 1 })
			if _, ok := p.Take("c", time.Second); ok {
				t.Fatal("hit before the key was added")
			}
			p.AddKey("c", mb)
			p.AddKey("c", 5*mb) // known: keeps its size
			waitUntil(t, "c warm", func() bool { return p.Stats().Warm == 2 })
			if _, ok := p.Take("c", time.Second); !ok {
				t.Fatal("miss on an added key with a warm item")
			}
			p.AddKey("d", mb) // over the cap with c's refill
			waitUntil(t, "c refilled", func() bool { return p.Stats().Warm == 2 })
			if f.started["d"] != 0 || f.started["c"] != 2 {
				t.Fatalf("started %v: a key over the memory cap was filled", f.started)
			}
		}},
		{"an unknown key is a miss", map[string]int64{"a": mb}, poolOptions{size: 1}, func(t *testing.T, p *pool[int], f *fakeItems) {
			waitUntil(t, "1 warm", func() bool { return p.Stats().Warm == 1 })
			if _, ok := p.Take("other", time.Second); ok {
				t.Fatal("hit for a key the pool does not keep")
			}
			if s := p.Stats(); s.Misses != 1 || s.Warm != 1 {
				t.Fatalf("%+v", s)
			}
		}},
		{"an empty pool is a miss", map[string]int64{"a": mb}, poolOptions{size: 1}, func(t *testing.T, p *pool[int], f *fakeItems) {
			waitUntil(t, "1 warm", func() bool { return p.Stats().Warm == 1 })
			p.Take("a", time.Second)
			f.mu.Lock()
			f.fail = errors.New("no engine")
			f.mu.Unlock()
			if _, ok := p.Take("a", time.Second); ok {
				t.Fatal("hit from an empty pool")
			}
		}},
		{"the memory cap bounds the pool", map[string]int64{"a": 512 * mb, "b": 256 * mb}, poolOptions{size: 3, memCap: 1024 * mb}, func(t *testing.T, p *pool[int], f *fakeItems) {
			waitUntil(t, "the pool to fill", func() bool { return p.Stats().Warm >= 2 })
			time.Sleep(20 * time.Millisecond) // let it try for more: it must not
			s := p.Stats()
			var used int64
			for k, n := range f.started {
				used += int64(n) * p.keys[k]
			}
			if used > 1024*mb || s.Warm != f.started["a"]+f.started["b"] {
				t.Fatalf("started %v (%d MiB) over a 1024 MiB cap: %+v", f.started, used/mb, s)
			}
		}},
		{"a dead item is never handed out", map[string]int64{"a": mb}, poolOptions{size: 2, tick: time.Hour}, func(t *testing.T, p *pool[int], f *fakeItems) {
			waitUntil(t, "2 warm", func() bool { return p.Stats().Warm == 2 })
			f.kill(1)
			v, ok := p.Take("a", time.Second)
			if !ok || v == 1 {
				t.Fatalf("took %d %v", v, ok)
			}
			waitUntil(t, "the dead one discarded", func() bool { return f.count(f.discarded) == 1 })
			if s := p.Stats(); s.Retired != 1 {
				t.Fatalf("%+v", s)
			}
		}},
		{"a sweep replaces dead items", map[string]int64{"a": mb}, poolOptions{size: 1, tick: 5 * time.Millisecond}, func(t *testing.T, p *pool[int], f *fakeItems) {
			waitUntil(t, "1 warm", func() bool { return p.Stats().Warm == 1 })
			f.kill(1)
			waitUntil(t, "a replacement", func() bool { return f.count(f.discarded) == 1 && p.Stats().Warm == 1 && p.Stats().Refills == 2 })
		}},
		{"an item too old for the timeout is not used", map[string]int64{"a": mb}, poolOptions{size: 1, lifetime: time.Minute, tick: time.Hour}, func(t *testing.T, p *pool[int], f *fakeItems) {
			waitUntil(t, "1 warm", func() bool { return p.Stats().Warm == 1 })
			if _, ok := p.Take("a", 2*time.Minute); ok {
				t.Fatal("handed out an item whose lifetime ends before the run's timeout")
			}
			waitUntil(t, "it is discarded", func() bool { return f.count(f.discarded) == 1 })
		}},
		{"old idle items are retired", map[string]int64{"a": mb}, poolOptions{size: 1, maxAge: 10 * time.Millisecond, tick: 5 * time.Millisecond}, func(t *testing.T, p *pool[int], f *fakeItems) {
			waitUntil(t, "two retired", func() bool { return p.Stats().Retired >= 2 })
		}},
		{"failures are counted and retried with backoff", map[string]int64{"a": mb}, poolOptions{size: 1, tick: 5 * time.Millisecond}, func(t *testing.T, p *pool[int], f *fakeItems) {
			waitUntil(t, "one warm", func() bool { return p.Stats().Warm == 1 })
			f.mu.Lock()
			f.fail = errors.New("podman is away")
			f.mu.Unlock()
			if _, ok := p.Take("a", time.Second); !ok { // its refill fails
				t.Fatal("no warm item")
			}
			p.Done()
			waitUntil(t, "a failure", func() bool { return p.Stats().Failures >= 1 })
			time.Sleep(50 * time.Millisecond)
			if s := p.Stats(); s.Failures > 2 || s.LastFailure != "podman is away" {
				t.Fatalf("no backoff, or the failure is not reported: %+v", s)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake()
			p := newPool(c.keys, c.opts, f.start, f.alive, f.discard)
			c.run(t, p, f)
			p.Close()
			// Close drains: every item started is discarded or was taken.
			s := p.Stats()
			if s.Warm != 0 {
				t.Fatalf("warm after close: %+v", s)
			}
		})
	}
}

func TestPoolCloseDrains(t *testing.T) {
	f := newFake()
	p := newPool(map[string]int64{"a": 1}, poolOptions{size: 3}, f.start, f.alive, f.discard)
	waitUntil(t, "3 warm", func() bool { return p.Stats().Warm == 3 })
	p.Close()
	if n := f.count(f.discarded); n != 3 {
		t.Fatalf("%d of 3 discarded at close", n)
	}
	if _, ok := p.Take("a", time.Second); ok {
		t.Fatal("take after close")
	}
	time.Sleep(10 * time.Millisecond)
	if f.next != 3 {
		t.Fatalf("started %d after close", f.next-3)
	}
}

func TestPoolKey(t *testing.T) {
	a := poolKey("img", "", map[string]string{"A": "1", "B": "2"})
	if a != poolKey("img", "", map[string]string{"B": "2", "A": "1"}) {
		t.Error("key depends on map order")
	}
	for _, other := range []string{
		poolKey("img2", "", map[string]string{"A": "1", "B": "2"}),
		poolKey("img", "1g", map[string]string{"A": "1", "B": "2"}),
		poolKey("img", "", map[string]string{"A": "1"}),
		poolKey("img", "", map[string]string{"A": "1", "B": "3"}),
	} {
		if other == a {
			t.Errorf("keys collide: %q", other)
		}
	}
	if poolKey("img", "", map[string]string{"FORGE_X": "1"}) != poolKey("img", "", nil) {
		t.Error("FORGE_ variables (never passed to the program) change the key")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "512m": 512 << 20, "2g": 2 << 30, "1024k": 1 << 20, "100": 100, " 1G ": 1 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "-1m", "1t"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

// A drained pool is refilled by up to parallel starts at once, never more:
// a burst is not served by one start after another.
func TestPoolRefillsInParallel(t *testing.T) {
	for _, parallel := range []int{1, 3} {
		var mu sync.Mutex
		now, peak := 0, 0
		release := make(chan struct{})
		n := 0
		start := func(ctx context.Context, key string) (int, error) {
			mu.Lock()
			now++
			peak = max(peak, now)
			n++
			id := n
			mu.Unlock()
			select {
			case <-release:
			case <-ctx.Done():
			}
			mu.Lock()
			now--
			mu.Unlock()
			return id, nil
		}
		p := newPool(map[string]int64{"a": 1, "b": 1}, poolOptions{size: 2, parallel: parallel, tick: time.Hour}, start,
			func(int) bool { return true }, func(int) {})
		waitUntil(t, "starts under way", func() bool { return p.Stats().Starting == parallel })
		time.Sleep(20 * time.Millisecond) // no more than parallel begin
		mu.Lock()
		got := peak
		mu.Unlock()
		if got != parallel {
			t.Fatalf("parallel %d: %d starts at once", parallel, got)
		}
		close(release)
		waitUntil(t, "the pool full", func() bool { return p.Stats().Warm == 4 })
		p.Close()
	}
}

// A miss grows its key's target, up to maxSize; a key left alone gives the
// growth back, one item per quiet period, down to size.
func TestPoolAdapts(t *testing.T) {
	f := newFake()
	p := newPool(map[string]int64{"a": 1}, poolOptions{size: 1, maxSize: 3, shrinkAfter: 30 * time.Millisecond, tick: 5 * time.Millisecond}, f.start, f.alive, f.discard)
	defer p.Close()
	waitUntil(t, "one warm", func() bool { return p.Stats().Warm == 1 })
	p.mu.Lock()
	p.shrinkAfter = time.Hour // no shrinking while the burst is made
	p.mu.Unlock()
	for i := 0; i < 6; i++ { // a burst: takes faster than refills, then misses
		p.Take("a", time.Second)
	}
	if s := p.Stats(); s.Target["a"] != 3 || s.MaxSize != 3 || s.Grown != 2 {
		t.Fatalf("after a burst: %+v", s)
	}
	waitUntil(t, "three warm", func() bool { return p.Stats().Warm == 3 })
	p.mu.Lock()
	p.shrinkAfter = 30 * time.Millisecond
	p.mu.Unlock()
	waitUntil(t, "back to one", func() bool { s := p.Stats(); return s.Target["a"] == 1 && s.Warm == 1 })
	if s := p.Stats(); s.Shrunk != 2 {
		t.Fatalf("shrunk %d times, want 2", s.Shrunk)
	}
}

func TestPoolKeyLabel(t *testing.T) {
	for key, want := range map[string]string{
		poolKey("mcp-forge/python:3.11", "", nil):                  "mcp-forge/python:3.11",
		poolKey("img", "1g", map[string]string{"TOKEN": "secret"}): "img memory=1g",
		"a": "a",
		classKey(poolKey("img", "", nil), "0123abcd"): "img (sandbox class)",
	} {
		if got := keyLabel(key); got != want {
			t.Errorf("keyLabel(%q) = %q, want %q", key, got, want)
		}
	}
}

// Stop (a plugin's shutdown) removes the idle items without waiting for a
// start under way, which ignores its cancel as a container create does
// and may take seconds under load; the start's item is removed when it
// finishes. Close waits for it.
func TestPoolStopDoesNotWaitForStarts(t *testing.T) {
	for _, c := range []struct {
		name  string
		close func(p *pool[int])
		waits bool
	}{
		{"Stop", (*pool[int]).Stop, false},
		{"Close", (*pool[int]).Close, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake()
			release, blocked := make(chan struct{}), make(chan struct{})
			var once sync.Once
			start := func(ctx context.Context, key string) (int, error) {
				v, err := f.start(ctx, key)
				if v == 3 { // the third start outlives the pool's cancel
					once.Do(func() { close(blocked) })
					<-release
				}
				return v, err
			}
			p := newPool(map[string]int64{"a": 1}, poolOptions{size: 3, parallel: 1}, start, f.alive, f.discard)
			<-blocked
			waitUntil(t, "2 warm", func() bool { return p.Stats().Warm == 2 })
			done := make(chan struct{})
			go func() { c.close(p); close(done) }()
			select {
			case <-done:
				if c.waits {
					t.Fatal("Close returned before the start under way ended")
				}
				if n := f.count(f.discarded); n != 2 {
					t.Fatalf("%d of 2 idle items removed when Stop returned", n)
				}
			case <-time.After(200 * time.Millisecond):
				if !c.waits {
					t.Fatal("Stop waited for a start under way")
				}
			}
			close(release)
			<-done
			waitUntil(t, "the started item removed", func() bool { return f.count(f.discarded) == 3 })
		})
	}
}

// A hit's refill waits for the run to answer (Done), or for refillHold
// when the run takes longer, so that a container start does not compete
// with the run it replaces; a miss refills at once.
func TestPoolRefillWaitsForTheAnswer(t *testing.T) {
	cases := []struct {
		name string
		hold time.Duration
		done bool          // the run answers (Done) before the hold ends
		want time.Duration // no refill before this
	}{
		{"after the answer", time.Hour, true, 30 * time.Millisecond},
		{"after the hold when the run is long", 60 * time.Millisecond, false, 60 * time.Millisecond},
		{"at once when it does not wait", -1, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake()
			p := newPool(map[string]int64{"a": 1}, poolOptions{size: 1, tick: time.Hour, refillHold: c.hold}, f.start, f.alive, f.discard)
			defer p.Close()
			waitUntil(t, "one warm", func() bool { return p.Stats().Warm == 1 })
			t0 := time.Now()
			if _, ok := p.Take("a", time.Second); !ok {
				t.Fatal("miss on a full pool")
			}
			if c.want > 0 {
				time.Sleep(30 * time.Millisecond)
				if s := p.Stats(); s.Refills != 1 || s.Starting != 0 {
					t.Fatalf("a refill began while the run had not answered: %+v", s)
				}
				if c.done {
					p.Done()
				}
			}
			waitUntil(t, "the refill", func() bool { return p.Stats().Refills == 2 })
			if d := time.Since(t0); d < c.want {
				t.Fatalf("refilled after %v, before %v", d, c.want)
			}
			if !c.done {
				p.Done()
			}
		})
	}
}
