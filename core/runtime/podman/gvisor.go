package podman

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// gvisor is how this client runs a sandbox under gVisor. Podman's service
// takes the OCI runtime for itself only (its API ignores a container's own:
// 4.3 and 5.x alike), so gVisor sandboxes are created through a second
// service of the core's own, started with runsc as its runtime, on the same
// storage: a container records its runtime's path, and any Podman process
// (the main service included) starts, stops, execs and removes it with that
// runtime. The runtime is a small wrapper the core writes, which gives runsc
// the flags every sandbox needs, so that every process runs it alike.
type gvisor struct {
	runsc   string
	root    string // runsc's state directory
	wrapper string
	// restores holds the snapshot a container starts from, by its id
	// (RestoreOnStart): the wrapper reads it on `start`.
	restores string
	// broken says why runsc cannot run sandboxes here; nil: it can.
	broken error
	svc    service
	// rootless: the service the core starts is rootless, as this process
	// is not root; runsc then runs with --ignore-cgroups (rootlessGVisor).
	rootless bool
	// limitsWaived: the operator waived memory, cpu and pids
	// (WithLimitsWaived), so a rootless service that could enforce some of
	// them may still run gVisor sandboxes, which go without them.
	limitsWaived bool
}

// RunscFlags are the flags every gVisor sandbox's runsc runs with, before
// Podman's: systrap needs no /dev/kvm; host-uds=open lets the sandbox
// connect to the core's unix sockets in its mounted directories (the tool
// bridge's and egress's), while the sockets it listens on (the runner's,
// the kernel's) stay in its Sentry, reached from inside (DialSocket): runsc
// cannot checkpoint a sandbox with a socket bound on the host; oci-seccomp
// applies the sandbox's seccomp profile in the Sentry, which runsc
// otherwise ignores. Under a rootless service (rootless) runsc cannot make
// the sandbox's cgroups (measured on cgroups v1: "cannot set up cgroup for
// root: configuring cgroup: mkdir /sys/fs/cgroup/freezer/<id>: permission
// denied"), so it runs with --ignore-cgroups: rootlessGVisor decides when
// that gives up nothing the service would enforce.
func RunscFlags(root, network string, rootless bool) []string {
	f := []string{"--root=" + root, "--platform=systrap", "--network=" + network, "--host-uds=open", "--oci-seccomp"}
	if rootless {
		f = append(f, "--ignore-cgroups")
	}
	return f
}

// gvisorPidsOverhead is what the Sentry's own threads take of a gVisor
// sandbox's pids cgroup (a systrap Sentry runs a few dozen threads, and a
// stub thread beside each of the code's): the cgroup gets the configured
// limit twice over plus this, so that the code may start what the user
// configured; the Sentry bounds the code's processes itself (RLIMIT_NPROC).
const gvisorPidsOverhead = 64

// gvisorPids is the pids cgroup limit of a gVisor sandbox whose code may have n.
func gvisorPids(n int64, endpoints int) int64 {
	return 2*n + gvisorPidsOverhead + gvisorPidsExtra(endpoints)
}

// gvisorRelayTasks is what one of the core's relays takes of a gVisor
// sandbox's RLIMIT_NPROC: each socket the core reaches inside the Sentry
// (an endpoint of the intent) is relayed by an `mcp-forge-agent dial` run
// as the sandbox's user, 4 Go threads measured (a session's kernel has five
// channels: 20 tasks beside the code), and the Sentry counts every task of
// that user. One thread over the measure, so that a busy relay does not
// take one of the code's.
const gvisorRelayTasks = 5

// gvisorRelaysMax bounds the relays counted: a kernel has five channels,
// and a plugin declaring endpoints it never dials (up to
// host.MaxEndpoints) must not buy its code more processes.
const gvisorRelaysMax = 6

// gvisorPidsExtra is what a gVisor sandbox's limits add for relays of
// endpoints sockets.
func gvisorPidsExtra(endpoints int) int64 {
	return int64(min(endpoints, gvisorRelaysMax)) * gvisorRelayTasks
}

// gvisorNproc raises the RLIMIT_NPROC of g (set to the pids limit by
// spec) by the share of the relays of endpoints sockets, so that the code
// keeps what the user configured.
func gvisorNproc(g *specgen.SpecGenerator, endpoints int) {
	for i, r := range g.Rlimits {
		if r.Type == "nproc" {
			g.Rlimits[i].Soft += uint64(gvisorPidsExtra(endpoints))
			g.Rlimits[i].Hard += uint64(gvisorPidsExtra(endpoints))
		}
	}
}

