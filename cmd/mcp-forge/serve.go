package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/doctor"
	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/version"
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
	f, err := forge.New(ctx, cfg, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		fmt.Fprintln(os.Stderr, "mcp-forge:", err)
		return 1
	}
	defer f.Close()
	log.Info("serving MCP on stdio", "version", version.Version, "plugins", strings.Join(f.Plugins.Names(), ","))
	if err := f.MCP.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
		log.Error("MCP session ended", "error", err)
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

func pluginCheck(cfg config.Config) doctor.Check {
	return func(ctx context.Context) []doctor.Result {
		dir := forge.PluginDir(cfg)
		entries := plugins.Discover(cfg, dir)
		if len(entries) == 0 {
			return []doctor.Result{{Name: "plugins", Status: doctor.Fail, Detail: "no plugins in " + dir, Fix: "run `make build` (plugins go next to the mcp-forge binary) or set server.plugin_dir"}}
		}
		var out []doctor.Result
		for _, e := range entries {
			p, err := plugins.Probe(ctx, e)
			if err != nil {
				out = append(out, doctor.Result{Name: "plugin " + e.Name, Status: doctor.Fail, Detail: err.Error(), Fix: "rebuild with `make build`"})
				continue
			}
			out = append(out, doctor.Result{Name: "plugin " + e.Name, Status: doctor.OK, Detail: fmt.Sprintf("%s %s, API v%d, checksum %s", p.Type, p.Version, p.APIVersion, p.Checksum)})
		}
		return out
	}
}
