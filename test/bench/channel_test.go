package bench

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// BenchmarkSessionChannelPython: `y = 1` in a Python session through MCP,
// the kernel reached through the core's channels (today's jupyter plugin,
// host.Sandbox.Dial), against the same through the direct ipc path (the
// jupyter plugin of API v1, testenv.V1Commit, which dials the kernel's
// sockets at the workspace's host path itself). One server runs both, and
// the two are called in turn, so load weighs on both alike.
func BenchmarkSessionChannelPython(b *testing.B) {
	direct := testenv.BuildV1(b, "plugins/jupyter")["plugins/jupyter"]
	s := testenv.StartServer(b, benchConfig+"[plugins.jupyterv1]\npath = \""+direct+"\"\n[plugins.jupyterv1.config]\nwarm = 0\n[plugins.jupyter.config]\nwarm = 0\n[sessions.default_backend]\npython = \"jupyter\"\n")
	call := func(backend, sid string) error {
		res, err := s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python",
			Arguments: map[string]any{"code": "y = 1", "session_id": sid, "backend": backend}})
		if err == nil && res.IsError {
			b.Fatalf("session execute through %s failed: %s", backend, testenv.Text(res))
		}
		return err
	}
	for _, w := range [][2]string{{"jupyter", "channel"}, {"jupyterv1", "direct"}} {
		if err := call(w[0], w[1]); err != nil { // sessions started, kernels warm
			b.Fatal(err)
		}
	}
	n := b.N
	b.ResetTimer()
	var channel, ipc []time.Duration
	for range n {
		c, err := measure(1, func() error { return call("jupyter", "channel") })
		if err != nil {
			b.Fatal(err)
		}
		d, err := measure(1, func() error { return call("jupyterv1", "direct") })
		if err != nil {
			b.Fatal(err)
		}
		channel, ipc = append(channel, c...), append(ipc, d...)
	}
	b.StopTimer()
	cm, cp := stats(channel)
	dm, dp := stats(ipc)
	b.ReportMetric(cm, "channel-median-ms")
	b.ReportMetric(cp, "channel-p90-ms")
	b.ReportMetric(dm, "direct-median-ms")
	b.ReportMetric(dp, "direct-p90-ms")
	b.ReportMetric(cm-dm, "overhead-median-ms")
	b.Logf("session y = 1 through MCP, %d runs each: channel median %.3f ms p90 %.3f ms; direct ipc median %.3f ms p90 %.3f ms; overhead %.3f ms",
		n, cm, cp, dm, dp, cm-dm)
}