// WithGVisor lets the client run sandboxes whose Spec.Isolation is gVisor:
// runsc is the binary, dir where the core writes the wrapper and its
// service's socket, root runsc's state directory (the core's own, apart
// from any other runsc user's), network runsc's network for every sandbox
// ("none" or "sandbox", by security.allow_network). A runsc that is missing
// or does not run is kept as the reason every such sandbox is refused, and
// the kernel-isolation gap. The service the core starts runs as this
// process: rootless unless it is root.
func (c *Client) WithGVisor(runsc, dir, root, network string) *Client {
	g := &gvisor{runsc: runsc, root: root, rootless: os.Geteuid() != 0}
	if c.gvisor != nil {
		g.limitsWaived = c.gvisor.limitsWaived
	}
	c.gvisor = g
	if err := checkRunsc(runsc); err != nil {
		g.broken = err
		return c
	}
	g.restores = filepath.Join(filepath.Dir(root), filepath.Base(root)+"-restore")
	w, err := writeWrapper(dir, runsc, RunscFlags(root, network, g.rootless), g.restores)
	if err != nil {
		g.broken = fmt.Errorf("writing the runsc wrapper: %w", err)
		return c
	}
	g.wrapper = w
	g.svc = service{sock: filepath.Join(dir, "podman-gvisor-"+strconv.Itoa(os.Getpid())+".sock"), runtime: w,
		started: func(cx context.Context) { go g.sweep(cx) }}
	return c
}

// WithLimitsWaived says whether the operator waived memory, cpu and pids
// (security.waive, or enforce_resource_limits = false): a rootless service
// with some of their cgroup controllers may then run gVisor sandboxes,
// which go without them (rootlessGVisor); without the waiver it refuses
// them. Call it after WithGVisor.
func (c *Client) WithLimitsWaived(waived bool) *Client {
	if c.gvisor != nil {
		c.gvisor.limitsWaived = waived
	}
	return c
}

