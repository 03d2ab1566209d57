// Command benchtable reads `go test -bench` output (the custom metrics of
// test/bench and sdk/jupyter) and prints issue 13's table: each figure with
// its measured median, the baseline measured in the same run, their ratio,
// the goal and whether it is met. It writes the same as JSON with -json.
// A benchmark that did not run gives a row marked "not run", so the table
// holds before every benchmark exists.
//
//	go run ./test/bench/cmd/benchtable -json bin/bench.json bin/bench/*.txt
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Metrics are one benchmark's reported values by unit.
type Metrics map[string]float64

// Parse reads benchmark result lines ("BenchmarkX-2  N  v unit  v unit ...")
// and returns the metrics of each benchmark by name (without the -GOMAXPROCS
// suffix). A benchmark reported twice (the b.N=1 probe run, then the real
// one) keeps the last line.
func Parse(r io.Reader) (map[string]Metrics, error) {
	out := map[string]Metrics{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	suffix := regexp.MustCompile(`-\d+$`)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // a log line that starts with a benchmark's name
		}
		m := Metrics{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			m[f[i+1]] = v
		}
		out[suffix.ReplaceAllString(f[0], "")] = m
	}
	return out, sc.Err()
}

// Row is one line of the table.
type Row struct {
	Figure    string   `json:"figure"`
	Benchmark string   `json:"benchmark"`
	Measured  *float64 `json:"measured,omitempty"`
	Baseline  *float64 `json:"baseline,omitempty"`
	Ratio     *float64 `json:"ratio,omitempty"`
	Unit      string   `json:"unit"`
	Goal      string   `json:"goal"`
	Result    string   `json:"result"` // pass, FAIL, reported, not run
	Note      string   `json:"note,omitempty"`
}

// spec says where a row's numbers come from and how its goal is judged.
type spec struct {
	figure     string
	benchmarks []string // the first that ran is used
	measured   string
	baseline   string // "" when the figure has none
	unit       string
	goal       string
	pass       func(m, base float64, all Metrics) bool // nil: reported only
	note       func(all Metrics) string
}

// pacedNote gives a paced row's tail and how many calls were served warm.
func pacedNote(all Metrics) string {
	return fmt.Sprintf("p95 %.1f ms, %.0f calls warm", all["this-p95-ms"], all["this-warm-hits"])
}

func atMost(limit float64) func(m, _ float64, _ Metrics) bool {
	return func(m, _ float64, _ Metrics) bool { return m <= limit }
}

