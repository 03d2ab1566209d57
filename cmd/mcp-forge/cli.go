package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/doctor"
	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/runtime/podman"
	"github.com/mcp-forge/mcp-forge/core/version"
)

type command struct {
	usage   string // arguments after the command name
	maxArgs int    // positional arguments it takes
	summary string
	run     func(ctx context.Context, args []string) int
}

var commands map[string]command

func init() {
	commands = map[string]command{
		"serve":   {"serve [--http ADDR]", 0, "run the MCP server on stdio (what an MCP host starts), or on streamable HTTP", cmdServe},
		"tenant":  {"tenant new-key | hash-key", 1, "make an API key and the sha256 to put in [tenants.NAME]", cmdTenant},
		"doctor":  {"doctor", 0, "check this host: Podman, runtime, cgroups, limits, images, paths, plugins", cmdDoctor},
		"config":  {"config check [FILE] | print | mcp-json", 2, "validate, show or export configuration", cmdConfig},
		"plugins": {"plugins [list]", 1, "show plugins with versions and checksum status", cmdPlugins},
		"images":  {"images", 0, "list the sandbox images and whether they are built", cmdImages},
		"version": {"version", 0, "print the version", func(context.Context, []string) int { fmt.Println("mcp-forge", version.Version); return 0 }},
	}
	// Internal, not listed: serve starts it.
	commands["watchdog"] = command{"watchdog SERVER-ID", 1, "removes a dead server's containers", cmdWatchdog}
	hidden["watchdog"] = true
}

var hidden = map[string]bool{}

func usage(w io.Writer) {
	fmt.Fprintf(w, "mcp-forge %s: run Python and R in sandboxed Podman containers for AI agents, over MCP.\n\n", version.Version)
	fmt.Fprintln(w, "Usage: mcp-forge <command> [args] [--config FILE] [--http ADDR]   (flags may stand anywhere)")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		if !hidden[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-40s %s\n", commands[n].usage, commands[n].summary)
	}
	fmt.Fprintln(w, "\nThe configuration is read from --config, else $FORGE_CONFIG, else built-in defaults.")
	fmt.Fprintln(w, "See forge.toml.example for every option.")
}

var (
	configPath string
	httpAddr   string // --http ADDR: serve streamable HTTP instead of stdio
)

// parseArgs reads the global flags wherever they stand (`mcp-forge --config F
// serve` and `mcp-forge serve --config F` are the same) and returns the
// command and its positional arguments. An unknown flag is an error; "--"
// ends flag parsing.
func parseArgs(args []string) (cmd string, rest []string, err error) {
	fs := flag.NewFlagSet("mcp-forge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&configPath, "config", os.Getenv("FORGE_CONFIG"), "configuration file (TOML)")
	fs.StringVar(&httpAddr, "http", "", "serve MCP over streamable HTTP on this address (serve)")
	var positional []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return "", nil, err
		}
		// Parse stops at the first non-flag argument, or just after "--".
		if consumed := len(args) - fs.NArg(); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, fs.Args()...)
			break
		}
		args = fs.Args()
		if len(args) > 0 {
			positional = append(positional, args[0])
			args = args[1:]
		}
	}
	if len(positional) == 0 {
		return "", nil, nil
	}
	return positional[0], positional[1:], nil
}

