package httpe2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A bounded load test on loopback: N tenants × M concurrent clients, each
// running K stateless executions over HTTP. It reports errors and latency
// percentiles; it fails on any error (quotas are set above the load, so
// every call must succeed). FORGE_LOAD="N,M,K" changes the shape.
func TestHTTPLoad(t *testing.T) {
	n, m, k := 4, 3, 3
	if v := os.Getenv("FORGE_LOAD"); v != "" {
		fmt.Sscanf(v, "%d,%d,%d", &n, &m, &k)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = "t" + strconv.Itoa(i)
	}
	tenants, keys := testenv.TenantKeys(t, names...)
	s := testenv.StartHTTP(t, tenants+"[quotas]\nmax_concurrent_runs = 100\nmax_requests_in_flight = 200\nexecutions_per_minute = 6000\nexecution_burst = 1000\n")
	var mu sync.Mutex
	var lat []time.Duration
	var errs []string
	var wg sync.WaitGroup
	start := time.Now()
	for _, name := range names {
		for j := 0; j < m; j++ {
			cs := s.MustConnect(t, keys[name])
			wg.Add(1)
			go func(name string, j int) {
				defer wg.Done()
				for i := 0; i < k; i++ {
					code := fmt.Sprintf("print(%q)\n%d", name, i)
					t0 := time.Now()
					res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": code}})
					d := time.Since(t0)
					mu.Lock()
					lat = append(lat, d)
					switch {
					case err != nil:
						errs = append(errs, fmt.Sprintf("%s/%d: %v", name, j, err))
					case res.IsError:
						errs = append(errs, fmt.Sprintf("%s/%d: %.200s", name, j, testenv.Text(res)))
					}
					mu.Unlock()
				}
			}(name, j)
		}
	}
	wg.Wait()
	wall := time.Since(start)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[int(float64(len(lat)-1)*p)] }
	t.Logf("load: %d tenants x %d clients x %d runs = %d calls in %s (%.1f calls/s); errors %d; latency p50 %s p95 %s max %s",
		n, m, k, len(lat), wall.Round(time.Millisecond), float64(len(lat))/wall.Seconds(), len(errs),
		pct(0.5).Round(time.Millisecond), pct(0.95).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	for _, e := range errs {
		t.Error(e)
	}
	_, scrape := s.Get(t, "/metrics", keys[names[0]])
	var total float64
	for _, name := range names {
		total += metric(t, scrape, `mcp_forge_executions_total{backend="python",language="python",outcome="success",tenant="`+name+`"}`)
	}
	if int(total) != n*m*k-len(errs) {
		t.Errorf("metrics count %v successful executions, the clients saw %d", total, n*m*k-len(errs))
	}
}
