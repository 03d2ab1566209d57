package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/forge"
)

// assembly is the entry points of core/forge: one call per command. Tests
// give dispatch a fake.
type assembly struct {
	LoadConfig    func(path string) (config.Config, error)
	CheckPlugins  func(context.Context, config.Config) error
	Serve         func(context.Context, config.Config, forge.Options) error
	Doctor        func(context.Context, config.Config, forge.Options) error
	ListImages    func(context.Context, config.Config, forge.Options) error
	ListPlugins   func(context.Context, config.Config, forge.Options) error
	Watchdog      func(cfg config.Config, serverID string) error
	NewTenantKey  func(forge.Options) error
	HashTenantKey func(forge.Options) error
	MCPJSON       func(configPath string) string
	Version       func() string
}

var forgeCore = assembly{forge.LoadConfig, forge.CheckPluginConfigs, forge.Serve, forge.Doctor, forge.ListImages, forge.ListPlugins, forge.Watchdog,
	forge.NewTenantKey, forge.HashTenantKey, forge.MCPJSON, forge.Version}

// flags are the global flags, which may stand anywhere, with what a
// command calls and where its output goes.
type flags struct {
	config string // --config FILE, else $FORGE_CONFIG
	http   string // --http ADDR: serve streamable HTTP instead of stdio

	core           assembly
	stdout, stderr io.Writer
}

func (f flags) options() forge.Options {
	return forge.Options{ConfigPath: f.config, HTTPAddr: f.http, Stdout: f.stdout, Stderr: f.stderr}
}

type command struct {
	usage   string // arguments after the command name
	maxArgs int    // positional arguments it takes
	summary string
	run     func(ctx context.Context, fl flags, args []string) error
}

var commands map[string]command

func init() {
	commands = map[string]command{
		"serve":   {"serve [--http ADDR]", 0, "run the MCP server on stdio (what an MCP host starts), or on streamable HTTP", withConfig(serve)},
		"tenant":  {"tenant new-key | hash-key", 1, "make an API key and the sha256 to put in [tenants.NAME]", cmdTenant},
		"doctor":  {"doctor", 0, "check this host: Podman, runtime, cgroups, limits, images, paths, plugins", withConfig(doctor)},
		"config":  {"config check [FILE] | print | mcp-json", 2, "validate, show or export configuration", cmdConfig},
		"plugins": {"plugins [list]", 1, "show plugins with versions and checksum status", cmdPlugins},
		"images":  {"images", 0, "list the sandbox images and whether they are built", withConfig(listImages)},
		"seccomp-profile": {"seccomp-profile [gvisor]", 1, "print MCP-Forge's seccomp profile (JSON), to install on Kubernetes nodes as a Localhost profile; gvisor: its variant for pods under gVisor", func(_ context.Context, fl flags, args []string) error {
			p := forge.SeccompProfile()
			switch {
			case len(args) == 1 && args[0] == "gvisor":
				p = forge.GVisorSeccompProfile()
			case len(args) == 1:
				return errUsage{fmt.Sprintf("mcp-forge seccomp-profile: unknown variant %q (only gvisor, for pods under a gVisor RuntimeClass)", args[0])}
			}
			_, err := fl.stdout.Write(p)
			return err
		}},
		"version": {"version", 0, "print the version", func(_ context.Context, fl flags, _ []string) error {
			fmt.Fprintln(fl.stdout, "mcp-forge", fl.core.Version())
			return nil
		}},
	}
	// Internal, not listed: serve starts it.
	commands["watchdog"] = command{"watchdog SERVER-ID", 1, "removes a dead server's containers", cmdWatchdog}
	hidden["watchdog"] = true
}

var hidden = map[string]bool{}

func usage(w io.Writer) {
	fmt.Fprintf(w, "mcp-forge %s: run Python and R in sandboxed Podman containers for AI agents, over MCP.\n\n", forge.Version())
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

// parseArgs reads the global flags wherever they stand (`mcp-forge --config F
// serve` and `mcp-forge serve --config F` are the same) and returns the
// command and its positional arguments. An unknown flag is an error; "--"
// ends flag parsing.
func parseArgs(args []string) (fl flags, cmd string, rest []string, err error) {
	fs := flag.NewFlagSet("mcp-forge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&fl.config, "config", os.Getenv("FORGE_CONFIG"), "configuration file (TOML)")
	fs.StringVar(&fl.http, "http", "", "serve MCP over streamable HTTP on this address (serve)")
	var positional []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return fl, "", nil, err
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
		return fl, "", nil, nil
	}
	return fl, positional[0], positional[1:], nil
}

// errUsage is a command called wrongly: exit status 2, after the message.
type errUsage struct{ msg string }

func (e errUsage) Error() string { return e.msg }

func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return dispatch(ctx, forgeCore, args, os.Stdout, os.Stderr)
}

