package testenv

import (
	"context"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// InProcess is a core built in the test process (real Podman, real plugin
// binaries from bin/) that several MCP clients can connect to at once.
type InProcess struct {
	Forge *forge.Forge
}

// NewInProcess builds the core; mutate adjusts the configuration.
func NewInProcess(t testing.TB, mutate func(*config.Config)) *InProcess {
	t.Helper()
	return NewInProcessLacking(t, mutate)
}

// NewInProcessLacking builds the core over a real Podman runtime that also
// reports gaps as missing guarantees, so that the policy's guarantee
// decisions run end to end on a host that enforces everything.
func NewInProcessLacking(t testing.TB, mutate func(*config.Config), gaps ...runtime.Gap) *InProcess {
	t.Helper()
	Require(t)
	Binary(t)
	base := BaseDir(t)
	cfg := config.Default()
	cfg.Volumes.BasePath = base
	cfg.Security.AuditLog = filepath.Join(base, "audit.log")
	cfg.Server.PluginDir = filepath.Join(RepoRoot(), "bin")
	if Kube() {
		applyKube(t, &cfg)
	}
	if GVisor() {
		cfg.Security.Isolation = runtime.IsolationGVisor
	}
	if mutate != nil {
		mutate(&cfg)
	}
	// No watchdog runs for a core in the test process (serve starts it):
	// its sandboxes are not lifetime-bound, which the policy refuses
	// unless waived; the test's cleanups remove them instead.
	if !slices.Contains(cfg.Security.Waive, string(runtime.LifetimeBound)) {
		cfg.Security.Waive = append(cfg.Security.Waive, string(runtime.LifetimeBound))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := forge.NewWithGaps(ctx, cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn}), gaps...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return &InProcess{Forge: f}
}

// Connect attaches a new MCP client over in-memory transports.
func (p *InProcess) Connect(t testing.TB) *mcp.ClientSession {
	t.Helper()
	return p.connect(t, nil)
}

// ConnectCounting is Connect, and the bytes of every message either way
// (their JSON-RPC encoding) counted in n.
func (p *InProcess) ConnectCounting(t testing.TB, n *atomic.Int64) *mcp.ClientSession {
	t.Helper()
	return p.connect(t, n)
}

// countingTransport counts the encoded bytes of the messages of its
// connections.
type countingTransport struct {
	mcp.Transport
	n *atomic.Int64
}

func (t countingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	return &countingConn{Connection: c, n: t.n}, err
}

type countingConn struct {
	mcp.Connection
	n *atomic.Int64
}

func (c *countingConn) count(m jsonrpc.Message) {
	if b, err := jsonrpc.EncodeMessage(m); err == nil {
		c.n.Add(int64(len(b)))
	}
}

func (c *countingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if err == nil {
		c.count(m)
	}
	return m, err
}

func (c *countingConn) Write(ctx context.Context, m jsonrpc.Message) error {
	c.count(m)
	return c.Connection.Write(ctx, m)
}

func (p *InProcess) connect(t testing.TB, n *atomic.Int64) *mcp.ClientSession {
	t.Helper()
	var ct mcp.Transport
	ct, st := mcp.NewInMemoryTransports()
	if n != nil {
		ct = countingTransport{Transport: ct, n: n}
	}
	ctx := context.Background()
	if _, err := p.Forge.MCP.MCP().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "inproc", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
