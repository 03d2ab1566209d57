package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// BenchmarkIdleSessionsMemory: issue 43's host memory of N idle gVisor
// sessions (FORGE_BENCH_IDLE_SESSIONS, 50 by default), live and once
// suspended (sessions.suspend_after), as the host's MemAvailable drops
// against before they started, with the sandboxes left and the snapshots'
// bytes on disk; then one session's resume to its first result.
func BenchmarkIdleSessionsMemory(b *testing.B) {
	n := 50
	if v, err := strconv.Atoi(os.Getenv("FORGE_BENCH_IDLE_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	// Long enough that no session is suspended before the last one started
	// (each takes a few seconds under gVisor, four at a time).
	idle := 30 + 2*n // s
	s, call := gvisorServer(b, fmt.Sprintf("[sessions]\nmax_concurrent = %d\nsuspend_after = %d\ncleanup_interval = 1\n", n+2, idle))
	boxes := func() int {
		return len(testenv.Sandboxes(b, map[string]string{"io.mcp-forge.instance": forge.Instance(s.Base)}))
	}
	// The warm pools fill in the background after the start: measure from
	// when the server's sandboxes stop changing.
	for last, stable := -1, 0; stable < 3; time.Sleep(time.Second) {
		if n := boxes(); n == last {
			stable++
		} else {
			last, stable = n, 0
		}
	}
	for i := 0; i < b.N; i++ {
		before, pooled := memAvailable(b), boxes()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for j := range n {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				call("execute_python", map[string]any{"session_id": fmt.Sprintf("idle-%d-%d", i, j), "code": "import pandas\nx = 1"}, nil)
			}()
		}
		wg.Wait()
		time.Sleep(2 * time.Second)
		live, liveBoxes := before-memAvailable(b), boxes()
		var l mcpserver.SessionsOutput
		deadline := time.Now().Add(time.Duration(idle)*time.Second + time.Duration(n)*5*time.Second)
		for {
			call("list_sessions", map[string]any{}, &l)
			if len(l.Sessions) == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d sessions still live after %s", len(l.Sessions), time.Until(deadline))
			}
			time.Sleep(time.Second)
		}
		time.Sleep(2 * time.Second)
		suspended, left := before-memAvailable(b), boxes()
		var disk int64
		for _, c := range l.Checkpoints {
			disk += c.Bytes
		}
		resume := call("execute_python", map[string]any{"session_id": fmt.Sprintf("idle-%d-0", i), "code": "x + 1"}, nil)
		b.ReportMetric(float64(live>>20), "live-MiB")
		b.ReportMetric(float64(suspended>>20), "suspended-MiB")
		b.Logf("%d idle sessions, against the server with its warm pools (%d sandboxes): live %d MiB more of the host's memory (%d MiB each), %d sandboxes; suspended %d MiB more, %d sandboxes, %d snapshots holding %d MiB on disk; resuming one took %d ms",
			n, pooled, live>>20, live>>20/int64(n), liveBoxes, suspended>>20, left, len(l.Checkpoints), disk>>20, resume.Milliseconds())
		for j := range n {
			s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: "destroy_session", Arguments: map[string]any{"session_id": fmt.Sprintf("idle-%d-%d", i, j)}})
		}
	}
}

// memAvailable is the host's MemAvailable, in bytes.
func memAvailable(b *testing.B) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}
