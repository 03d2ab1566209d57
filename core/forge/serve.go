package forge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/forge/commands"
	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/core/procid"
	"github.com/mcp-forge/mcp-forge/core/telemetry"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/version"
	"github.com/mcp-forge/mcp-forge/core/watchdog"
	"github.com/mcp-forge/mcp-forge/sdk/pluginhost"
)

// Version is the core's version.
func Version() string { return version.Version }

// ErrFailed is a command's failure that its own output already reported
// (doctor's failed checks, a missing image, a serve that ended with an
// error it logged): the caller only exits 1.
var ErrFailed = commands.ErrFailed

// Options are what a command was told besides the configuration, and
// where its input and output go.
type Options struct {
	// ConfigPath is the file the configuration came from ("": the
	// defaults). The watchdog reads it; the MCP host snippet names it.
	ConfigPath string
	// HTTPAddr serves streamable HTTP on this address (--http); "" follows
	// server.transport.
	HTTPAddr string
	// MCPIn and MCPOut carry MCP when serving on stdio (nil: the process's
	// stdin and stdout).
	MCPIn  io.Reader
	MCPOut io.Writer
	// Stdin, Stdout and Stderr are the commands' (nil: the process's);
	// Stderr gets serve's hints and its listening line.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// watchdogHandle is a started watchdog (watchdog.Handle).
type watchdogHandle interface {
	Stop(grace time.Duration) error
}

// Serve runs the server until ctx ends: MCP on stdio (what an MCP host
// starts), or streamable HTTP (--http, or server.transport = "http").
func Serve(ctx context.Context, cfg config.Config, o Options) error {
	return serve(ctx, cfg, o, machine)
}

func serve(ctx context.Context, cfg config.Config, o Options, m parts) error {
	log, closeLog, err := NewLogger(cfg)
	if err != nil {
		return err
	}
	defer closeLog()
	if stop := cpuProfile(log); stop != nil {
		defer stop()
	}
	stopTraces, err := telemetry.Setup(cfg.Telemetry, version.Version, log.Named("telemetry"))
	if err != nil {
		return err
	}
	pluginhost.ObserveCalls(telemetry.PluginCall)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTraces(ctx); err != nil {
			log.Warn("the last traces were not exported", "error", err)
		}
	}()
	addr, useHTTP := HTTPAddress(cfg, o.HTTPAddr)
	if cfg.Security.AuditStdout && !useHTTP {
		// Decided here, where --http counts as much as server.transport.
		return errors.New("security.audit_stdout: standard output carries MCP over stdio; copy the audit log there only when serving HTTP (server.transport = \"http\" or --http)")
	}
	if useHTTP {
		// Refuse an unauthenticated public bind before starting anything.
		if err := httpserver.CheckBind(addr, tenant.New(cfg).Authenticated() || cfg.Auth.JWT.Enabled(), cfg.Server.AllowUnauthenticated); err != nil {
			return err
		}
	}
	// The watchdog comes first, whatever the transport: no container may
	// exist that it would not remove if this process were killed.
	wd, err := m.watchdog(o.ConfigPath, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		return err
	}
	defer func() {
		if err := wd.Stop(10 * time.Second); err != nil {
			log.Warn("watchdog", "error", err)
		}
	}()
	m.bound = true
	if useHTTP {
		return serveHTTP(ctx, cfg, addr, log, o.io().Err(), m)
	}
	var t mcp.Transport = &mcp.StdioTransport{}
	if o.MCPIn != nil && o.MCPOut != nil {
		t = &mcp.IOTransport{Reader: io.NopCloser(o.MCPIn), Writer: nopWriteCloser{o.MCPOut}}
	} else if isTerminal(os.Stdin) {
		fmt.Fprintf(o.io().Err(), `mcp-forge %s is an MCP server on stdio: an MCP host starts it and talks JSON-RPC on stdin/stdout.
To connect a host, add this to its configuration (Claude Desktop: claude_desktop_config.json;
Claude Code: claude mcp add-json mcp-forge '<the inner object>'):

%s
Or try it with the Inspector: npx @modelcontextprotocol/inspector %s serve
Waiting for a client on stdin (Ctrl-C to quit).
`, version.Version, MCPJSON(o.ConfigPath), selfPath())
	}
	f, err := build(ctx, cfg, log, m)
	if err != nil {
		log.Error("cannot start", "error", err)
		return err
	}
	defer f.Close()
	f.MCP.SetIdentity(func(mcp.Request) (string, error) { return mcpserver.StdioClient, nil })
	f.MCP.TraceRequests()
	t = f.MCP.Tasks().Transport(t, mcpserver.StdioClient)
	log.Info("serving MCP on stdio", "version", version.Version, "plugins", strings.Join(f.Plugins.Names(), ","))
	if err := f.MCP.Run(ctx, t); err != nil && ctx.Err() == nil {
		log.Error("MCP session ended", "error", err)
		return fmt.Errorf("%w: the MCP session ended: %v", ErrFailed, err)
	}
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// HTTPAddress is where to serve HTTP: flag (--http) wins, else
// server.transport = "http" with server.host:server.port; stdio otherwise.
func HTTPAddress(cfg config.Config, flag string) (string, bool) {
	if flag != "" {
		return flag, true
	}
	if cfg.Server.Transport == "http" {
		return net.JoinHostPort(cfg.Server.Host, strconv.Itoa(cfg.Server.Port)), true
	}
	return "", false
}

func serveHTTP(ctx context.Context, cfg config.Config, addr string, log hclog.Logger, stderr io.Writer, m parts) error {
	f, err := build(ctx, cfg, log, m)
	if err != nil {
		log.Error("cannot start", "error", err)
		return err
	}
	defer f.Close()
	if _, port, err := net.SplitHostPort(addr); err == nil {
		f.httpPort, _ = strconv.Atoi(port) // --http's, which replicas listen on too
	}
	srv, err := httpserver.New(cfg, httpCore{f}, addr, log.Named("http"))
	if err != nil {
		return err
	}
	f.MCP.TraceRequests() // after the tenants' and the forwarding middleware: it wraps them
	log.Info("starting", "version", version.Version, "plugins", strings.Join(f.Plugins.Names(), ","))
	err = srv.Serve(ctx, func(mainAddr, adminAddr string) {
		// One machine-readable line on stderr for supervisors and tests
		// that bind port 0.
		fmt.Fprintf(stderr, "mcp-forge: listening on %s (admin %s)\n", mainAddr, adminAddr)
	})
	if err != nil {
		log.Error("HTTP server failed", "error", err)
		return err
	}
	return nil
}

// NewLogger is the server's log as configured (server.log_file, log_level,
// log_format), and how to close it.
func NewLogger(cfg config.Config) (hclog.Logger, func(), error) {
	out, closeFn := io.Writer(os.Stderr), func() {}
	if cfg.Server.LogFile != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.Server.LogFile), 0o700); err != nil {
			return nil, nil, err
		}
		f, err := os.OpenFile(cfg.Server.LogFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("server.log_file: %w", err)
		}
		out, closeFn = f, func() { f.Close() }
	}
	return hclog.New(&hclog.LoggerOptions{Name: "mcp-forge", Level: hclog.LevelFromString(cfg.Server.LogLevel), Output: out,
		JSONFormat: cfg.Server.LogFormat == "json"}), closeFn, nil
}

