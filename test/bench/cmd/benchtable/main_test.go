package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkSessionPython-2   	       1	 148977034 ns/op	        14.96 kernel-median-ms	        31.28 session-median-ms
--- BENCH: BenchmarkSessionPython-2
    session_test.go:68: BenchmarkSessionPython 1 runs
BenchmarkSessionPython-2   	     100	 148977034 ns/op	         4.424 kernel-median-ms	         9.042 kernel-p90-ms	        10.37 session-median-ms
BenchmarkSessionR-2        	     100	 170130506 ns/op	        27.17 kernel-median-ms	        27.90 session-median-ms
BenchmarkConcurrentLoad-2  	       1	 1 ns/op	         2 errors	        900 stateless-p95-ms	        80 session-p95-ms
BenchmarkUnderLoad/default/python-2 	      50	 1 ns/op	 12.5 b2b-p50-ms	 70 b2b-p95-ms	 20 burst8-p50-ms	 10 paced-p95-ms	 8 runs-per-s	 3 podman-runs-per-s
PASS
`

func TestTable(t *testing.T) {
	ran, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := ran["BenchmarkSessionPython"]["session-median-ms"]; got != 10.37 {
		t.Fatalf("the last report of a benchmark wins: session-median-ms = %v", got)
	}
	rows := Table(ran)
	if len(rows) != len(specs) {
		t.Fatalf("%d rows for %d figures", len(rows), len(specs))
	}
	want := map[string]string{
		"BenchmarkSessionPython":       "FAIL",    // 10.37 is 5.9 ms over 4.42
		"BenchmarkSessionR":            "pass",    // 0.73 ms over
		"BenchmarkConcurrentLoad":      "FAIL",    // 2 errors
		"BenchmarkStatelessWarmPython": "not run", // absent until it exists
	}
	for _, r := range rows {
		if w, ok := want[r.Benchmark]; ok && r.Result != w {
			t.Errorf("%s (%s): %s, want %s", r.Figure, r.Benchmark, r.Result, w)
		}
	}
	// A sub-benchmark's figures, each judged on its own goal.
	byFigure := map[string]string{
		"back-to-back stateless Python, p50 (default config)":                          "pass",
		"back-to-back stateless Python, p95 (default config)":                          "FAIL",
		"sustained back-to-back Python vs bare podman run sequential (default config)": "pass",
		"back-to-back stateless R, p50 (default config)":                               "not run",
	}
	for _, r := range rows {
		if w, ok := byFigure[r.Figure]; ok && r.Result != w {
			t.Errorf("%s: %s, want %s", r.Figure, r.Result, w)
		}
		delete(byFigure, r.Figure)
	}
	if len(byFigure) > 0 {
		t.Errorf("figures missing from the table: %v", byFigure)
	}
	var b strings.Builder
	Print(&b, rows)
	if !strings.Contains(b.String(), "2.34×") || !strings.Contains(b.String(), "not run") {
		t.Errorf("table:\n%s", b.String())
	}
}
