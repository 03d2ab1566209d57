package bench

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

// BenchmarkCredentialGet measures an HTTPS GET of 1 KiB from sandbox code
// with a credential added by the proxy (the sandbox's TLS ends in the
// proxy, which opens its own to the server) against a plain CONNECT
// tunnel to the same local server, same run, same code: each GET on a new
// connection (urllib), and each on one kept-alive connection
// (http.client). At least 200 GETs each (make bench passes -benchtime
// 200x); the figures are medians.
func BenchmarkCredentialGet(b *testing.B) {
	body := strings.Repeat("x", 1024)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The credential's host must get the value, the tunnel's the placeholder.
		if strings.HasPrefix(r.Host, "api.") != (r.Header.Get("Authorization") == "Bearer bench-credential-value-0123456789") {
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, body)
	}))
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	dir := b.TempDir()
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), []byte(caPEM), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("bench-credential-value-0123456789"), 0o600); err != nil {
		b.Fatal(err)
	}
	n := max(b.N, 200)
	s := testenv.StartServer(b, benchConfig+fmt.Sprintf(`
[network]
allowed_hosts = ["api.example.com:%[1]s", "plain.example.com:%[1]s"]
allowed_cidrs = ["127.0.0.1/32"]
max_connections = %[2]d
hosts = { "api.example.com" = "127.0.0.1", "plain.example.com" = "127.0.0.1" }
[network.credentials.api]
hosts = ["api.example.com:%[1]s"]
value_file = %[3]q
ca_file = %[4]q
`, port, 8*n+20, filepath.Join(dir, "token"), filepath.Join(dir, "ca.pem")))
	code := fmt.Sprintf(`import json, os, ssl, time, urllib.request, http.client
ctx = ssl.create_default_context(); ctx.load_verify_locations('ca.pem')
N, P = %d, %q
def fresh(host):
    u = 'https://%%s:%%s/' %% (host, P)
    d = []
    for i in range(N + 1):
        t = time.perf_counter()
        r = urllib.request.Request(u, headers={'Authorization': 'Bearer ' + os.environ['FORGE_CREDENTIAL_API']})
        assert len(urllib.request.urlopen(r, timeout=20, context=ctx).read()) == 1024
        d.append(time.perf_counter() - t)
    return d[1:]
def kept(host):
    c = http.client.HTTPSConnection('127.0.0.1', 3128, timeout=20, context=ctx)
    c.set_tunnel(host, int(P))
    d = []
    for i in range(N + 1):
        t = time.perf_counter()
        c.request('GET', '/', headers={'Authorization': 'Bearer ' + os.environ['FORGE_CREDENTIAL_API']})
        assert len(c.getresponse().read()) == 1024
        d.append(time.perf_counter() - t)
    return d[1:]
out = {'inj_fresh': [], 'plain_fresh': [], 'inj_kept': [], 'plain_kept': []}
# Alternating rounds: both sides see the same machine.
for r in range(4):
    out['inj_fresh'] += fresh('api.example.com')[:N//4]; out['plain_fresh'] += fresh('plain.example.com')[:N//4]
    out['inj_kept'] += kept('api.example.com')[:N//4]; out['plain_kept'] += kept('plain.example.com')[:N//4]
print(json.dumps(out))`, n, port)

	b.ResetTimer()
	var o mcpserver.ExecuteOutput
	res := s.Call(b, "execute_python", map[string]any{"code": code, "network": []string{"plain.example.com"}, "credentials": []string{"api"}, "timeout": 900,
		"input_files": []map[string]any{{"path": "ca.pem", "content": caPEM}}}, &o)
	b.StopTimer()
	if !o.Success {
		b.Fatalf("GETs with a credential: %s", testenv.Text(res))
	}
	var got map[string][]float64
	if err := json.Unmarshal([]byte(strings.TrimSpace(o.Stdout)), &got); err != nil {
		b.Fatalf("%v: %s", err, o.Stdout)
	}
	med := func(k string) float64 {
		d := make([]time.Duration, len(got[k]))
		for i, x := range got[k] {
			d[i] = time.Duration(x * float64(time.Second))
		}
		m, _ := stats(d)
		return m
	}
	inf, plf, ink, plk := med("inj_fresh"), med("plain_fresh"), med("inj_kept"), med("plain_kept")
	b.ReportMetric(ink, "injected-kept-median-ms")
	b.ReportMetric(plk, "tunnel-kept-median-ms")
	b.ReportMetric(inf, "injected-new-median-ms")
	b.ReportMetric(plf, "tunnel-new-median-ms")
	b.ReportMetric(ink-plk, "over-kept-ms")
	b.ReportMetric(inf-plf, "over-new-ms")
	b.Logf("HTTPS GET of 1 KiB from sandbox code, %d each: kept-alive connection with the credential added %.3f ms vs a plain tunnel %.3f ms (%.3f ms over); a new connection each %.3f ms vs %.3f ms (%.3f ms over)",
		len(got["inj_kept"]), ink, plk, ink-plk, inf, plf, inf-plf)
}
