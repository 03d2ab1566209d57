package proxy

import (
	"time"

	"github.com/mcp-forge/mcp-forge/core/egress"
)

// connLog is what the audit line of one connection says.
type connLog struct {
	start   time.Time
	method  string
	host    string
	port    int
	address string
	up      *egress.Upstream
	// credential: an intercepted connection (intercept.go), and the
	// upstream connections it opened.
	credential string
	ups        []*egress.Upstream
	outcome    string
	rule       string
	err        string
}

// record writes the audit line of one connection of g.
func record(g *egress.Grant, l *connLog) {
	if l.outcome == egress.OutcomeRefused && g.CountRefusal() {
		return // counted: Close writes how many
	}
	d := map[string]any{"host": l.host, "port": l.port, "method": l.method, "outcome": l.outcome,
		"duration_ms": time.Since(l.start).Milliseconds()}
	if l.address != "" {
		d["address"] = l.address
	}
	if l.up != nil {
		d["bytes_up"], d["bytes_down"] = l.up.Sent(), l.up.Received()
	}
	if l.credential != "" {
		var up, down int64
		for _, c := range l.ups {
			up, down = up+c.Sent(), down+c.Received()
		}
		d["cred"], d["bytes_up"], d["bytes_down"] = l.credential, up, down
	}
	if l.rule != "" {
		d["rule"] = l.rule
	}
	g.Record(egress.EventConnection, l.outcome == egress.OutcomeDone, l.err, d)
}
