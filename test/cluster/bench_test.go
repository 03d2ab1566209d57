package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// BenchmarkReplicas is issue 27's per-call figures on kube-up's cluster,
// two replicas of the core (deploy/overlays/replicas): a session's call on
// the replica serving it (the baseline, same run), the same call through
// the other replica (forwarded to the first), and the pod read with which
// a replica checks, before each call, that it still serves a recorded
// session. Each iteration makes one of each; the figures are medians.
// (Failover and takeover need a replica killed: TestReplicaLoss logs them.)
func BenchmarkReplicas(b *testing.B) {
	c := setup(b)
	tenants, keys := testenv.TenantKeys(b, "alice")
	tenants += "executions_per_minute = 60000\nexecution_burst = 10000\n"
	a, other := c.replicas(b, tenants)
	onA := connect(b, "http://"+a.Status.PodIP+":8080/mcp", keys["alice"])
	onB := connect(b, "http://"+other.Status.PodIP+":8080/mcp", keys["alice"])
	call := func(cs *mcp.ClientSession) time.Duration {
		var o execOut
		start := time.Now()
		if res := testenv.Call(b, cs, "execute_python", map[string]any{"code": "x", "session_id": "bench"}, &o); res.IsError || o.ResultRepr != "41" {
			b.Fatalf("call in the session: %s %+v", testenv.Text(res), o)
		}
		return time.Since(start)
	}
	if res := testenv.Call(b, onA, "execute_python", map[string]any{"code": "x = 41", "session_id": "bench"}, nil); res.IsError {
		b.Fatal(testenv.Text(res))
	}
	sandboxes := c.sandboxesOf(b, a.Name)
	if len(sandboxes) == 0 {
		b.Fatal("no sandbox pod of the replica serving the session")
	}
	call(onB) // the forwarder's first connection to A
	var direct, forwarded, check []time.Duration
	for b.Loop() {
		direct = append(direct, call(onA))
		forwarded = append(forwarded, call(onB))
		start := time.Now()
		if _, err := c.admin.CoreV1().Pods(sandboxNS).Get(context.Background(), sandboxes[0], metav1.GetOptions{}); err != nil {
			b.Fatal(err)
		}
		check = append(check, time.Since(start))
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	dm, fm := med(direct), med(forwarded)
	b.ReportMetric(dm, "direct-ms")
	b.ReportMetric(fm, "forwarded-ms")
	b.ReportMetric(fm/dm, "forwarded/direct")
	b.ReportMetric(med(check), "check-ms")
	b.ReportMetric(0, "ns/op")
}
