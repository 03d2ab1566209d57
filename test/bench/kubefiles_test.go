package bench

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// BenchmarkKubeSessionFiles measures, on the Kubernetes runtime, what a
// session's calls cost through the pod's agent: an execute (which lists
// output/ afterwards through the file service) and a list_files of a
// workspace of 200 files, b.N of each, median and p90 in ms. Run on two
// trees in one session of the cluster to compare (issue 41: the Go
// agent against the Perl keeper).
func BenchmarkKubeSessionFiles(b *testing.B) {
	if !testenv.Kube() {
		b.Skip("Kubernetes runtime only: set " + testenv.KubeConfigEnv)
	}
	s := testenv.StartServerOn(b, true, benchConfig+"[plugins.jupyter.config]\nwarm = 0\n")
	call := func(tool string, args map[string]any) func() error {
		return func() error { callArgs(b, s, tool, args); return nil }
	}
	call("execute_python", map[string]any{"session_id": "files", "code": "import os\nos.makedirs('d', exist_ok=True)\nfor i in range(200): open(f'd/f{i}.txt', 'w').write('x' * i)"})()
	call("list_files", map[string]any{"session_id": "files"})() // the file service opened
	n := max(b.N, 20)
	d, _ := measure(n, call("execute_python", map[string]any{"session_id": "files", "code": "y = 1"}))
	exMed, exP90 := stats(d)
	d, _ = measure(n, call("list_files", map[string]any{"session_id": "files"}))
	lsMed, lsP90 := stats(d)
	d, _ = measure(n, call("download_file", map[string]any{"session_id": "files", "path": "d/f150.txt"}))
	rdMed, rdP90 := stats(d)
	b.ReportMetric(exMed, "execute-ms")
	b.ReportMetric(lsMed, "list-ms")
	b.ReportMetric(rdMed, "download-ms")
	b.Logf("session execute %.2f ms (p90 %.2f), list_files of 200 %.2f ms (p90 %.2f), download_file %.2f ms (p90 %.2f), n=%d",
		exMed, exP90, lsMed, lsP90, rdMed, rdP90, n)
}
