package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// reportMedian reports the median of ds (Go's ns/op is a mean, which one
// slow call under load moves).
func reportMedian(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	if len(ds) > 0 {
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "median-µs")
	}
}

// BenchmarkCallTool: everything's echo through the plugin binary (the
// core's gRPC client → plugin → go-sdk → server) next to a direct go-sdk
// client call to the same server, in the same run. make bench runs it 200x.
func BenchmarkCallTool(b *testing.B) {
	script := npmServer(b, "server-everything")
	node := nodePath(b)
	b.Run("through-plugin", func(b *testing.B) {
		cfg := mustJSON(b, Config{Servers: map[string]ServerConfig{"everything": {Command: node, Args: []string{script}}}})
		br := sdktest.LaunchBridge(b, pluginBin, sdktest.NewLocalHost(b.TempDir()), cfg)
		req := bridge.CallRequest{Server: "everything", Tool: "echo", Arguments: json.RawMessage(`{"message":"bench"}`)}
		if r, err := br.CallTool(context.Background(), req); err != nil || r.IsError {
			b.Fatalf("%v %+v", err, r)
		}
		ds := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			r, err := br.CallTool(context.Background(), req)
			ds = append(ds, time.Since(t0))
			if err != nil || r.IsError {
				b.Fatalf("%v %+v", err, r)
			}
		}
		reportMedian(b, ds)
	})
	b.Run("direct-go-sdk", func(b *testing.B) {
		c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		cmd := exec.Command(node, script)
		cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		p := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "bench"}}
		if _, err := cs.CallTool(context.Background(), p); err != nil {
			b.Fatal(err)
		}
		ds := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			r, err := cs.CallTool(context.Background(), p)
			ds = append(ds, time.Since(t0))
			if err != nil || r.IsError {
				b.Fatalf("%v %+v", err, r)
			}
		}
		reportMedian(b, ds)
	})
}