func run(args []string) int {
	name, rest, err := parseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		usage(os.Stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcp-forge: %v\n\n", err)
		usage(os.Stderr)
		return 2
	}
	if name == "" {
		usage(os.Stderr)
		return 2
	}
	if name == "help" || name == "-h" {
		usage(os.Stdout)
		return 0
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "mcp-forge: unknown command %q\n\n", name)
		usage(os.Stderr)
		return 2
	}
	if cmd.maxArgs >= 0 && len(rest) > cmd.maxArgs {
		fmt.Fprintf(os.Stderr, "mcp-forge %s: unexpected argument %q (usage: mcp-forge %s)\n", name, rest[cmd.maxArgs], cmd.usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cmd.run(ctx, rest)
}

// loadConfig loads the configuration or prints every error and returns false.
func loadConfig() (config.Config, bool) {
	cfg, err := forge.LoadConfig(configPath)
	if err != nil {
		src := configPath
		if src == "" {
			src = "defaults"
		}
		fmt.Fprintf(os.Stderr, "mcp-forge: invalid configuration (%s):\n%s\n", src, indent(err.Error()))
		return cfg, false
	}
	return cfg, true
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

func cmdConfig(_ context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: mcp-forge config check [FILE] | print | mcp-json")
		return 2
	}
	switch args[0] {
	case "check":
		path := configPath
		if len(args) > 1 {
			path = args[1]
		}
		if _, err := forge.LoadConfig(path); err != nil {
			fmt.Fprintf(os.Stderr, "%s: invalid:\n%s\n", orDefaults(path), indent(err.Error()))
			return 1
		}
		fmt.Printf("%s: ok\n", orDefaults(path))
		return 0
	case "print":
		cfg, ok := loadConfig()
		if !ok {
			return 1
		}
		out, err := config.Render(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Print(out)
		return 0
	case "mcp-json":
		return printMCPJSON()
	}
	fmt.Fprintf(os.Stderr, "mcp-forge config: unknown subcommand %q (check, print, mcp-json)\n", args[0])
	return 2
}

func orDefaults(p string) string {
	if p == "" {
		return "built-in defaults"
	}
	return p
}

func cmdDoctor(ctx context.Context, _ []string) int {
	cfg, ok := loadConfig()
	if !ok {
		return 1
	}
	fmt.Printf("ok    %-16s %s\n", "config", orDefaults(configPath))
	sts := forge.Inspect(ctx, cfg)
	images := slices.Sorted(maps.Keys(forge.Images(sts)))
	rt := podman.New(cfg.Server.PodmanSocket)
	checks := []doctor.Check{doctor.Podman(rt, cfg, images), doctor.Rootless(rt, cfg, doctor.LocalHost()), doctor.Paths(cfg),
		doctor.Seccomp(rt, cfg, forge.Instance(cfg.Volumes.BasePath), images), pluginCheck(cfg, sts),
		doctor.Environments(cfg, forge.Builders(sts), exec.LookPath), doctor.UV(cfg, exec.LookPath, toolVersion)}
	if addr, ok := httpAddress(cfg); ok {
		checks = append(checks, httpserver.Doctor(cfg, addr))
	}
	if !doctor.Run(ctx, os.Stdout, checks...) {
		return 1
	}
	return 0
}

// cmdImages lists the images the backends run (each plugin's configured
// image, by default the one it declares) and whether they are built.
func cmdImages(ctx context.Context, _ []string) int {
	cfg, ok := loadConfig()
	if !ok {
		return 1
	}
	sts := forge.Inspect(ctx, cfg)
	if len(sts) == 0 {
		fmt.Printf("no plugins found in %s; run `make build`\n", forge.PluginDir(cfg))
		return 1
	}
	rt := podman.New(cfg.Server.PodmanSocket)
	code := 0
	byImage := forge.Images(sts)
	for _, img := range slices.Sorted(maps.Keys(byImage)) {
		users := "used by " + strings.Join(byImage[img], ", ")
		ii, ok, err := rt.Image(ctx, img)
		switch {
		case err != nil:
			fmt.Printf("%-28s error: %v (%s)\n", img, err, users)
			code = 1
		case !ok:
			fmt.Printf("%-28s missing: run `make images` (%s)\n", img, users)
			code = 1
		default:
			fmt.Printf("%-28s %4d MB  recipe %s  packages %s  (%s)\n", img, ii.Size>>20, ii.Labels["io.mcp-forge.recipe"], ii.Labels["io.mcp-forge.packages"], users)
		}
	}
	for _, st := range sts {
		if st.Error != "" {
			fmt.Printf("plugin %s is not loaded, so its image is unknown: %s\n", st.Name, st.Error)
			code = 1
		}
	}
	return code
}

// toolVersion runs `path --version` with a bound.
func toolVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	return string(out), err
}
