package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/core/seccomp"
)

func TestParseArgsFlagsAnywhere(t *testing.T) {
	t.Setenv("FORGE_CONFIG", "")
	cases := []struct {
		args    []string
		cmd     string
		rest    []string
		config  string
		http    string
		wantErr bool
	}{
		{args: []string{"serve", "--http", "127.0.0.1:3000"}, cmd: "serve", http: "127.0.0.1:3000"},
		{args: []string{"--http=:8080", "--config", "a.toml", "serve"}, cmd: "serve", config: "a.toml", http: ":8080"},
		{args: []string{"serve", "--http"}, wantErr: true},
		{args: []string{"--config", "a.toml", "serve"}, cmd: "serve", config: "a.toml"},
		{args: []string{"serve", "--config", "a.toml"}, cmd: "serve", config: "a.toml"},
		{args: []string{"serve", "--config=a.toml"}, cmd: "serve", config: "a.toml"},
		{args: []string{"config", "check", "f.toml", "-config", "b.toml"}, cmd: "config", rest: []string{"check", "f.toml"}, config: "b.toml"},
		{args: []string{"config", "--config", "b.toml", "print"}, cmd: "config", rest: []string{"print"}, config: "b.toml"},
		{args: []string{"serve", "--", "--config"}, cmd: "serve", rest: []string{"--config"}},
		{args: []string{"serve", "--confg", "a.toml"}, wantErr: true},
		{args: []string{"--bogus", "serve"}, wantErr: true},
		{args: []string{"serve", "--config"}, wantErr: true},
		{args: nil},
	}
	for _, c := range cases {
		fl, cmd, rest, err := parseArgs(c.args)
		if (err != nil) != c.wantErr {
			t.Errorf("%q: error %v, want error %v", c.args, err, c.wantErr)
			continue
		}
		if c.wantErr {
			continue
		}
		type parsed struct {
			Cmd, Config, HTTP string
			Rest              []string
		}
		if d := cmp.Diff(parsed{c.cmd, c.config, c.http, c.rest}, parsed{cmd, fl.config, fl.http, rest}, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("%q (-want +got):\n%s", c.args, d)
		}
	}
}

// $FORGE_CONFIG is the default of --config; the flag wins.
func TestConfigFromEnvironment(t *testing.T) {
	t.Setenv("FORGE_CONFIG", "env.toml")
	for args, want := range map[string]string{"serve": "env.toml", "serve --config flag.toml": "flag.toml"} {
		fl, _, _, err := parseArgs(strings.Fields(args))
		if err != nil || fl.config != want {
			t.Errorf("%s: config %q (%v), want %q", args, fl.config, err, want)
		}
	}
}

// call is one call into the assembly as the fake saw it.
type call struct {
	Entry   string
	Config  string // the Path of the configuration it got (set by the fake LoadConfig)
	Options forge.Options
	Arg     string
}

// fake is an assembly that records its calls; err, when set, is what every
// entry point returns.
type fake struct {
	mu    sync.Mutex
	calls []call
	err   error
	bad   bool // LoadConfig fails
}

func (f *fake) record(c call) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c.Options.Stdout, c.Options.Stderr = nil, nil // where output goes is not what the test compares
	f.calls = append(f.calls, c)
	return f.err
}

func (f *fake) assembly() assembly {
	entry := func(name string) func(context.Context, config.Config, forge.Options) error {
		return func(_ context.Context, cfg config.Config, o forge.Options) error {
			return f.record(call{Entry: name, Config: cfg.Server.LogFile, Options: o})
		}
	}
	return assembly{
		LoadConfig: func(path string) (config.Config, error) {
			cfg := config.Default()
			cfg.Server.LogFile = path // marks which file it came from
			if f.bad {
				return cfg, errors.New("line 1: bad\nline 2: worse")
			}
			return cfg, nil
		},
		CheckPlugins: func(_ context.Context, cfg config.Config) error { return nil },
		Serve:        entry("Serve"), Doctor: entry("Doctor"), ListImages: entry("ListImages"), ListPlugins: entry("ListPlugins"),
		Watchdog: func(cfg config.Config, id string) error {
			return f.record(call{Entry: "Watchdog", Config: cfg.Server.LogFile, Arg: id})
		},
		NewTenantKey:  func(o forge.Options) error { return f.record(call{Entry: "NewTenantKey", Options: o}) },
		HashTenantKey: func(o forge.Options) error { return f.record(call{Entry: "HashTenantKey", Options: o}) },
		MCPJSON:       func(p string) string { f.record(call{Entry: "MCPJSON", Arg: p}); return "{snippet}\n" },
		Version:       func() string { return "1.2.3" },
	}
}

