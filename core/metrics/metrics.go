// Package metrics exports MCP-Forge's Prometheus metrics: executions by
// tenant, language, backend and outcome, their latency, live sessions,
// quota and policy refusals, plugin restarts and HTTP responses. Label
// values are bounded: tenants, languages and backends come from the
// configuration and the loaded plugins, anything else is "other".
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcp-forge/mcp-forge/core/audit"
)

// Other replaces a label value outside the known set.
const Other = "other"

// Source is what the collectors read at scrape time.
type Source struct {
	// Sessions counts live sessions per tenant.
	Sessions func() map[string]int
	// PluginRestarts counts restarts per plugin since start.
	PluginRestarts func() map[string]int
	// WarmPools are the warm pools of the backends that keep one.
	WarmPools func() map[string]Pool
}

// Pool is a backend's warm pool at scrape time (backend.WarmPool).
type Pool struct {
	Target, Ready, Starting, InUse int   // target: summed over its keys
	Hits, Misses, Grown, Shrunk    int64 // since the plugin started
}

// Metrics is one server's registry.
type Metrics struct {
	reg        *prometheus.Registry
	executions *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	calls      *prometheus.CounterVec
	callTime   *prometheus.HistogramVec
	quota      *prometheus.CounterVec
	refusals   *prometheus.CounterVec
	http       *prometheus.CounterVec

	mu    sync.RWMutex
	known map[string]map[string]bool // label → allowed values
	runs  map[string]string          // run id → language, between request and completion
}

// New registers every metric. tenants, languages and backends bound the
// label values.
func New(src Source, tenants, languages, backends []string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), known: map[string]map[string]bool{}, runs: map[string]string{}}
	m.Allow("tenant", tenants...)
	m.Allow("language", languages...)
	m.Allow("backend", backends...)
	buckets := []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800}
	m.executions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcp_forge_executions_total",
		Help: "Executions the engine ran, by tenant, language, backend and outcome (success, error: the code failed, rejected: a bad request, server_error)."},
		[]string{"tenant", "language", "backend", "outcome"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mcp_forge_execution_duration_seconds",
		Help: "Run time of an execution as the backend measured it.", Buckets: buckets},
		[]string{"language", "backend"})
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcp_forge_tool_calls_total",
		Help: "MCP tool calls by tenant, tool and outcome, including calls refused before the engine (quotas)."},
		[]string{"tenant", "tool", "outcome"})
	m.callTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mcp_forge_tool_call_duration_seconds",
		Help: "Wall-clock time of a tool call as the server saw it: queueing, container or kernel start, the run.", Buckets: buckets},
		[]string{"tool"})
	m.quota = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcp_forge_quota_refusals_total",
		Help: "Executions refused by a tenant quota."}, []string{"tenant", "quota"})
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcp_forge_policy_refusals_total",
		Help: "Container operations refused by the policy, by rule."}, []string{"rule"})
	m.http = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcp_forge_http_responses_total",
		Help: "HTTP responses of the MCP endpoint by status code."}, []string{"code"})
	m.reg.MustRegister(m.executions, m.latency, m.calls, m.callTime, m.quota, m.refusals, m.http,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&sourceCollector{m: m, src: src})
	return m
}

// Allow adds label values (a plugin loaded later brings its languages).
func (m *Metrics) Allow(label string, values ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.known[label] == nil {
		m.known[label] = map[string]bool{}
	}
	for _, v := range values {
		m.known[label][v] = true
	}
}

func (m *Metrics) bound(label, v string) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.known[label][v] {
		return v
	}
	return Other
}

// ToolCall counts one tool call that reached a tool (unknown tools are
// protocol errors and never get here, so the tool label is bounded).
func (m *Metrics) ToolCall(tenant, tool, outcome string, d time.Duration) {
	m.calls.WithLabelValues(m.bound("tenant", tenant), tool, outcome).Inc()
	m.callTime.WithLabelValues(tool).Observe(d.Seconds())
}

// QuotaRefused counts a call refused by a quota.
func (m *Metrics) QuotaRefused(tenant, quota string) {
	m.quota.WithLabelValues(m.bound("tenant", tenant), quota).Inc()
}