// sweep deletes runsc's state of the sandboxes Podman no longer has: a
// sandbox whose Podman process was killed (a core or a machine that
// stopped mid-run) leaves its state in the root, "running" with no
// process, and nothing else ever removes it. Podman registers a container
// before runsc creates it and removes it after runsc deletes it, so a
// state without a container is no sandbox's.
func (g *gvisor) sweep(cx context.Context) {
	ctx, cancel := context.WithTimeout(cx, 2*time.Minute)
	defer cancel()
	exists := func(id string) (bool, error) { return containers.Exists(ctx, id, nil) }
	remove := func(id string) error {
		out, err := exec.CommandContext(ctx, g.runsc, "--root="+g.root, "delete", "--force", id).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	sweepStates(g.root, exists, remove)
}

// sweepStates removes (remove) each sandbox in runsc's root whose
// container does not exist; it returns the ids removed. A failure to ask
// keeps the state: only a container known gone is swept.
func sweepStates(root string, exists func(string) (bool, error), remove func(string) error) []string {
	names, _ := filepath.Glob(filepath.Join(root, "*.state"))
	var gone []string
	for _, n := range names {
		// <sandbox id>_sandbox:<container id>.state
		_, id, ok := strings.Cut(strings.TrimSuffix(filepath.Base(n), ".state"), "_sandbox:")
		if !ok || id == "" {
			continue
		}
		if ok, err := exists(id); err != nil || ok {
			continue
		}
		if remove(id) == nil {
			gone = append(gone, id)
		}
	}
	return gone
}

// checkRunsc runs `runsc --version`: a file that is there but does not run
// (a foreign architecture, a truncated download) is caught at start.
func checkRunsc(runsc string) error {
	if runsc == "" {
		return errors.New("security.runsc is empty")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, runsc, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --version: %w: %s", runsc, err, strings.TrimSpace(string(out)))
	}
	if !strings.HasPrefix(string(out), "runsc version") {
		return fmt.Errorf("%s --version did not answer as runsc: %q", runsc, strings.TrimSpace(string(out)))
	}
	return nil
}

// wrapperScript is the OCI runtime wrapper: runsc with @RUNSC@'s flags.
// The id is the last argument and `start` the one before it (Podman may
// put runtime flags first, which go to the restore as they came); a
// container whose id has a file in @RESTORES@ is started from the
// snapshot that file names, once (RestoreOnStart), and runsc restores
// into the container it created.
const wrapperScript = `#!/bin/sh
# Written by mcp-forge: gVisor's runsc with the flags of its sandboxes (core/runtime/podman/gvisor.go).
if [ "$#" -ge 2 ]; then
	eval "id=\${$#}"
	eval "verb=\${$(($# - 1))}"
	if [ "$verb" = start ]; then
		case "$id" in
		*[!0-9a-f]* | '') ;;
		*)
			if [ -f @RESTORES@/"$id" ]; then
				img=$(cat @RESTORES@/"$id") && rm -f @RESTORES@/"$id" || exit 1
				n=$(($# - 2)) i=0
				for a do
					[ $i = 0 ] && set --
					i=$((i + 1))
					[ $i -le $n ] && set -- "$@" "$a"
				done
				exec @RUNSC@ "$@" restore --detach --image-path="$img" "$id"
			fi
			;;
		esac
	fi
fi
exec @RUNSC@ "$@"
`

// writeWrapper writes wrapperScript for runsc, flags and restores under
// dir, named by its content's hash (servers of different versions sharing
// a base path never rewrite each other's); an existing one is kept.
func writeWrapper(dir, runsc string, flags []string, restores string) (string, error) {
	cmd := shellQuote(runsc)
	for _, f := range flags {
		cmd += " " + shellQuote(f)
	}
	script := strings.NewReplacer("@RUNSC@", cmd, "@RESTORES@", shellQuote(restores)).Replace(wrapperScript)
	sum := sha256.Sum256([]byte(script))
	path := filepath.Join(dir, "mcp-forge-runsc-"+hex.EncodeToString(sum[:])[:16])
	if cur, err := os.ReadFile(path); err == nil && string(cur) == script {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	return path, writeAtomic(path, []byte(script), 0o755)
}

// writeAtomic writes data to path through a file beside it, renamed over
// it: a reader (Podman running the wrapper, the wrapper reading a mark)
// never sees half of it.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Close(), os.Chmod(tmp.Name(), mode)); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// isolate says which service creates a sandbox of s's isolation: the
// main one's connection (cx) for a container, the gVisor service's for
// gVisor, whose pids limit it raises for the Sentry's threads. It fails
// closed: a gVisor spec never falls back to runc here (the policy decides
// on a waiver before the spec is made).
func (c *Client) isolate(cx context.Context, g *specgen.SpecGenerator, s runtime.Spec, st rootlessState) (context.Context, error) {
	switch s.Isolation {
	case "", runtime.IsolationContainer:
		return cx, nil
	case runtime.IsolationGVisor:
	default:
		return nil, fmt.Errorf("podman create from %s: unknown isolation %q", s.Image, s.Isolation)
	}
	if gap, ok := c.gvisorGap(st); ok {
		return nil, fmt.Errorf("podman create from %s: refused, the sandbox must run under gVisor and %s (to enable it: %s)", s.Image, gap.Why, gap.Fix)
	}
	conn, err := c.gvisor.svc.conn()
	if err != nil {
		return nil, fmt.Errorf("podman create from %s under gVisor: %w", s.Image, err)
	}
	if g.ResourceLimits != nil && g.ResourceLimits.Pids != nil && g.ResourceLimits.Pids.Limit > 0 {
		g.ResourceLimits.Pids.Limit = gvisorPids(g.ResourceLimits.Pids.Limit, s.Endpoints)
	}
	gvisorNproc(g, s.Endpoints)
	return mergeCtx(cx, conn), nil
}

// gvisorGap is the kernel-isolation gap of this client, if it has one,
// on a service in state st.
func (c *Client) gvisorGap(st rootlessState) (runtime.Gap, bool) {
	const fix = "`make setup` installs a pinned runsc at /usr/local/lib/mcp-forge/runsc (security.runsc names another); `mcp-forge doctor` checks it"
	switch {
	case c.gvisor == nil:
		return runtime.Gap{Guarantee: runtime.KernelIsolation, Why: "this server has no gVisor runtime configured", Fix: fix}, true
	case c.gvisor.broken != nil:
		return runtime.Gap{Guarantee: runtime.KernelIsolation, Why: "gVisor's runsc cannot run: " + c.gvisor.broken.Error(), Fix: fix}, true
	case !c.local():
		return runtime.Gap{Guarantee: runtime.KernelIsolation, Why: "the Podman service is not on this host (server.podman_socket), and gVisor sandboxes are created through a service the core starts beside it",
			Fix: "run the server on the Podman host"}, true
	}
	if _, refusal := c.gvisor.decide(st); refusal != nil {
		return *refusal, true
	}
	return runtime.Gap{}, false
}

// limitControllers are the guarantees runsc's --ignore-cgroups gives up,
// by the cgroup controller each needs.
var limitControllers = []struct {
	g          runtime.Guarantee
	controller string
}{{runtime.Memory, "memory"}, {runtime.CPU, "cpu"}, {runtime.Pids, "pids"}}

// decide is how gVisor runs through a service in state st: refused (a
// kernel-isolation gap), or run, with the limits its sandboxes lose beyond
// the service's own gaps (lost). The service the core starts runs as this
// process, on its user's storage: the main service must be of the same
// kind, or the two would not share containers.
func (g *gvisor) decide(st rootlessState) (lost []runtime.Gap, refusal *runtime.Gap) {
	switch {
	case st.rootless && !g.rootless:
		return nil, &runtime.Gap{Guarantee: runtime.KernelIsolation,
			Why: "the Podman service (server.podman_socket) is rootless but this server runs as root: the gVisor service it starts would be root's, on another storage",
			Fix: "run the server as the user whose Podman it uses, or point server.podman_socket at root's service"}
	case !st.rootless && g.rootless:
		return nil, &runtime.Gap{Guarantee: runtime.KernelIsolation,
			Why: "the Podman service (server.podman_socket) is root's but this server does not run as root: the gVisor service it starts would be rootless, on another storage",
			Fix: "run the server as root, or use your own rootless Podman (`make setup-user`)"}
	case !st.rootless:
		return nil, nil
	}
	return rootlessGVisor(st.controllers, g.limitsWaived)
}

// rootlessGVisor decides gVisor under a rootless service that can use the
// cgroup controllers given: runsc runs there with --ignore-cgroups
// (RunscFlags), so its sandboxes get none of the memory, cpu and pids
// limits. Where the service has none of those controllers (rootless on
// cgroups v1, or v2 without delegation) that gives up nothing: those
// guarantees are already its gaps (hostFacts.gaps), which the operator
// waives or runs are refused, and every result names them. Where it has
// some, gVisor would run with less than runc: refused unless the operator
// waived all three (limitsWaived); then lost are the gaps gVisor's
// sandboxes add, so that no result claims a limit they go without.
func rootlessGVisor(controllers []string, limitsWaived bool) (lost []runtime.Gap, refusal *runtime.Gap) {
	var have []string
	for _, l := range limitControllers {
		if slices.Contains(controllers, l.controller) {
			have = append(have, l.controller)
			lost = append(lost, runtime.Gap{Guarantee: l.g,
				Why: "gVisor sandboxes under rootless Podman run with runsc --ignore-cgroups, without the " + l.controller + " limit this service could enforce",
				Fix: "run the server as root (runsc then sets the limits), or keep security.isolation = \"container\""})
		}
	}
	if len(have) == 0 || limitsWaived {
		return lost, nil
	}
	return nil, &runtime.Gap{Guarantee: runtime.KernelIsolation,
		Why: "gVisor under rootless Podman runs with runsc --ignore-cgroups (runsc cannot make a rootless sandbox's cgroups), which would give up the " + strings.Join(have, ", ") +
			" limits this service enforces through its delegated cgroup controllers",
		Fix: "run the server as root; or waive memory, cpu and pids (security.waive) to run gVisor sandboxes without those limits; or keep security.isolation = \"container\""}
}

// service is the core's own Podman service with runsc as its runtime,
// started on first use. It stops by itself after a minute without calls
// (--time), so that it never outlives a core that died; the next create
// starts it again.
type service struct {
	sock, runtime string
	// started runs once the service answers, each time it starts.
	started func(context.Context)

	mu  sync.Mutex
	cmd *exec.Cmd
	cx  context.Context
}

// serviceIdle is the service's --time: it exits this long after its last call.
const serviceIdle = 60 * time.Second

func (s *service) conn() (context.Context, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cx != nil && s.cmd != nil && s.cmd.ProcessState == nil && ping(s.sock) == nil {
		return s.cx, nil
	}
	if s.cmd != nil && s.cmd.ProcessState == nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	os.Remove(s.sock)
	cmd := exec.Command("podman", "--runtime", s.runtime, "system", "service", "--time="+strconv.Itoa(int(serviceIdle/time.Second)), "unix://"+s.sock)
	cmd.Env = append(os.Environ(), "LANG=C")
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting Podman's service with runsc as its runtime: %w", err)
	}
	go cmd.Wait() // reaps it when it idles out; ProcessState then says so
	s.cmd = cmd
	deadline := time.Now().Add(30 * time.Second)
	for ping(s.sock) != nil {
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			cmd.Process.Kill()
			return nil, fmt.Errorf("the Podman service with runsc as its runtime did not answer on %s within 30 s: %s", s.sock, strings.TrimSpace(stderr.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cx, err := bindings.NewConnection(context.Background(), "unix://"+s.sock)
	if err != nil {
		return nil, fmt.Errorf("connect to Podman's gVisor service at %s: %w", s.sock, err)
	}
	s.cx = cx
	if s.started != nil {
		s.started(cx)
	}
	return cx, nil
}

// ping asks the service at sock for /_ping.
func ping(sock string) error {
	cl := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := cl.Get("http://d/_ping")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/_ping: %s", resp.Status)
	}
	return nil
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	mu sync.Mutex
	w  io.Writer
	n  int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// local says whether the service is on this host (a unix socket).
func (c *Client) local() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.HasPrefix(c.socket, "unix://")
}
