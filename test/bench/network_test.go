package bench

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// BenchmarkNetworkGet measures an HTTP GET of 1 KiB from sandbox code
// through the network grant (urllib over HTTP_PROXY: the in-sandbox
// forwarder, the run's unix socket, the core's egress proxy with its
// checks and audit line, a new upstream connection), timing each GET
// inside the sandbox, next to the same Python code GETting the same server
// directly from the host, in the same run. At least 200 GETs each (make
// bench passes -benchtime 200x); the figures are medians.
func BenchmarkNetworkGet(b *testing.B) {
	python, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("python3 is not installed on the host: the baseline runs the same code there")
	}
	body := strings.Repeat("x", 1024)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	n := max(b.N, 200)
	s := testenv.StartServer(b, benchConfig+fmt.Sprintf(`
[network]
allowed_hosts = ["files.test:%s"]
allowed_cidrs = ["127.0.0.1/32"]
max_connections = %d
hosts = { "files.test" = "127.0.0.1" }
`, port, 2*n+10))
	code := func(host string) string {
		return fmt.Sprintf(`import json, time, urllib.request
u = 'http://%s:%s/'
urllib.request.urlopen(u, timeout=20).read()
d = []
for i in range(%d):
    t = time.perf_counter()
    assert len(urllib.request.urlopen(u, timeout=20).read()) == 1024
    d.append(time.perf_counter() - t)
print(json.dumps(d))`, host, port, n)
	}
	// The same GETs written straight to the run's socket: the proxy's part
	// without the forwarder's.
	socketCode := fmt.Sprintf(`import json, socket, time
req = b'GET http://files.test:%s/ HTTP/1.1\r\nHost: files.test\r\nConnection: close\r\n\r\n'
def get():
    s = socket.socket(socket.AF_UNIX); s.connect('/forge/net/egress.sock'); s.sendall(req)
    b = b''
    while True:
        c = s.recv(65536)
        if not c: break
        b += c
    s.close(); assert b.endswith(b'x' * 1024), b[:200]
get()
d = []
for i in range(%d):
    t = time.perf_counter(); get(); d.append(time.perf_counter() - t)
print(json.dumps(d))`, port, n)
	timings := func(out string) []time.Duration {
		var secs []float64
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &secs); err != nil || len(secs) != n {
			b.Fatalf("%d timings (%v) from %q", len(secs), err, out)
		}
		d := make([]time.Duration, n)
		for i, x := range secs {
			d[i] = time.Duration(x * float64(time.Second))
		}
		return d
	}

	b.ResetTimer()
	var o mcpserver.ExecuteOutput
	res := s.Call(b, "execute_python", map[string]any{"code": code("files.test"), "network": []string{"files.test"}, "timeout": 600}, &o)
	if !o.Success {
		b.Fatalf("GETs through the grant failed: %s", testenv.Text(res))
	}
	proxied := timings(o.Stdout)
	o = mcpserver.ExecuteOutput{}
	res = s.Call(b, "execute_python", map[string]any{"code": socketCode, "network": []string{"files.test"}, "timeout": 600}, &o)
	if !o.Success {
		b.Fatalf("GETs on the run's socket failed: %s", testenv.Text(res))
	}
	socketed := timings(o.Stdout)
	cmd := exec.Command(python, "-c", code("127.0.0.1"))
	cmd.Env = []string{"PATH=/usr/bin:/bin"} // no proxy variables of the host's
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("GETs from the host: %v", err)
	}
	direct := timings(string(out))
	b.StopTimer()

	pm, pp := stats(proxied)
	dm, dp := stats(direct)
	sm, _ := stats(socketed)
	b.ReportMetric(sm, "socket-median-ms")
	b.ReportMetric(pm, "proxied-median-ms")
	b.ReportMetric(pp, "proxied-p90-ms")
	b.ReportMetric(dm, "direct-median-ms")
	b.ReportMetric(dp, "direct-p90-ms")
	b.ReportMetric(pm/dm, "ratio-median")
	b.Logf("GET of 1 KiB, %d each: from sandbox code through the network grant median %.3f ms p90 %.3f ms (on the run's socket, without the forwarder: %.3f ms); the same code on the host, direct, median %.3f ms p90 %.3f ms; ratio %.2f", n, pm, pp, sm, dm, dp, pm/dm)
}
