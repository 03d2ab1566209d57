package proxy

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// BenchmarkGet1KiB: a GET of a 1 KiB body from a local server, directly
// and through the proxy, alternately in the same loop, so that the ratio
// compares like with like. Both clients keep their connections alive: over
// plain HTTP the proxy still opens one upstream connection per request
// (each is checked, counted and audited on its own); over HTTPS one CONNECT
// tunnel carries every request.
func BenchmarkGet1KiB(b *testing.B) {
	for _, scheme := range []string{"http", "https"} {
		b.Run(scheme, func(b *testing.B) {
			w := newWorld(b)
			_, proxy := w.grant(w.policy(func(n *config.Network) { n.MaxConnections = 1 << 30 }), "files.test", "example.com")
			via, direct := w.client(proxy), w.client(nil)
			for _, c := range []*http.Client{via, direct} {
				c.Transport.(*http.Transport).DisableKeepAlives = false
			}
			direct.Transport.(*http.Transport).Proxy = nil
			viaURL := "http://files.test:" + strconv.Itoa(w.hport) + "/data?size=1024"
			directURL := w.http.URL + "/data?size=1024"
			if scheme == "https" {
				viaURL = "https://example.com:" + strconv.Itoa(w.tport) + "/data?size=1024"
				directURL = w.tls.URL + "/data?size=1024"
			}
			get := func(c *http.Client, u string) time.Duration {
				start := time.Now()
				resp, err := c.Get(u)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || n != 1024 {
					b.Fatalf("%s: %s, %d bytes", u, resp.Status, n)
				}
				return time.Since(start)
			}
			get(direct, directURL) // connections and TLS sessions set up outside the measurement
			get(via, viaURL)
			var tDirect, tVia time.Duration
			n := 0
			for b.Loop() {
				tDirect += get(direct, directURL)
				tVia += get(via, viaURL)
				n++
			}
			b.ReportMetric(float64(tDirect.Nanoseconds())/float64(n), "direct-ns/get")
			b.ReportMetric(float64(tVia.Nanoseconds())/float64(n), "proxy-ns/get")
			b.ReportMetric(float64(tVia)/float64(tDirect), "proxy/direct")
		})
	}
}
