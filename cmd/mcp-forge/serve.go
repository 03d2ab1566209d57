package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/doctor"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/core/fsquota"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/procid"
	"github.com/mcp-forge/mcp-forge/core/route"
	"github.com/mcp-forge/mcp-forge/core/runtime/podman"
	"github.com/mcp-forge/mcp-forge/core/version"
	"github.com/mcp-forge/mcp-forge/core/watchdog"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

func newLogger(cfg config.Config) (hclog.Logger, func(), error) {
	out, closeFn := os.Stderr, func() {}
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

func cmdServe(ctx context.Context, _ []string) int {
	cfg, ok := loadConfig()
	if !ok {
		return 1
	}
	log, closeLog, err := newLogger(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp-forge:", err)
		return 1
	}
	defer closeLog()
	if stop := cpuProfile(log); stop != nil {
		defer stop()
	}
	addr, useHTTP := httpAddress(cfg)
	if useHTTP {
		return serveHTTP(ctx, cfg, addr, log)
	}
	if isTerminal(os.Stdin) {
		fmt.Fprintf(os.Stderr, `mcp-forge %s is an MCP server on stdio: an MCP host starts it and talks JSON-RPC on stdin/stdout.
To connect a host, add this to its configuration (Claude Desktop: claude_desktop_config.json;
Claude Code: claude mcp add-json mcp-forge '<the inner object>'):

%s
Or try it with the Inspector: npx @modelcontextprotocol/inspector %s serve
Waiting for a client on stdin (Ctrl-C to quit).
`, version.Version, mcpJSON(), selfPath())
	}
	// The watchdog comes first: no container may exist that it would not
	// remove if this process were killed.
	wd, err := startWatchdog(log)
	if err != nil {
		log.Error("cannot start", "error", err)
		fmt.Fprintln(os.Stderr, "mcp-forge:", err)
		return 1
	}
	defer func() {
		if err := wd.Stop(10 * time.Second); err != nil {
			log.Warn("watchdog", "error", err)
		}
	}()
	f, err := forge.New(ctx, cfg, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		fmt.Fprintln(os.Stderr, "mcp-forge:", err)
		return 1
	}
	defer f.Close()
	f.MCP.SetIdentity(func(mcp.Request) (string, error) { return mcpserver.StdioOwner, nil })
	log.Info("serving MCP on stdio", "version", version.Version, "plugins", strings.Join(f.Plugins.Names(), ","))
	if err := f.MCP.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
		log.Error("MCP session ended", "error", err)
		return 1
	}
	return 0
}

