// Package egress is what a run may reach by host name (issue 24,
// docs/network.md): a run is granted the hosts it asked for that the
// operator's [network] policy allows (Policy.Grant), within the grant's
// budgets; the Grant checks each target, counts connections and bytes,
// cuts its connections when it is spent or closed and writes their audit
// lines (host, port, address, bytes, duration, outcome, rule), never a
// payload, a path or a query string. A run's Channel (channel.go) is a
// unix socket served for its grant by the egress proxy
// (core/egress/proxy), mounted into its sandbox with the forwarder that
// carries connections from 127.0.0.1 there.
package egress

import (
	"github.com/mcp-forge/mcp-forge/core/audit"
)

// Rules of refusals and cuts, each in the audit line of the connection or
// the grant it refused.
const (
	RuleHost              = "network-host"               // a name that is not granted (or not allowed, at grant time)
	RulePort              = "network-port"               // a granted host on a port that is not
	RuleIPLiteral         = "network-ip-literal"         // an IP address that is not granted
	RuleAddress           = "network-address"            // a name resolving only to refused addresses
	RuleResolve           = "network-resolve"            // a name that does not resolve
	RuleRequest           = "network-request"            // a malformed or unsupported request
	RuleHeaders           = "network-request-headers"    // request headers over the limit
	RuleHeaderTimeout     = "network-header-timeout"     // request headers that did not arrive in time
	RuleBudgetConnections = "network-budget-connections" // network.max_connections spent
	RuleBudgetUpload      = "network-budget-upload"      // network.max_upload spent
	RuleBudgetDownload    = "network-budget-download"    // network.max_download spent
	RuleBudgetDuration    = "network-budget-duration"    // network.max_duration passed
	RuleClosed            = "network-grant-closed"       // the run ended
	RuleApproval          = "network-approval"           // approval required and not given
	RuleAudit             = "network-audit"              // the audit log cannot be written
	RuleEmpty             = "network-empty"              // a grant of nothing
	RuleNotGranted        = "network-not-granted"        // a container intent naming a channel not opened for its plugin
	RuleOpenConnections   = "network-open-connections"   // past MaxOpen client connections of a grant at once (or the proxy's MaxOpenAll)
)

// RuleHeader names the rule of a refusal in the proxy's answer, for code
// that wants to tell refusals apart.
const RuleHeader = "X-Mcp-Forge-Rule"

// Audit events.
const (
	EventGrant      = "network.grant"
	EventConnection = "network.connection"
	// EventSuppressed counts, at the grant's end, the refusals past
	// MaxRefusalLines that were not written one line each.
	EventSuppressed = "network.refusals_suppressed"
)

// Bounds of what one sandbox can make the core hold or write, whatever its
// budget: client connections open at once per grant and in the whole
// proxy (each is a descriptor and a goroutine of the core's), and audit
// lines of refused connections per grant (a loop of refused requests
// would otherwise fill the log). Past MaxOpen a connection is closed at
// once; past MaxRefusalLines refusals are counted and written as one
// EventSuppressed line when the grant ends.
const (
	MaxOpen         = 64
	MaxOpenAll      = 2048
	MaxRefusalLines = 200
)

// Outcomes of a connection, in its audit line.
const (
	OutcomeDone       = "done"        // it ended by itself
	OutcomeRefused    = "refused"     // never dialled: rule says why
	OutcomeCut        = "cut"         // ended by the core: rule says why
	OutcomeDialFailed = "dial-failed" // every checked address refused the connection
	OutcomeError      = "error"       // the upstream or the client broke the protocol
)

// Recorder receives the audit lines of grants and connections; the core's
// audit log (*audit.Logger) is one. When it can report failures
// (audit.Writer) a connection is refused while the log cannot be written.
type Recorder interface {
	Record(audit.Entry)
}
