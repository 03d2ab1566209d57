package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// LoadResult is what a mixed load measured: the latency of every stateless
// run and every session execute, and every failure.
type LoadResult struct {
	Stateless, Session []time.Duration
	Errors             []string
	Took               time.Duration
}

// Load opens sessions Python sessions, then runs stateless Python runs and
// one execute in each live session all at once, and destroys the sessions.
// A failure is a protocol error, an isError result or an unsuccessful run.
func Load(t testing.TB, cs *mcp.ClientSession, stateless, sessions int) LoadResult {
	t.Helper()
	var mu sync.Mutex
	var res LoadResult
	call := func(args map[string]any, want string) (time.Duration, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_python", Arguments: args})
		took := time.Since(start)
		var why string
		switch {
		case err != nil:
			why = err.Error()
		case r.IsError:
			why = Text(r)
		case !strings.Contains(Text(r), want):
			why = "unexpected result: " + Text(r)
		}
		if why != "" {
			mu.Lock()
			res.Errors = append(res.Errors, fmt.Sprintf("%v: %s", args["session_id"], why))
			mu.Unlock()
			return took, false
		}
		return took, true
	}
	sid := func(i int) string { return "load" + strconv.Itoa(i) }
	// Open the sessions two at a time (a kernel start is CPU-bound).
	var wg sync.WaitGroup
	gate := make(chan struct{}, 2)
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gate <- struct{}{}
			defer func() { <-gate }()
			call(map[string]any{"code": "x = 41", "session_id": sid(i)}, "")
		}()
	}
	wg.Wait()
	start := time.Now()
	for i := range stateless {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, ok := call(map[string]any{"code": "print(" + strconv.Itoa(i) + " * 2)"}, strconv.Itoa(i*2)); ok {
				mu.Lock()
				res.Stateless = append(res.Stateless, d)
				mu.Unlock()
			}
		}()
	}
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, ok := call(map[string]any{"code": "x + 1", "session_id": sid(i)}, "42"); ok {
				mu.Lock()
				res.Session = append(res.Session, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.Took = time.Since(start)
	for i := range sessions {
		cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "destroy_session", Arguments: map[string]any{"session_id": sid(i)}})
	}
	return res
}

// Percentile is the p-th percentile (0-100) of d in milliseconds (0 if empty).
func Percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s))*p/100+0.5) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i].Microseconds()) / 1000
}

// PSS is the proportional set size in bytes of pid and its descendants:
// shared pages are divided among the processes sharing them, so the sum
// over a process tree is what that tree costs the host.
func PSS(pid int) int64 {
	var total int64
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				total += kb << 10
			}
		}
	}
	for _, c := range ChildPids(pid) {
		total += PSS(c)
	}
	return total
}