// startWatchdog starts `mcp-forge watchdog <this server's id>` (see
// core/watchdog): it removes this server's containers if it dies.
func startWatchdog(log hclog.Logger) (*watchdog.Handle, error) {
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

// cmdWatchdog is the watchdog process: it waits for its server's end on the
// inherited pipe, then removes the server's containers.
func cmdWatchdog(_ context.Context, args []string) int {
	pipe := watchdog.Pipe()
	if len(args) != 1 || watchdog.CheckPipe(pipe) != nil {
		fmt.Fprintln(os.Stderr, "mcp-forge watchdog:", watchdog.ErrNoPipe)
		return 2
	}
	cfg, ok := loadConfig()
	if !ok {
		return 1
	}
	log, closeLog, err := newLogger(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp-forge watchdog:", err)
		return 1
	}
	defer closeLog()
	log = log.Named("watchdog")
	n, err := watchdog.Run(pipe, watchdog.Options{
		ServerID: args[0],
		Runtime:  podman.New(cfg.Server.PodmanSocket),
		Log:      log,
		Release:  func() (int, error) { return fsquota.ReleaseOwner(cfg.Volumes.BasePath, args[0], log.Named("quota")) },
		Audit: func() (audit.Recorder, func(), error) {
			al, err := audit.Open(cfg.Security.AuditLog, int64(cfg.Security.AuditMaxSize), cfg.Security.AuditKeep)
			if err != nil {
				return nil, nil, err
			}
			al.OnError(func(err error) { log.Error("audit log write failed", "error", err) })
			return al, func() { al.Close() }, nil
		},
	})
	if n > 0 {
		log.Warn("removed the containers of a server that ended without stopping them", "server", args[0], "count", n)
	}
	if err != nil {
		log.Error("sweep incomplete", "error", err)
		return 1
	}
	return 0
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

func mcpJSON() string {
	args := []string{"serve"}
	if configPath != "" {
		abs, _ := filepath.Abs(configPath)
		args = []string{"--config", abs, "serve"}
	}
	snippet := map[string]any{"mcpServers": map[string]any{"mcp-forge": map[string]any{"command": selfPath(), "args": args}}}
	b, _ := json.MarshalIndent(snippet, "", "  ")
	return string(b) + "\n"
}

func printMCPJSON() int {
	fmt.Print(mcpJSON())
	return 0
}

func cmdPlugins(ctx context.Context, args []string) int {
	if len(args) > 0 && args[0] != "list" {
		fmt.Fprintf(os.Stderr, "mcp-forge plugins: unknown subcommand %q (list)\n", args[0])
		return 2
	}
	cfg, ok := loadConfig()
	if !ok {
		return 1
	}
	entries := plugins.Discover(cfg, forge.PluginDir(cfg))
	if len(entries) == 0 {
		fmt.Printf("no plugins found in %s; run `make build`\n", forge.PluginDir(cfg))
		return 1
	}
	code := 0
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tVERSION\tAPI\tCHECKSUM\tPATH")
	var problems []string
	for _, e := range entries {
		p, err := plugins.Probe(ctx, e)
		if err != nil {
			fmt.Fprintf(tw, "%s\t?\t?\t?\t%s\t%s\n", e.Name, p.Checksum, e.Path)
			problems = append(problems, fmt.Sprintf("%s: %v", e.Name, err))
			code = 1
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", e.Name, p.Type, p.Version, p.APIVersion, p.Checksum, e.Path)
	}
	tw.Flush()
	for _, p := range problems {
		fmt.Println("error:", p)
	}
	return code
}

// pluginCheck reports each plugin as the core would load it (checksum,
// launch, configuration, capabilities).
func pluginCheck(cfg config.Config, sts []plugins.Status) doctor.Check {
	return func(ctx context.Context) []doctor.Result {
		if len(sts) == 0 {
			dir := forge.PluginDir(cfg)
			return []doctor.Result{{Name: "plugins", Status: doctor.Fail, Detail: "no plugins in " + dir, Fix: "run `make build` (plugins go next to the mcp-forge binary) or set server.plugin_dir"}}
		}
		var out []doctor.Result
		for _, st := range sts {
			if st.Error != "" {
				out = append(out, doctor.Result{Name: "plugin " + st.Name, Status: doctor.Fail, Detail: st.Error, Fix: "rebuild with `make build`, or fix [plugins." + st.Name + "]"})
				continue
			}
			c := st.Capabilities
			detail := fmt.Sprintf("%s %s, API v%d, checksum %s", st.Type, st.Version, st.APIVersion, st.Checksum)
			if st.Type == plugin.TypeBackend {
				mode := "stateless"
				if c.Stateful {
					mode = "sessions"
				}
				detail += fmt.Sprintf(": %s (%s), image %s", strings.Join(c.Languages, ", "), mode, c.Image)
			}
			out = append(out, doctor.Result{Name: "plugin " + st.Name, Status: doctor.OK, Detail: detail})
		}
		langs, err := engine.Check(cfg, policy.New(policy.FromConfig(cfg), nil), sts)
		if err != nil {
			return append(out, doctor.Result{Name: "routing", Status: doctor.Fail, Detail: strings.ReplaceAll(err.Error(), "\n", "; "),
				Fix: "set [execution.default_backend] / [sessions.default_backend] or fix [plugins.*] (the server does not start like this)"})
		}
		for _, l := range langs {
			out = append(out, doctor.Result{Name: "execute_" + l.ID, Status: doctor.OK, Detail: fmt.Sprintf("stateless: %s; sessions: %s", offer(l.Stateless), offer(l.Session))})
		}
		return out
	}
}

func offer(o route.Offer) string {
	if o.Backend == "" {
		return "none (" + o.Unavailable + ")"
	}
	return o.Backend
}
