package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// BenchmarkBridgeCall measures a bridged tool call from sandbox code (Python
// in a stateless run: socket, core policy and audit, gRPC to the real
// mcpbridge plugin, the npm server-everything's get-sum, and back), timing
// each call inside the sandbox, next to a direct go-sdk client call to the
// same server measured in the same run. At least 200 calls each (make bench
// passes -benchtime 200x); the figures are medians.
func BenchmarkBridgeCall(b *testing.B) {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Skip("node is not installed: the bridge benchmark calls server-everything from npm")
	}
	script := filepath.Join(testenv.RepoRoot(), "test", "mcpservers", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(script); err != nil {
		b.Skipf("@modelcontextprotocol/server-everything is not installed: run `npm ci` in test/mcpservers (make bench does)")
	}
	n := max(b.N, 200)
	s := testenv.StartServer(b, benchConfig+fmt.Sprintf(`
[mcp_tools.everything]
command = %q
args = [%q]

[bridge]
plugin = "mcpbridge"
max_calls_per_run = %d
`, node, script, n+1))

	// Direct: a go-sdk client of the same server, as the bridge plugin is.
	client := mcp.NewClient(&mcp.Implementation{Name: "forge-bench", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(node, script)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	direct := func() error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get-sum", Arguments: map[string]any{"a": 1, "b": 2}})
		if err == nil && res.IsError {
			err = fmt.Errorf("get-sum: %v", res.Content)
		}
		return err
	}
	if err := direct(); err != nil { // the server's first call is not the steady state
		b.Fatal(err)
	}

	// The bridge starts its servers in the background: wait until it lists.
	testenv.WaitFor(b, "the bridge lists server-everything's tools", 2*time.Minute, func() bool {
		res, err := s.Session.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mcp://forge/tools/available"})
		return err == nil && strings.Contains(res.Contents[0].Text, `"everything.get_sum"`)
	})
	code := fmt.Sprintf(`import json, time
from forge_tools import everything
everything.get_sum(a=0, b=0)
d = []
for i in range(%d):
    t = time.perf_counter()
    r = everything.get_sum(a=i, b=1)
    d.append(time.perf_counter() - t)
    assert r.endswith("is %%d." %% (i + 1)), r
print(json.dumps(d))`, n)

	b.ResetTimer()
	var o mcpserver.ExecuteOutput
	res := s.Call(b, "execute_python", map[string]any{"code": code, "mcp_tools": []string{"everything.get_sum"}, "timeout": 600}, &o)
	if !o.Success {
		b.Fatalf("bridged calls failed: %s", testenv.Text(res))
	}
	var secs []float64
	if err := json.Unmarshal([]byte(o.Stdout), &secs); err != nil || len(secs) != n {
		b.Fatalf("%d timings (%v) from %q", len(secs), err, o.Stdout)
	}
	bridged := make([]time.Duration, n)
	for i, x := range secs {
		bridged[i] = time.Duration(x * float64(time.Second))
	}
	base, err := measure(n, direct)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()

	bm, bp := stats(bridged)
	dm, dp := stats(base)
	b.ReportMetric(bm, "bridged-median-ms")
	b.ReportMetric(bp, "bridged-p90-ms")
	b.ReportMetric(dm, "direct-median-ms")
	b.ReportMetric(dp, "direct-p90-ms")
	b.ReportMetric(bm/dm, "ratio-median")
	b.Logf("everything.get_sum, %d calls each: from sandbox code through the bridge median %.3f ms p90 %.3f ms; direct go-sdk client median %.3f ms p90 %.3f ms; ratio %.2f", n, bm, bp, dm, dp, bm/dm)
}