// cpuProfile writes a CPU profile of the whole serve to the file named by
// FORGE_CPUPROFILE (for `go tool pprof`), the way the speed work was
// profiled; nil when unset.
func cpuProfile(log hclog.Logger) func() {
	path := os.Getenv("FORGE_CPUPROFILE")
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		log.Warn("no CPU profile", "error", err)
		return nil
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Warn("no CPU profile", "error", err)
		f.Close()
		return nil
	}
	log.Info("writing a CPU profile", "path", path)
	return func() { pprof.StopCPUProfile(); f.Close() }
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// startWatchdog starts `mcp-forge watchdog <this server's id>` (see
// core/watchdog): it removes this server's containers if it dies.
func startWatchdog(configPath string, log hclog.Logger) (watchdogHandle, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot start the watchdog that removes this server's containers if it is killed: %w", err)
	}
	var args []string
	if configPath != "" {
		abs, _ := filepath.Abs(configPath)
		args = append(args, "--config", abs)
	}
	id := procid.Self()
	wd, err := watchdog.Start(exe, append(args, "watchdog", id), os.Stderr)
	if err != nil {
		return nil, fmt.Errorf("cannot start the watchdog that removes this server's containers if it is killed: %w", err)
	}
	log.Debug("watchdog started", "pid", wd.Pid(), "server", id)
	return wd, nil
}

func selfPath() string {
	exe, err := os.Executable()
	if err != nil {
		return "mcp-forge"
	}
	if abs, err := filepath.Abs(exe); err == nil {
		return abs
	}
	return exe
}

// MCPJSON is the mcpServers entry an MCP host needs to start this server
// with the configuration at configPath ("" the defaults).
func MCPJSON(configPath string) string {
	args := []string{"serve"}
	if configPath != "" {
		abs, _ := filepath.Abs(configPath)
		args = []string{"--config", abs, "serve"}
	}
	snippet := map[string]any{"mcpServers": map[string]any{"mcp-forge": map[string]any{"command": selfPath(), "args": args}}}
	b, _ := json.MarshalIndent(snippet, "", "  ")
	return string(b) + "\n"
}
