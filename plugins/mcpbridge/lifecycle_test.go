package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/sdk/pluginhost"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

// pidsWithArg are the live (not zombie) processes with arg on their
// command line.
func pidsWithArg(t testing.TB, arg string) []int {
	t.Helper()
	ents, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []int
	for _, e := range ents {
		b, err := os.ReadFile(e)
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(e)))
				if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(st), ") Z ") {
					out = append(out, pid)
				}
			}
		}
	}
	return out
}

func ppid(t testing.TB, pid int) int {
	t.Helper()
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
	p, _ := strconv.Atoi(f[1])
	return p
}

// The plugin binary, launched as the core launches it, leaves no server
// process behind: when the core ends it, and when it is killed outright.
// Server a lingers after its stdin closes, so only the plugin's shutdown
// (SIGTERM after the grace period) or the parent-death signal ends it.
func TestNoOrphanServers(t *testing.T) {
	for _, how := range []string{"core-ends-plugin", "plugin-killed"} {
		t.Run(how, func(t *testing.T) {
			marker := fmt.Sprintf("--forge-test-marker=%d-%s", time.Now().UnixNano(), how)
			cfg := mustJSON(t, Config{Servers: map[string]ServerConfig{"a": edgeConfig(nil, marker, "--linger"), "b": edgeConfig(nil, marker)}})
			c, err := pluginhost.Launch(pluginBin, hclog.NewNullLogger(), pluginhost.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Kill()
			// Whatever happens, no server of this test outlives it.
			t.Cleanup(func() {
				for _, p := range pidsWithArg(t, marker) {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			})
			if err := c.Configure(context.Background(), sdktest.NewLocalHost(t.TempDir()), cfg); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Bridge().ListTools(context.Background()); err != nil {
				t.Fatal(err)
			}
			pids := pidsWithArg(t, marker)
			if len(pids) != 2 {
				t.Fatalf("want 2 server processes, found %v", pids)
			}
			for _, p := range pids {
				if pp := ppid(t, p); pp != c.Pid() {
					t.Fatalf("server %d is a child of %d, not of the plugin %d", p, pp, c.Pid())
				}
			}
			if how == "core-ends-plugin" {
				c.Kill()
			} else if err := syscall.Kill(c.Pid(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "every server process has ended", func() bool { return len(pidsWithArg(t, marker)) == 0 })
		})
	}
}