// Each command line is one call of the assembly, with the flags as options
// and the configuration loaded from --config; a wrong line calls nothing
// and exits 2.
func TestDispatch(t *testing.T) {
	t.Setenv("FORGE_CONFIG", "")
	opts := func(cfg, http string) forge.Options { return forge.Options{ConfigPath: cfg, HTTPAddr: http} }
	cases := []struct {
		args   string
		bad    bool  // the configuration does not load
		err    error // what the entry point returns
		code   int
		calls  []call
		stdout string // contained
		stderr string // contained
	}{
		{args: "serve", calls: []call{{Entry: "Serve", Options: opts("", "")}}},
		{args: "serve --config f.toml --http 127.0.0.1:0", calls: []call{{Entry: "Serve", Config: "f.toml", Options: opts("f.toml", "127.0.0.1:0")}}},
		{args: "--config f.toml doctor", calls: []call{{Entry: "Doctor", Config: "f.toml", Options: opts("f.toml", "")}}},
		{args: "images", calls: []call{{Entry: "ListImages", Options: opts("", "")}}},
		{args: "plugins", calls: []call{{Entry: "ListPlugins", Options: opts("", "")}}},
		{args: "plugins list", calls: []call{{Entry: "ListPlugins", Options: opts("", "")}}},
		{args: "plugins remove", code: 2, stderr: `unknown subcommand "remove"`},
		{args: "tenant new-key", calls: []call{{Entry: "NewTenantKey", Options: opts("", "")}}},
		{args: "tenant hash-key", calls: []call{{Entry: "HashTenantKey", Options: opts("", "")}}},
		{args: "tenant", code: 2, stderr: "usage: mcp-forge tenant"},
		{args: "config mcp-json --config f.toml", calls: []call{{Entry: "MCPJSON", Arg: "f.toml"}}, stdout: "{snippet}"},
		{args: "config check other.toml", stdout: "other.toml: ok"},
		{args: "config check", bad: true, code: 1, stderr: "built-in defaults: invalid:\n  line 1: bad\n  line 2: worse"},
		{args: "config print", stdout: "[server]"},
		{args: "config print", bad: true, code: 1, stderr: "invalid configuration (defaults)"},
		{args: "config", code: 2, stderr: "usage: mcp-forge config"},
		{args: "config frobnicate", code: 2, stderr: `unknown subcommand "frobnicate"`},
		{args: "watchdog abc", calls: []call{{Entry: "Watchdog", Arg: "abc"}}},
		{args: "watchdog", code: 2, stderr: "not by hand"},
		{args: "watchdog abc", err: forge.ErrNoWatchdogPipe, code: 2, calls: []call{{Entry: "Watchdog", Arg: "abc"}}, stderr: "mcp-forge watchdog: the watchdog is started by"},
		{args: "version", stdout: "mcp-forge 1.2.3"},
		{args: "seccomp-profile kata", code: 2, stderr: `unknown variant "kata"`},
		{args: "serve --config f.toml", bad: true, code: 1, stderr: "mcp-forge: invalid configuration (f.toml):\n  line 1: bad\n  line 2: worse"},
		{args: "doctor", err: forge.ErrFailed, code: 1, calls: []call{{Entry: "Doctor", Options: opts("", "")}}},
		{args: "serve", err: errors.New("port taken"), code: 1, calls: []call{{Entry: "Serve", Options: opts("", "")}}, stderr: "mcp-forge: port taken"},
		{args: "serve extra", code: 2, stderr: `unexpected argument "extra"`},
		{args: "frobnicate", code: 2, stderr: `unknown command "frobnicate"`},
		{args: "", code: 2, stderr: "Usage: mcp-forge"},
		{args: "--bogus", code: 2, stderr: "flag provided but not defined"},
		{args: "help", stdout: "Commands:"},
		{args: "-h", stdout: "Commands:"},
	}
	for _, c := range cases {
		t.Run(c.args, func(t *testing.T) {
			f := &fake{err: c.err, bad: c.bad}
			var stdout, stderr bytes.Buffer
			code := dispatch(context.Background(), f.assembly(), strings.Fields(c.args), &stdout, &stderr)
			if code != c.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, c.code, stderr.String())
			}
			if d := cmp.Diff(c.calls, f.calls); d != "" {
				t.Errorf("calls (-want +got):\n%s", d)
			}
			if !strings.Contains(stdout.String(), c.stdout) {
				t.Errorf("stdout %q does not contain %q", stdout.String(), c.stdout)
			}
			if !strings.Contains(stderr.String(), c.stderr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), c.stderr)
			}
			if c.code == 0 && stderr.Len() > 0 {
				t.Errorf("a success wrote to stderr: %q", stderr.String())
			}
		})
	}
}

// Every listed command is in the usage, the hidden watchdog is not.
func TestUsageListsCommands(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	usage(&b)
	for name := range commands {
		if got := strings.Contains(b.String(), "  "+name); got == hidden[name] {
			t.Errorf("%s listed: %v, hidden: %v", name, got, hidden[name])
		}
	}
}

// seccomp-profile prints the profile a node installs for runc pods, and
// with gvisor the variant for pods under a gVisor RuntimeClass: two
// different documents (clone3 is allowed only in the second).
func TestSeccompProfileVariants(t *testing.T) {
	for _, c := range []struct {
		args string
		want []byte
	}{
		{"seccomp-profile", seccomp.JSON()},
		{"seccomp-profile gvisor", seccomp.GVisorJSON()},
	} {
		var stdout, stderr bytes.Buffer
		if code := dispatch(context.Background(), (&fake{}).assembly(), strings.Fields(c.args), &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s", c.args, code, stderr.String())
		}
		if !bytes.Equal(stdout.Bytes(), c.want) {
			t.Errorf("%s printed %d bytes, not the profile's %d", c.args, stdout.Len(), len(c.want))
		}
	}
	if bytes.Equal(seccomp.JSON(), seccomp.GVisorJSON()) {
		t.Error("the gVisor variant is the same document as the profile")
	}
}
