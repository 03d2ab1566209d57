package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// kubeBeforeAfterConfig: benchConfig's CPU quota, and no warm pools, so
// that neither server fills pools (pods, kernels among them) behind the
// other's calls on two cores; the session's kernel starts cold, once,
// before anything is timed.
const kubeBeforeAfterConfig = benchConfig +
	"[plugins.python.config]\nwarm = 0\n[plugins.r.config]\nwarm = 0\n" +
	"[plugins.jupyter.config]\nwarm = 0\n[plugins.irkernel.config]\nwarm = 0\n"

// BenchmarkKubeSessionBeforeAfter measures issue 41's two figures on the
// Kubernetes runtime, for this tree's build and for another build's
// (FORGE_BENCH_BASELINE: the path of its mcp-forge, with its plugins
// beside it; for issue 41, 6745826^, the last build whose sandbox pods
// ran the keeper's Perl instead of mcp-forge-agent), in one run: two
// servers side by side on the same cluster (FORGE_TEST_KUBE_CONFIG), each
// with one started Python session whose working directory holds 20 files.
// Then, max(b.N, 30) times each, called in turn (which server goes first
// alternates, so both see the same load):
//   - execute_python of "x = 1" in that session (the kernel's run, and
//     the listing of output/ every session execute does);
//   - list_files of the session's working directory (20 files, plus
//     output/ where a build makes it).
//
// It reports median and p90 in ms per build and operation, and the
// ratios this/baseline of the medians. Without FORGE_BENCH_BASELINE it
// measures this tree's server alone.
func BenchmarkKubeSessionBeforeAfter(b *testing.B) {
	if !testenv.Kube() {
		b.Skip("Kubernetes runtime only: set " + testenv.KubeConfigEnv)
	}
	type server struct {
		name   string
		s      *testenv.Server
		ex, ls []time.Duration
	}
	servers := []*server{{name: "this", s: testenv.StartServerOn(b, true, kubeBeforeAfterConfig)}}
	if bin := os.Getenv("FORGE_BENCH_BASELINE"); bin != "" {
		servers = append(servers, &server{name: "baseline", s: testenv.StartServerBinary(b, bin, testenv.BaseDir(b), kubeBeforeAfterConfig)})
	}
	const sid = "issue41"
	exArgs := map[string]any{"session_id": sid, "code": "x = 1"}
	lsArgs := map[string]any{"session_id": sid}
	for _, s := range servers {
		// The session's pod and kernel, its 20 files, the file service's
		// first connection: none of it timed.
		callArgs(b, s.s, "execute_python", map[string]any{"session_id": sid,
			"code": "for i in range(20):\n    open(f'f{i:02d}.txt', 'w').write('x' * (i * 50))"})
		for range 3 {
			callArgs(b, s.s, "execute_python", exArgs)
			callArgs(b, s.s, "list_files", lsArgs)
		}
		if l := testenv.Text(callArgs(b, s.s, "list_files", lsArgs)); strings.Count(l, ".txt (") != 20 {
			b.Fatalf("%s: list_files does not show the 20 files:\n%s", s.name, l)
		}
	}
	n := max(b.N, 30)
	timed := func(s *server, tool string, args map[string]any) time.Duration {
		t0 := time.Now()
		callArgs(b, s.s, tool, args)
		return time.Since(t0)
	}
	b.ResetTimer()
	for i := range n {
		for k := range servers {
			s := servers[(i+k)%len(servers)] // alternate who goes first
			s.ex = append(s.ex, timed(s, "execute_python", exArgs))
		}
	}
	for i := range n {
		for k := range servers {
			s := servers[(i+k)%len(servers)]
			s.ls = append(s.ls, timed(s, "list_files", lsArgs))
		}
	}
	b.StopTimer()
	msg := fmt.Sprintf("Kubernetes, one started session, %d calls each, in turn:", n)
	for _, s := range servers {
		exMed, exP90 := stats(s.ex)
		lsMed, lsP90 := stats(s.ls)
		b.ReportMetric(exMed, s.name+"-execute-ms")
		b.ReportMetric(exP90, s.name+"-execute-p90-ms")
		b.ReportMetric(lsMed, s.name+"-list-ms")
		b.ReportMetric(lsP90, s.name+"-list-p90-ms")
		msg += fmt.Sprintf(" %s: execute_python median %.2f ms p90 %.2f ms, list_files (20 files) median %.2f ms p90 %.2f ms;",
			s.name, exMed, exP90, lsMed, lsP90)
	}
	if len(servers) == 2 {
		te, _ := stats(servers[0].ex)
		be, _ := stats(servers[1].ex)
		tl, _ := stats(servers[0].ls)
		bl, _ := stats(servers[1].ls)
		b.ReportMetric(te/be, "ratio-execute")
		b.ReportMetric(tl/bl, "ratio-list")
		msg += fmt.Sprintf(" ratio this/baseline: execute %.3f, list_files %.3f", te/be, tl/bl)
	}
	b.Log(msg)
	for _, s := range servers { // the raw figures, in call order
		b.Logf("%s execute_python ms: %s", s.name, msList(s.ex))
		b.Logf("%s list_files ms: %s", s.name, msList(s.ls))
	}
}

func msList(d []time.Duration) string {
	out := ""
	for i, x := range d {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%.2f", float64(x.Microseconds())/1000)
	}
	return out
}