// Audit reads executions and policy refusals from the audit stream: the
// engine's own record of what ran where, so the counts match the log.
func (m *Metrics) Audit(e audit.Entry) {
	run, _ := e.Details["run_id"].(string)
	switch e.Event {
	case audit.SecurityViolation:
		rule, _ := e.Details["rule"].(string)
		if rule == "" {
			rule = "unknown"
		}
		m.refusals.WithLabelValues(rule).Inc()
	case audit.ExecutionRequest:
		lang, _ := e.Details["language"].(string)
		m.mu.Lock()
		m.runs[run] = lang
		m.mu.Unlock()
	case audit.ExecutionComplete:
		m.mu.Lock()
		lang := m.runs[run]
		delete(m.runs, run)
		m.mu.Unlock()
		backend, _ := e.Details["backend"].(string)
		outcome := "success"
		switch {
		case e.Success:
		case e.Error == "":
			outcome = "error"
		case e.Severity == audit.Warning:
			outcome = "rejected"
		default:
			outcome = "server_error"
		}
		lang, backend = m.bound("language", lang), m.bound("backend", backend)
		m.executions.WithLabelValues(m.bound("tenant", e.UserID), lang, backend, outcome).Inc()
		var ms float64
		switch d := e.Details["duration_ms"].(type) {
		case int64:
			ms = float64(d)
		case int:
			ms = float64(d)
		case float64:
			ms = d
		}
		m.latency.WithLabelValues(lang, backend).Observe(ms / 1000)
	}
}

// HTTPResponse counts a response of the MCP endpoint.
func (m *Metrics) HTTPResponse(code int) { m.http.WithLabelValues(strconv.Itoa(code)).Inc() }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is the underlying registry (tests gather from it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

var (
	sessionsDesc = prometheus.NewDesc("mcp_forge_sessions_live", "Live stateful sessions per tenant.", []string{"tenant"}, nil)
	restartsDesc = prometheus.NewDesc("mcp_forge_plugin_restarts_total", "Plugin restarts after a crash, per plugin.", []string{"plugin"}, nil)
	poolDescs    = map[string]*prometheus.Desc{
		"target":   prometheus.NewDesc("mcp_forge_warm_pool_target", "Ready containers a backend's warm pool refills to now (grown by misses, shrunk when quiet).", []string{"plugin"}, nil),
		"ready":    prometheus.NewDesc("mcp_forge_warm_pool_ready", "Ready containers in a backend's warm pool.", []string{"plugin"}, nil),
		"starting": prometheus.NewDesc("mcp_forge_warm_pool_starting", "Containers a backend's warm pool is starting.", []string{"plugin"}, nil),
		"in_use":   prometheus.NewDesc("mcp_forge_warm_pool_in_use", "Warm containers running a run.", []string{"plugin"}, nil),
		"hits":     prometheus.NewDesc("mcp_forge_warm_pool_hits_total", "Runs served by a warm container.", []string{"plugin"}, nil),
		"misses":   prometheus.NewDesc("mcp_forge_warm_pool_misses_total", "Runs that found no warm container and ran cold.", []string{"plugin"}, nil),
		"grown":    prometheus.NewDesc("mcp_forge_warm_pool_grown_total", "Misses that grew a warm pool's target.", []string{"plugin"}, nil),
		"shrunk":   prometheus.NewDesc("mcp_forge_warm_pool_shrunk_total", "Quiet periods that shrank a warm pool's target.", []string{"plugin"}, nil),
	}
)

// sourceCollector reads live values at scrape time, so gauges never drift
// from the engine's own state.
type sourceCollector struct {
	m   *Metrics
	src Source
}

func (c *sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc
	ch <- restartsDesc
	for _, d := range poolDescs {
		ch <- d
	}
}

func (c *sourceCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src.Sessions != nil {
		per := map[string]int{}
		for t, n := range c.src.Sessions() {
			per[c.m.bound("tenant", t)] += n
		}
		for _, t := range c.m.values("tenant") {
			if _, ok := per[t]; !ok {
				per[t] = 0
			}
		}
		for t, n := range per {
			ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(n), t)
		}
	}
	if c.src.PluginRestarts != nil {
		for p, n := range c.src.PluginRestarts() {
			ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(n), p)
		}
	}
	if c.src.WarmPools != nil {
		for p, w := range c.src.WarmPools() {
			for name, v := range map[string]float64{"target": float64(w.Target), "ready": float64(w.Ready), "starting": float64(w.Starting), "in_use": float64(w.InUse)} {
				ch <- prometheus.MustNewConstMetric(poolDescs[name], prometheus.GaugeValue, v, p)
			}
			for name, v := range map[string]int64{"hits": w.Hits, "misses": w.Misses, "grown": w.Grown, "shrunk": w.Shrunk} {
				ch <- prometheus.MustNewConstMetric(poolDescs[name], prometheus.CounterValue, float64(v), p)
			}
		}
	}
}

func (m *Metrics) values(label string) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.known[label]))
	for v := range m.known[label] {
		out = append(out, v)
	}
	return out
}
