package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// snapshotBench: a gVisor session holding mb MiB of random data, saved
// whole (checkpoint_session, what a suspend does), restored
// (restore_session: a new sandbox, to the first result), forked once and
// four times at once (four calls, and one call with count 4), each
// measured b.N times in one run.
func snapshotBench(b *testing.B, mb int) {
	if _, err := os.Stat("/usr/local/lib/mcp-forge/runsc"); err != nil {
		b.Skip("runsc is not installed (make setup installs it)")
	}
	s := testenv.StartServer(b, benchConfig+"[security]\nisolation = \"gvisor\"\n[sessions]\nmax_concurrent = 8\nsuspend_after = 0\n")
	call := func(tool string, args map[string]any) time.Duration {
		t0 := time.Now()
		res, err := s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %s", tool, err, testenv.Text(res))
		}
		return time.Since(t0)
	}
	call("execute_python", map[string]any{"session_id": "big", "code": fmt.Sprintf("import os\nblob = os.urandom(%d << 20)", mb)})
	var save, restore, fork1, fork4, count4 []time.Duration
	b.ResetTimer()
	for i := range b.N {
		save = append(save, call("checkpoint_session", map[string]any{"session_id": "big"}))
		restore = append(restore, call("restore_session", map[string]any{"session_id": "big"})+call("execute_python", map[string]any{"session_id": "big", "code": "len(blob)"}))
		id := fmt.Sprintf("f%d", i)
		fork1 = append(fork1, call("fork_session", map[string]any{"session_id": "big", "new_session_id": id}))
		call("destroy_session", map[string]any{"session_id": id})
		t0 := time.Now()
		var wg sync.WaitGroup
		for j := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				call("fork_session", map[string]any{"session_id": "big", "new_session_id": fmt.Sprintf("f%d-%d", i, j)})
			}()
		}
		wg.Wait()
		fork4 = append(fork4, time.Since(t0))
		for j := range 4 {
			call("destroy_session", map[string]any{"session_id": fmt.Sprintf("f%d-%d", i, j)})
		}
		// count 4: one snapshot, four restores side by side.
		count4 = append(count4, call("fork_session", map[string]any{"session_id": "big", "new_session_id": fmt.Sprintf("c%d", i), "count": 4}))
		for j := range 4 {
			call("destroy_session", map[string]any{"session_id": fmt.Sprintf("c%d-%d", i, j+1)})
		}
	}
	b.StopTimer()
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"save", save}, {"restore", restore}, {"fork", fork1}, {"fork4-wall", fork4}, {"fork-count4-wall", count4}} {
		med, p90 := stats(m.d)
		b.ReportMetric(med, m.name+"-median-ms")
		b.Logf("%d MiB session, %d runs: %s median %.0f ms, p90 %.0f ms", mb, b.N, m.name, med, p90)
	}
}

// BenchmarkSnapshot10MB, 100MB and 200MB: issue 43's figures (save,
// restore to the first result, fork, four forks at once) under gVisor; its
// goals are set at 100 MB.
func BenchmarkSnapshot10MB(b *testing.B)  { snapshotBench(b, 10) }
func BenchmarkSnapshot100MB(b *testing.B) { snapshotBench(b, 100) }
func BenchmarkSnapshot200MB(b *testing.B) { snapshotBench(b, 200) }
