// Package imports holds the architecture's import rules as a test, so that
// a change cannot break them silently (DESIGN.md, "Import rules"): cmd →
// core → sdk; plugins → sdk only; sdk never imports core; config, runtime
// and policy are leaves; only core/runtime/podman holds the Podman
// bindings; core/cluster (a core's replicas) knows only core/runtime,
// and only core/forge's factory names a runtime implementation; mcpserver
// and its toolsets talk to the engine through their own interfaces, never
// to the runtime, and the toolsets sit below the server that assembles
// them; the engine's parts (route, pure; session; checkpoint; refusal) sit
// below it; core/toolcall is a leaf; only config parses sizes;
// core/workspace knows nothing of the plugin API; core/grant, which the
// tool bridge's and the network's grants share, knows neither; httpserver
// is a transport behind its own interfaces; cmd is flags and one call into
// the assembly (core/forge).
package imports

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/mcp-forge/mcp-forge"

type pkg struct {
	ImportPath string
	Imports    []string // direct, non-test
}

// list is every package of both modules with its direct imports.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...", "./sdk/...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 40 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// rel is a package path inside the module ("core/engine"), or "" outside.
func rel(path string) string {
	if path == module {
		return "."
	}
	r, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	return r
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// internal says whether an import, as the rules see it (module packages
// relative, others whole), is of this module: only those start with one of
// its top-level directories.
func internal(to string) bool {
	for _, d := range []string{"core", "sdk", "cmd", "plugins", "test"} {
		if under(to, d) {
			return true
		}
	}
	return to == "."
}

// A rule names what it forbids; check is true for a forbidden import (to
// relative when it is of this module).
type rule struct {
	name  string
	check func(importer, imported string) bool // true: forbidden
}

var rules = []rule{
	{"sdk imports nothing of core, cmd, plugins or test (third parties build on it alone)", func(from, to string) bool {
		return under(from, "sdk") && (under(to, "core") || under(to, "cmd") || under(to, "plugins") || under(to, "test"))
	}},
	{"plugins import only the sdk and plugins/internal", func(from, to string) bool {
		return under(from, "plugins") && internal(to) && !under(to, "sdk") && !under(to, "plugins")
	}},
	{"core imports nothing of cmd, plugins or test", func(from, to string) bool {
		return under(from, "core") && (under(to, "cmd") || under(to, "plugins") || under(to, "test"))
	}},
	// The grammar of host patterns is config's own leaf: config validates
	// with it, the egress packages match with it.
	{"core/config is a leaf (but for its own leaf core/config/hostpattern)", func(from, to string) bool {
		return (from == "core/config" && internal(to) && to != "core/config/hostpattern") || (from == "core/config/hostpattern" && internal(to))
	}},
	// Reading forge.toml fills the model and asks it to validate itself:
	// nothing else of the core is needed to load a configuration.
	{"core/config/loader imports only core/config of this module", func(from, to string) bool {
		return from == "core/config/loader" && internal(to) && to != "core/config"
	}},
	// Sizes of the configuration are parsed once, into config.Size, when it
	// is loaded (its parser is unexported): the rest of the server reads
	// bytes and never parses "512m" itself.
	{"only core/config parses sizes (github.com/docker/go-units)", func(from, to string) bool {
		return to == "github.com/docker/go-units" && from != "core/config" && (under(from, "core") || under(from, "cmd") || under(from, "test"))
	}},
	// A runtime implementation takes its own section of the configuration
	// ([runtime.kubernetes]: a dozen settings) as core/config declares it,
	// rather than a copy of the same struct; config is itself a leaf.
	{"core/runtime is a leaf (its implementations import only it, core/config for their settings, and core/cluster for a cluster's coordination)", func(from, to string) bool {
		if from == "core/runtime" {
			return internal(to)
		}
		return under(from, "core/runtime") && internal(to) && !under(to, "core/runtime") && to != "core/config" && to != "core/cluster"
	}},
	// The coordination of a core's replicas in a cluster (Leases, shared
	// quotas, session records, the reaper) knows the runtime only through
	// core/runtime's interfaces and its own Pods: no runtime, no engine.
	{"core/cluster: of this module only core/runtime", func(from, to string) bool {
		return from == "core/cluster" && internal(to) && to != "core/runtime"
	}},
	// Runtimes declare what they can do (runtime.Capabilities): the core
	// names an implementation only where it picks one (core/forge's
	// factory, runtimes.go, which TestForgeNamesRuntimesOnce holds to).
	{"only core/forge imports a runtime implementation (core/runtime/podman, core/runtime/kubernetes) or core/cluster", func(from, to string) bool {
		if to != "core/runtime/podman" && to != "core/runtime/kubernetes" && to != "core/cluster" {
			return false
		}
		return from != "core/forge" && !under(from, "test") && !(to == "core/cluster" && from == "core/runtime/kubernetes")
	}},
	{"core/policy is pure rules: config, imageref, runtime, seccomp only", func(from, to string) bool {
		if from != "core/policy" || !internal(to) {
			return false
		}
		switch to {
		case "core/config", "core/imageref", "core/runtime", "core/seccomp":
			return false
		}
		return true
	}},
	// Workspaces serve the engine and the host services alike: their
	// refusals are their own errors, which core/hostsvc answers plugins with.
	{"core/workspace imports nothing of sdk (the plugin API is core/hostsvc's)", func(from, to string) bool {
		return from == "core/workspace" && under(to, "sdk")
	}},
	{"core/mcpserver and its toolsets talk to the engine, never to the runtime or the sandbox manager", func(from, to string) bool {
		return under(from, "core/mcpserver") && (under(to, "core/runtime") || to == "core/sandbox")
	}},
	// core/mcpserver assembles the toolsets; a toolset is made of
	// core/mcpserver/toolsets and the core's interfaces it names itself.
	{"the toolsets sit below core/mcpserver: none imports it", func(from, to string) bool {
		return under(from, "core/mcpserver/toolsets") && to == "core/mcpserver"
	}},
	// Every layer answering a tools/call builds on it (the tenants'
	// middleware, the forwarder, the answer bound, the tools), so it can
	// depend on none of them.
	{"core/toolcall is a leaf", func(from, to string) bool {
		return from == "core/toolcall" && internal(to)
	}},
	{"core/refusal is a leaf", func(from, to string) bool {
		return from == "core/refusal" && internal(to)
	}},
	{"core/route is pure: of this module config, refusal and sdk/backend only, and no I/O (files, processes, network, audit)", func(from, to string) bool {
		if from != "core/route" {
			return false
		}
		switch {
		case to == "core/config", to == "core/refusal", to == "sdk/backend":
			return false
		case internal(to):
			return true
		}
		return doesIO(to)
	}},
	{"core/session is the registry: it runs no kernel, writes no audit and reads no checkpoint (no plugins, audit, checkpoint or engine)", func(from, to string) bool {
		return from == "core/session" && (to == "core/plugins" || to == "core/audit" || to == "core/checkpoint" || to == "core/engine" || to == "core/route")
	}},
	{"core/checkpoint is storage: of the core only workspace", func(from, to string) bool {
		return from == "core/checkpoint" && internal(to) && to != "core/workspace"
	}},
	{"the engine's parts (route, session, checkpoint, refusal) sit below it: none imports core/engine or core/mcpserver", func(from, to string) bool {
		switch from {
		case "core/route", "core/session", "core/checkpoint", "core/refusal":
			return to == "core/engine" || under(to, "core/engine") || to == "core/mcpserver"
		}
		return false
	}},
	{"core/httpserver is a transport: it reaches the core through its own interfaces, never core/forge or the parts forge assembles", func(from, to string) bool {
		if from != "core/httpserver" {
			return false
		}
		switch to {
		case "core/forge", "core/engine", "core/plugins", "core/sandbox", "core/mcpserver", "core/hostsvc", "core/workspace", "core/toolbridge", "core/environments":
			return true
		}
		return under(to, "core/runtime")
	}},
	// The agent is a static binary that runs in every sandbox pod: it is
	// built from its package alone (the core speaks to it with the same
	// package's types), so nothing of the core goes into a pod.
	{"core/runtime/agent imports nothing of this module, and cmd/mcp-forge-agent only it", func(from, to string) bool {
		return (from == "core/runtime/agent" && internal(to)) || (from == "cmd/mcp-forge-agent" && internal(to) && to != "core/runtime/agent")
	}},
	{"cmd/mcp-forge parses flags, loads the configuration and calls core/forge: it imports no other core package but core/config", func(from, to string) bool {
		return from == "cmd/mcp-forge" && internal(to) && to != "core/forge" && to != "core/config"
	}},
	// The network policy and its grants know nothing of sandboxes, runtimes
	// or the engine, nor of the proxy that serves them (a channel is handed
	// one). The egress proxy enforces a grant on whatever connection it is
	// handed. Its credentials know even less: their configuration.
	{"core/egress: of this module only core/config (and its hostpattern), core/audit, core/refusal, core/approval, core/grant, sdk/sanitize and its credentials; its proxy only core/egress, its credentials, core/config (and its hostpattern) and core/refusal; the credentials only core/config (and its hostpattern)", func(from, to string) bool {
		switch from {
		case "core/egress":
			return internal(to) && !slices.Contains([]string{"core/config", "core/audit", "core/refusal", "core/approval", "core/grant", "sdk/sanitize", "core/egress/credential", "core/config/hostpattern"}, to)
		case "core/egress/proxy":
			return internal(to) && !slices.Contains([]string{"core/egress", "core/egress/credential", "core/config", "core/config/hostpattern", "core/refusal"}, to)
		case "core/egress/credential":
			return internal(to) && to != "core/config" && to != "core/config/hostpattern"
		}
		return false
	}},
	// What every capability granted to a run shares (its run, its life,
	// its connections, approval, audit): the tool bridge's and the
	// network's grants build on it, so it knows neither, nor what they
	// grant.
	{"core/grant: of this module only core/approval, core/audit and core/refusal", func(from, to string) bool {
		return from == "core/grant" && internal(to) && to != "core/approval" && to != "core/audit" && to != "core/refusal"
	}},
	{"only core/runtime/podman imports the Podman bindings", func(from, to string) bool {
		return strings.HasPrefix(to, "github.com/containers/podman/") && from != "core/runtime/podman"
	}},
}

// doesIO reports whether a standard package reads or writes outside the
// process: files, processes, the network, the system.
func doesIO(path string) bool {
	switch path {
	case "os", "os/exec", "os/signal", "io/fs", "io/ioutil", "path/filepath", "syscall", "net", "log", "log/slog":
		return true
	}
	return strings.HasPrefix(path, "net/") || strings.HasPrefix(path, "golang.org/x/sys/")
}

func TestImportRules(t *testing.T) {
	var broken []string
	for _, p := range list(t) {
		from := rel(p.ImportPath)
		if from == "" {
			continue
		}
		for _, imp := range p.Imports {
			to := imp
			if r := rel(imp); r != "" {
				to = r
			}
			for _, r := range rules {
				if r.check(from, to) {
					broken = append(broken, fmt.Sprintf("%s imports %s: %s", from, imp, r.name))
				}
			}
		}
	}
	for _, b := range broken {
		t.Error(b)
	}
}

// The rules must be able to fail: each forbids at least one import a
// careless change would add.
func TestRulesForbidSomething(t *testing.T) {
	cases := []struct{ from, to string }{
		{"sdk/jupyter", "core/engine"},
		{"plugins/jupyter", "core/workspace"},
		{"core/engine", "plugins/internal/toolrun"},
		{"core/config", "core/audit"},
		{"core/policy", "github.com/docker/go-units"},
		{"core/runtime", "core/policy"},
		{"core/runtime/podman", "core/audit"},
		{"core/policy", "sdk/bridge"},
		{"core/mcpserver", "core/runtime"},
		{"core/workspace", "sdk/host"},
		{"core/engine", "github.com/containers/podman/v5/pkg/bindings"},
		{"core/refusal", "core/config"},
		{"core/route", "os"},
		{"core/route", "path/filepath"},
		{"core/route", "core/audit"},
		{"core/route", "core/plugins"},
		{"core/session", "core/audit"},
		{"core/session", "core/plugins"},
		{"core/checkpoint", "core/audit"},
		{"core/checkpoint", "core/session"},
		{"core/session", "core/engine"},
		{"core/checkpoint", "core/mcpserver"},
		{"core/httpserver", "core/forge"},
		{"core/httpserver", "core/runtime"},
		{"core/httpserver", "core/engine"},
		{"cmd/mcp-forge", "core/engine"},
		{"cmd/mcp-forge", "core/httpserver"},
		{"cmd/mcp-forge", "sdk/plugin"},
		{"core/runtime/agent", "core/runtime"},
		{"core/runtime/agent", "core/config"},
		{"cmd/mcp-forge-agent", "core/runtime"},
		{"core/egress", "core/runtime"},
		{"core/egress", "core/engine"},
		{"core/grant", "core/egress"},
		{"core/grant", "core/toolbridge"},
		{"core/grant", "core/config"},
		{"core/mcpserver/toolsets/files", "core/mcpserver"},
		{"core/mcpserver/toolsets/execution", "core/sandbox"},
		{"core/mcpserver/toolsets", "core/runtime/podman"},
		{"core/toolcall", "core/refusal"},
		{"core/runtime/kubernetes", "core/engine"},
		{"core/cluster", "core/runtime/kubernetes"},
		{"core/cluster", "core/config"},
		{"core/engine", "core/runtime/kubernetes"},
		{"core/sandbox", "core/runtime/podman"},
		{"core/engine", "core/cluster"},
		{"cmd/mcp-forge", "core/runtime/kubernetes"},
	}
	for _, c := range cases {
		forbidden := false
		for _, r := range rules {
			forbidden = forbidden || r.check(c.from, c.to)
		}
		if !forbidden {
			t.Errorf("no rule forbids %s importing %s", c.from, c.to)
		}
	}
	// And allow the architecture itself.
	for _, c := range []struct{ from, to string }{
		{"core/engine", "sdk/backend"}, {"plugins/jupyter", "sdk/jupyter"}, {"core/runtime/podman", "core/runtime"},
		{"core/runtime/podman", "github.com/containers/podman/v5/pkg/bindings"}, {"cmd/mcp-forge", "core/forge"},
		{"core/route", "core/config"}, {"core/route", "sdk/backend"}, {"core/egress", "core/audit"}, {"core/route", "strings"}, {"core/checkpoint", "core/workspace"},
		{"core/checkpoint", "os"}, {"core/session", "core/toolbridge"}, {"core/engine", "core/route"}, {"core/mcpserver", "core/session"},
		{"core/config", "github.com/docker/go-units"},
		{"core/hostsvc", "sdk/host"}, {"core/workspace", "golang.org/x/sys/unix"},
		{"cmd/mcp-forge", "core/config"}, {"core/forge", "core/httpserver"}, {"core/httpserver", "core/tenant"},
		{"core/mcpserver", "core/mcpserver/toolsets/jobs"}, {"core/mcpserver/toolsets/jobs", "core/mcpserver/toolsets/execution"},
		{"core/tenant", "core/toolcall"}, {"core/mcpserver/toolsets", "core/toolcall"},
		{"core/runtime/kubernetes", "core/cluster"}, {"core/cluster", "core/runtime"}, {"core/forge", "core/runtime/kubernetes"},
		{"test/testenv", "core/runtime/kubernetes"},
		{"core/egress", "core/grant"}, {"core/toolbridge", "core/grant"}, {"core/grant", "core/approval"},
	} {
		for _, r := range rules {
			if r.check(c.from, c.to) {
				t.Errorf("%s importing %s is the architecture, but %q forbids it", c.from, c.to, r.name)
			}
		}
	}
}