var specs = []spec{
	{figure: "stateless Python print(1) through MCP, warm pool", benchmarks: []string{"BenchmarkStatelessWarmPython"},
		measured: "forge-median-ms", baseline: "podman-run-median-ms", unit: "ms", goal: "≤ 25 ms", pass: atMost(25)},
	{figure: "stateless R cat(1) through MCP, warm pool", benchmarks: []string{"BenchmarkStatelessWarmR"},
		measured: "forge-median-ms", baseline: "podman-run-median-ms", unit: "ms", goal: "≤ 40 ms", pass: atMost(40)},
	{figure: "stateless Python print(1), warm, one call a second, default configuration (p50)", benchmarks: []string{"BenchmarkStatelessPacedPython"},
		measured: "this-p50-ms", unit: "ms", goal: "reported", note: pacedNote},
	{figure: "stateless R cat(1), warm, one call a second, default configuration (p50)", benchmarks: []string{"BenchmarkStatelessPacedR"},
		measured: "this-p50-ms", unit: "ms", goal: "≤ 25 ms (aa0b963: 24.7)", pass: atMost(25), note: pacedNote},
	{figure: "stateless Python, cold (pool off) vs bare podman run --rm", benchmarks: []string{"BenchmarkStatelessColdPython", "BenchmarkStatelessPython"},
		measured: "forge-median-ms", baseline: "podman-run-median-ms", unit: "ms", goal: "≤ 1.1×",
		pass: func(m, base float64, _ Metrics) bool { return base > 0 && m/base <= 1.1 }},
	{figure: "session execute y = 1 through MCP vs raw ipykernel round trip", benchmarks: []string{"BenchmarkSessionPython"},
		measured: "session-median-ms", baseline: "kernel-median-ms", unit: "ms", goal: "≤ 1 ms over",
		pass: func(m, base float64, _ Metrics) bool { return m-base <= 1 }},
	{figure: "session execute y = 1 through the core's channel vs the direct ipc path (v1 plugin, same server)", benchmarks: []string{"BenchmarkSessionChannelPython"},
		measured: "channel-median-ms", baseline: "direct-median-ms", unit: "ms", goal: "≤ 0.3 ms over",
		pass: func(m, base float64, _ Metrics) bool { return m-base <= 0.3 }},
	{figure: "R session execute y <- 1 vs raw IRkernel round trip", benchmarks: []string{"BenchmarkSessionR"},
		measured: "session-median-ms", baseline: "kernel-median-ms", unit: "ms", goal: "≤ 1 ms over",
		pass: func(m, base float64, _ Metrics) bool { return m-base <= 1 }},
	{figure: "new Python session, warm vs raw kernel container start", benchmarks: []string{"BenchmarkSessionStartPython"},
		measured: "warm-start-median-ms", baseline: "kernel-start-median-ms", unit: "ms", goal: "≤ 50 ms", pass: atMost(50)},
	{figure: "new Python session, cold vs raw kernel container start", benchmarks: []string{"BenchmarkSessionStartPython"},
		measured: "cold-start-median-ms", baseline: "kernel-start-median-ms", unit: "ms", goal: "≤ 1.0 s", pass: atMost(1000)},
	{figure: "50 concurrent stateless runs + 20 live sessions executing", benchmarks: []string{"BenchmarkConcurrentLoad"},
		measured: "errors", unit: "errors", goal: "0 errors, p95 reported",
		pass: func(m, _ float64, _ Metrics) bool { return m == 0 },
		note: func(all Metrics) string {
			return fmt.Sprintf("p95 stateless %.0f ms, session %.0f ms; burst %.1f s", all["stateless-p95-ms"], all["session-p95-ms"], all["wall-ms"]/1000)
		}},
	{figure: "HTTP GET of 1 KiB from sandbox code through a network grant vs the same code on the host, direct", benchmarks: []string{"BenchmarkNetworkGet"},
		measured: "proxied-median-ms", baseline: "direct-median-ms", unit: "ms", goal: "reported",
		note: func(all Metrics) string {
			return fmt.Sprintf("on the run's socket without the forwarder %.2f ms", all["socket-median-ms"])
		}},
	{figure: "HTTPS GET of 1 KiB from sandbox code on a kept-alive connection, a credential added by the proxy vs a plain CONNECT tunnel", benchmarks: []string{"BenchmarkCredentialGet"},
		measured: "injected-kept-median-ms", baseline: "tunnel-kept-median-ms", unit: "ms", goal: "≤ 2 ms over",
		pass: func(m, base float64, _ Metrics) bool { return m-base <= 2 },
		note: func(all Metrics) string {
			return fmt.Sprintf("a new connection each: %.2f ms vs %.2f ms", all["injected-new-median-ms"], all["tunnel-new-median-ms"])
		}},
	{figure: "host memory per idle Python session: server + plugins (baseline column: the container)", benchmarks: []string{"BenchmarkIdleSessionMemory"},
		measured: "host-mb-per-session", baseline: "container-mb-per-session", unit: "MB", goal: "server + plugin ≤ 15 MB", pass: atMost(15),
		note: func(all Metrics) string {
			return fmt.Sprintf("container %.1f MB reported", all["container-mb-per-session"])
		}},
}

