package bench

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
	"time"
)

// coldPhases is where a cold stateless run's time goes, read from the
// server's audit log (nanosecond timestamps, the runtime's own durations):
// the medians over the runs it holds, in milliseconds.
type coldPhases struct {
	runs int
	// before: the request's admission, policy and plugin until the create
	// is sent; create and start: the runtime's calls; ready: the runner's
	// start (interpreter, imports) until the plugin's dial succeeds;
	// answer: the code sent, run and answered, the run completed.
	before, create, start, ready, answer float64
}

// readColdPhases parses audit lines: a run's execution.request, its
// container's container.create (run_id), container.start, the first
// channel.open of that container and the run's execution.complete.
func readColdPhases(tb testing.TB, auditLog string) coldPhases {
	f, err := os.Open(auditLog)
	if err != nil {
		tb.Fatalf("the audit log: %v", err)
	}
	defer f.Close()
	type run struct {
		request, created, started, opened, done time.Time
		createMs, startMs                       float64
	}
	runs := map[string]*run{}
	byCtr := map[string]*run{}
	get := func(id string) *run {
		if runs[id] == nil {
			runs[id] = &run{}
		}
		return runs[id]
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			Timestamp string         `json:"timestamp"`
			Event     string         `json:"event"`
			Success   bool           `json:"success"`
			Details   map[string]any `json:"details"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil || !e.Success {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, e.Timestamp)
		if err != nil {
			continue
		}
		str := func(k string) string { s, _ := e.Details[k].(string); return s }
		num := func(k string) float64 { n, _ := e.Details[k].(float64); return n }
		switch e.Event {
		case "execution.request":
			get(str("run_id")).request = ts
		case "container.create":
			if id := str("run_id"); id != "" {
				r := get(id)
				r.created, r.createMs = ts, num("duration_ms")
				byCtr[str("container_id")] = r
			}
		case "container.start":
			if r := byCtr[str("container_id")]; r != nil {
				r.started, r.startMs = ts, num("duration_ms")
			}
		case "channel.open":
			if r := byCtr[str("container_id")]; r != nil && r.opened.IsZero() {
				r.opened = ts
			}
		case "execution.complete":
			if r := runs[str("run_id")]; r != nil {
				r.done = ts
			}
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	var before, create, start, ready, answer []float64
	for _, r := range runs {
		if r.request.IsZero() || r.created.IsZero() || r.started.IsZero() || r.opened.IsZero() || r.done.IsZero() {
			continue // a warm run, or one the log does not hold whole
		}
		before = append(before, ms(r.created.Sub(r.request))-r.createMs)
		create = append(create, r.createMs)
		start = append(start, r.startMs)
		ready = append(ready, ms(r.opened.Sub(r.started)))
		answer = append(answer, ms(r.done.Sub(r.opened)))
	}
	return coldPhases{runs: len(create), before: median(before), create: median(create), start: median(start), ready: median(ready), answer: median(answer)}
}

// report adds the phases to a benchmark's metrics.
func (p coldPhases) report(b *testing.B) {
	if p.runs == 0 {
		b.Errorf("no cold run is whole in the audit log: the phases cannot be told")
		return
	}
	b.ReportMetric(p.before, "phase-before-create-ms")
	b.ReportMetric(p.create, "phase-create-ms")
	b.ReportMetric(p.start, "phase-start-ms")
	b.ReportMetric(p.ready, "phase-runner-ready-ms")
	b.ReportMetric(p.answer, "phase-answer-ms")
	b.Logf("cold path over %d runs (medians): before create %.1f ms, create %.1f ms, start %.1f ms, runner ready %.1f ms, code to answer %.1f ms",
		p.runs, p.before, p.create, p.start, p.ready, p.answer)
}
