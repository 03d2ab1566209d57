package plugin

import (
	"math"
	"os"
	"strconv"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/sdk/internal/shim"
)

// MaxMessageEnv is how the core tells a plugin process the gRPC message
// limit of its connections: the plugin's server exists before any request
// could carry it.
const MaxMessageEnv = "MCP_FORGE_MAX_MESSAGE_BYTES"

// DefaultMaxMessage is the message limit when the core names none.
const DefaultMaxMessage = shim.DefaultMaxMessage

// headroom covers what a message carries besides the configured payloads:
// a runner script, environment, notices, tracebacks, encoding overhead.
const headroom = 16 << 20

// MessageLimit is the gRPC message size that the connections between the
// core and its plugins need for the given execution limits (bytes): a
// request carries the code, and the plugin's container request carries it
// again with a runner; a result carries stdout and stderr (each up to
// maxOutput, and up to twice that once invalid UTF-8 is replaced), the
// runner's envelope (read up to 4×maxOutput + 1 MiB) and images (up to
// 4×maxImage in all).
func MessageLimit(maxCode, maxOutput, maxImage int64) int {
	n := maxCode + 8*maxOutput + 4*maxImage + headroom
	if n < 0 || n > math.MaxInt32 {
		return math.MaxInt32 // gRPC's own ceiling
	}
	return max(int(n), 4<<20)
}

// maxMessageFromEnv reads the limit the core set, or the default.
func maxMessageFromEnv(log hclog.Logger) int {
	v := os.Getenv(MaxMessageEnv)
	if v == "" {
		return DefaultMaxMessage
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		log.Warn("ignoring an invalid message limit from the core", "env", MaxMessageEnv, "value", v, "using", DefaultMaxMessage)
		return DefaultMaxMessage
	}
	return n
}