// Issue 26's figures under load, with the default configuration (and the
// lifted quota's beside them, in the JSON's metrics).
func init() {
	for _, l := range []struct {
		lang, plugin              string
		p50, p95, burst, pacedP95 float64
	}{{"Python", "python", 15, 60, 30, 15}, {"R", "r", 20, 150, 50, 15}} {
		bench := []string{"BenchmarkUnderLoad/default/" + l.plugin}
		specs = append(specs,
			spec{figure: "back-to-back stateless " + l.lang + ", p50 (default config)", benchmarks: bench, measured: "b2b-p50-ms", unit: "ms",
				goal: fmt.Sprintf("≤ %.0f ms", l.p50), pass: atMost(l.p50)},
			spec{figure: "back-to-back stateless " + l.lang + ", p95 (default config)", benchmarks: bench, measured: "b2b-p95-ms", unit: "ms",
				goal: fmt.Sprintf("≤ %.0f ms", l.p95), pass: atMost(l.p95)},
			spec{figure: "burst of 8 " + l.lang + " after an earlier burst, p50 (default config)", benchmarks: bench, measured: "burst8-p50-ms", unit: "ms",
				goal: fmt.Sprintf("≤ %.0f ms", l.burst), pass: atMost(l.burst)},
			spec{figure: "sustained back-to-back " + l.lang + " vs bare podman run sequential (default config)", benchmarks: bench,
				measured: "runs-per-s", baseline: "podman-runs-per-s", unit: "runs/s", goal: "≥ 2×",
				pass: func(m, base float64, _ Metrics) bool { return base > 0 && m/base >= 2 }},
			spec{figure: "paced (one call a second) " + l.lang + ", p95 (default config)", benchmarks: bench, measured: "paced-p95-ms", unit: "ms",
				goal: fmt.Sprintf("≤ %.0f ms", l.pacedP95), pass: atMost(l.pacedP95)},
		)
	}
	for _, l := range []struct{ lang, plugin string }{{"Python", "python"}, {"R", "r"}} {
		specs = append(specs, spec{figure: "stateless " + l.lang + ", cold (pool off), default config vs bare podman run --rm",
			benchmarks: []string{"BenchmarkStatelessColdDefault/" + l.plugin}, measured: "forge-median-ms", baseline: "podman-run-median-ms", unit: "ms", goal: "reported",
			note: func(all Metrics) string {
				if _, ok := all["phase-create-ms"]; !ok {
					return ""
				}
				return fmt.Sprintf("before create %.0f, create %.0f, start %.0f, runner ready %.0f, code to answer %.0f ms; bare podman run of true %.0f ms",
					all["phase-before-create-ms"], all["phase-create-ms"], all["phase-start-ms"], all["phase-runner-ready-ms"], all["phase-answer-ms"], all["podman-run-true-median-ms"])
			}})
	}
	// The isolation column: gVisor (measured) against runc (baseline),
	// both in BenchmarkIsolationTable's run, default configuration.
	iso := []string{"BenchmarkIsolationTable"}
	ratioAtMost := func(x float64) func(m, base float64, _ Metrics) bool {
		return func(m, base float64, _ Metrics) bool { return base > 0 && m/base <= x }
	}
	gv := func(figure, metric, unit, goal string, pass func(m, base float64, _ Metrics) bool) spec {
		u := strings.ToLower(unit)
		return spec{figure: "gVisor vs runc: " + figure, benchmarks: iso, measured: metric + "-gvisor-" + u, baseline: metric + "-runc-" + u,
			unit: unit, goal: goal, pass: pass}
	}
	specs = append(specs,
		gv("cold start, Python print(1), pool off", "cold", "ms", "≤ 1.5×", ratioAtMost(1.5)),
		gv("warm Python print(1), one call a second, p95", "paced-python-p95", "ms", "≤ 15 ms", atMost(15)),
		gv("warm R cat(1), one call a second, p95", "paced-r-p95", "ms", "≤ 20 ms", atMost(20)),
		gv("warm Python print(1), back to back, p50", "b2b-python-p50", "ms", "reported", nil),
		gv("session execute y = 1", "session", "ms", "≤ 2 ms over", func(m, base float64, _ Metrics) bool { return m-base <= 2 }),
		gv("import numpy, pandas in a run", "import", "ms", "≤ 1.5×", ratioAtMost(1.5)),
		gv("2,000 stat + 200 small files in /tmp", "syscalls", "ms", "≤ 3×", ratioAtMost(3)),
	)
	for _, p := range []string{"python", "r", "jupyter", "irkernel"} {
		specs = append(specs, gv("idle pooled "+p+" sandbox, host memory", "idle-"+p, "MB", "≤ 60 MB", atMost(60)))
	}
	specs = append(specs, spec{figure: "idle memory of the pools at default sizes (the containers)", benchmarks: []string{"BenchmarkUnderLoad/default/idle"},
		measured: "pools-idle-mb", unit: "MB", goal: "≤ 400 MB", pass: atMost(400),
		note: func(all Metrics) string {
			return fmt.Sprintf("%.0f containers; server + plugins PSS %.0f MB", all["pooled-containers"], all["server-pss-mb"])
		}})
}