// dispatch runs one command line and returns its exit status: 0, 1 when it
// failed, 2 when it was called wrongly.
func dispatch(ctx context.Context, core assembly, args []string, stdout, stderr io.Writer) int {
	fl, name, rest, err := parseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "mcp-forge: %v\n\n", err)
		usage(stderr)
		return 2
	}
	switch name {
	case "":
		usage(stderr)
		return 2
	case "help", "-h":
		usage(stdout)
		return 0
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "mcp-forge: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	if len(rest) > cmd.maxArgs {
		fmt.Fprintf(stderr, "mcp-forge %s: unexpected argument %q (usage: mcp-forge %s)\n", name, rest[cmd.maxArgs], cmd.usage)
		return 2
	}
	fl.core, fl.stdout, fl.stderr = core, stdout, stderr
	err = cmd.run(ctx, fl, rest)
	var ue errUsage
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, ue.msg)
		return 2
	case errors.Is(err, forge.ErrFailed): // its output said what failed
		return 1
	}
	fmt.Fprintln(stderr, "mcp-forge:", err)
	return 1
}

// errConfig is an invalid configuration, each error on its own line.
type errConfig struct {
	path string
	err  error
}

func (e errConfig) Error() string {
	return fmt.Sprintf("invalid configuration (%s):\n%s", orDefaults(e.path, "defaults"), indent(e.err.Error()))
}

func loadConfig(fl flags) (config.Config, error) {
	cfg, err := fl.core.LoadConfig(fl.config)
	if err != nil {
		return cfg, errConfig{fl.config, err}
	}
	return cfg, nil
}

// withConfig is a command that loads the configuration and calls one entry
// point of the assembly with it.
func withConfig(entry func(assembly) func(context.Context, config.Config, forge.Options) error) func(context.Context, flags, []string) error {
	return func(ctx context.Context, fl flags, _ []string) error {
		cfg, err := loadConfig(fl)
		if err != nil {
			return err
		}
		return entry(fl.core)(ctx, cfg, fl.options())
	}
}

func serve(a assembly) func(context.Context, config.Config, forge.Options) error  { return a.Serve }
func doctor(a assembly) func(context.Context, config.Config, forge.Options) error { return a.Doctor }
func listImages(a assembly) func(context.Context, config.Config, forge.Options) error {
	return a.ListImages
}
func listPlugins(a assembly) func(context.Context, config.Config, forge.Options) error {
	return a.ListPlugins
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

func orDefaults(p, defaults string) string {
	if p == "" {
		return defaults
	}
	return p
}

func cmdConfig(ctx context.Context, fl flags, args []string) error {
	if len(args) == 0 {
		return errUsage{"usage: mcp-forge config check [FILE] | print | mcp-json"}
	}
	switch args[0] {
	case "check":
		path := fl.config
		if len(args) > 1 {
			path = args[1]
		}
		cfg, err := fl.core.LoadConfig(path)
		if err == nil {
			err = fl.core.CheckPlugins(ctx, cfg)
		}
		if err != nil {
			fmt.Fprintf(fl.stderr, "%s: invalid:\n%s\n", orDefaults(path, "built-in defaults"), indent(err.Error()))
			return forge.ErrFailed
		}
		fmt.Fprintf(fl.stdout, "%s: ok\n", orDefaults(path, "built-in defaults"))
		for _, n := range forge.ConfigNotes(cfg) {
			fmt.Fprintf(fl.stdout, "note: %s\n", n)
		}
		return nil
	case "print":
		cfg, err := loadConfig(fl)
		if err != nil {
			return err
		}
		out, err := config.Render(cfg)
		if err != nil {
			return err
		}
		fmt.Fprint(fl.stdout, out)
		return nil
	case "mcp-json":
		fmt.Fprint(fl.stdout, fl.core.MCPJSON(fl.config))
		return nil
	}
	return errUsage{fmt.Sprintf("mcp-forge config: unknown subcommand %q (check, print, mcp-json)", args[0])}
}

func cmdPlugins(ctx context.Context, fl flags, args []string) error {
	if len(args) > 0 && args[0] != "list" {
		return errUsage{fmt.Sprintf("mcp-forge plugins: unknown subcommand %q (list)", args[0])}
	}
	return withConfig(listPlugins)(ctx, fl, args)
}

func cmdTenant(_ context.Context, fl flags, args []string) error {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "new-key":
		return fl.core.NewTenantKey(fl.options())
	case "hash-key":
		return fl.core.HashTenantKey(fl.options())
	}
	return errUsage{"usage: mcp-forge tenant new-key | hash-key   (hash-key reads the key on stdin, so it stays out of shell history)"}
}

// cmdWatchdog is the watchdog process serve starts: it removes its server's
// containers once the server ends.
func cmdWatchdog(_ context.Context, fl flags, args []string) error {
	if len(args) != 1 {
		return errUsage{"mcp-forge watchdog: " + forge.ErrNoWatchdogPipe.Error()}
	}
	cfg, err := loadConfig(fl)
	if err != nil {
		return err
	}
	if err := fl.core.Watchdog(cfg, args[0]); errors.Is(err, forge.ErrNoWatchdogPipe) {
		return errUsage{"mcp-forge watchdog: " + err.Error()}
	} else if err != nil {
		return err
	}
	return nil
}
