package bench

import (
	"bufio"
	"encoding/json"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

func BenchmarkZTrace(b *testing.B) {
	s := testenv.StartServer(b, benchConfig)
	callArgs(b, s, "execute_python", map[string]any{"code": "1", "session_id": "t"})
	var client, plug []time.Duration
	for range 200 {
		st := time.Now()
		res := callArgs(b, s, "execute_python", map[string]any{"code": "y = 1", "session_id": "t"})
		client = append(client, time.Since(st))
		bb, _ := json.Marshal(res.StructuredContent)
		var o struct {
			T float64 `json:"execution_time"`
		}
		json.Unmarshal(bb, &o)
		plug = append(plug, time.Duration(o.T*1e9))
	}
	f, _ := os.Open(s.AuditLog)
	sc := bufio.NewScanner(f)
	req := map[string]time.Time{}
	var eng []time.Duration
	for sc.Scan() {
		var e struct {
			TS      string         `json:"timestamp"`
			Event   string         `json:"event"`
			Details map[string]any `json:"details"`
		}
		json.Unmarshal(sc.Bytes(), &e)
		ts, _ := time.Parse(time.RFC3339Nano, e.TS)
		id, _ := e.Details["run_id"].(string)
		switch e.Event {
		case "execution.request":
			req[id] = ts
		case "execution.complete":
			if r, ok := req[id]; ok {
				eng = append(eng, ts.Sub(r))
			}
		}
	}
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	b.Logf("client median %v, engine (request→complete) median %v (n=%d), plugin execution_time median %v", med(client), med(eng[1:]), len(eng), med(plug))
}