// Table builds the rows from parsed metrics.
func Table(ran map[string]Metrics) []Row {
	var rows []Row
	for _, s := range specs {
		r := Row{Figure: s.figure, Unit: s.unit, Goal: s.goal, Result: "not run", Benchmark: strings.Join(s.benchmarks, " or ")}
		var all Metrics
		for _, name := range s.benchmarks {
			if m, ok := ran[name]; ok {
				all, r.Benchmark = m, name
				break
			}
		}
		if all == nil {
			rows = append(rows, r)
			continue
		}
		m, ok := all[s.measured]
		if !ok {
			r.Result, r.Note = "not run", "no "+s.measured+" metric"
			rows = append(rows, r)
			continue
		}
		r.Measured = &m
		base := 0.0
		if s.baseline != "" {
			if b, ok := all[s.baseline]; ok {
				base = b
				r.Baseline = &b
				if b > 0 {
					ratio := m / b
					r.Ratio = &ratio
				}
			}
		}
		r.Result = "reported"
		if s.pass != nil {
			r.Result = "FAIL"
			if s.pass(m, base, all) {
				r.Result = "pass"
			}
		}
		if s.note != nil {
			r.Note = s.note(all)
		}
		rows = append(rows, r)
	}
	return rows
}

func num(p *float64, format string) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf(format, *p)
}

// Print writes the rows as an aligned table.
func Print(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tmeasured (median)\tbaseline (same run)\tratio\tgoal\tresult\tnote")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Figure, num(r.Measured, "%.2f "+r.Unit), num(r.Baseline, "%.2f "+r.Unit), num(r.Ratio, "%.2f×"), r.Goal, r.Result, r.Note)
	}
	tw.Flush()
}

// Markdown writes the rows as a Markdown table (docs/performance.md).
func Markdown(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| figure | measured (median) | baseline (same run) | ratio | goal | result | note |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", r.Figure, num(r.Measured, "%.2f "+r.Unit), num(r.Baseline, "%.2f "+r.Unit), num(r.Ratio, "%.2f×"), r.Goal, r.Result, r.Note)
	}
}

func main() {
	jsonOut := flag.String("json", "", "also write the table and every metric as JSON to this file")
	md := flag.Bool("markdown", false, "print a Markdown table")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: benchtable [-json FILE] [-markdown] BENCH_OUTPUT... (go test -bench output; none: stdin)")
		flag.PrintDefaults()
	}
	flag.Parse()
	ran := map[string]Metrics{}
	read := func(r io.Reader, name string) {
		m, err := Parse(r)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: %s: %v\n", name, err)
			os.Exit(1)
		}
		for k, v := range m {
			ran[k] = v
		}
	}
	if flag.NArg() == 0 {
		read(os.Stdin, "stdin")
	}
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: %v\n", err)
			os.Exit(1)
		}
		read(f, name)
		f.Close()
	}
	rows := Table(ran)
	if *md {
		Markdown(os.Stdout, rows)
	} else {
		Print(os.Stdout, rows)
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"time": time.Now().UTC().Format(time.RFC3339), "rows": rows, "metrics": ran}, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: %v\n", err)
			os.Exit(1)
		}
	}
}
