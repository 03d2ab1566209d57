// Package commands is the operator commands of mcp-forge other than serve:
// doctor, images, plugins, the tenants' keys and the watchdog, each over
// the core its assembly (core/forge) describes as a Core, so that each
// diagnoses, lists or cleans up after the core serve would run.
package commands

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/doctor"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/forge/network"
	"github.com/mcp-forge/mcp-forge/core/forge/pluginset"
	"github.com/mcp-forge/mcp-forge/core/fsquota"
	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/route"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/telemetry"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/watchdog"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// ErrFailed is a command's failure that its own output already reported
// (doctor's failed checks, a missing image): the caller only exits 1.
var ErrFailed = errors.New("failed (reported above)")

// Core is the core a command is about, as its assembly (core/forge) makes
// it from the configuration.
type Core struct {
	Config config.Config
	// ConfigPath is the file the configuration came from ("": the
	// defaults).
	ConfigPath string
	// Instance names its containers (forge.Instance).
	Instance string
	// HTTPAddr is where serve would listen for HTTP; "" on stdio.
	HTTPAddr string
	// Runtime is the runtime the configuration names, lacking what its
	// host lacks, as serve would run it (watchdog first).
	Runtime func(hclog.Logger) (runtime.Runtime, error)
	// Plugins are its plugins, inspected (started only to learn what they
	// are).
	Plugins func(context.Context) []plugins.Status
	// Audit opens its audit log; Log its log.
	Audit func() (*audit.Logger, error)
	Log   func() (hclog.Logger, func(), error)
}

// IO is where a command reads and writes (nil: the process's).
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Out is where the command writes.
func (o IO) Out() io.Writer {
	if o.Stdout == nil {
		return os.Stdout
	}
	return o.Stdout
}

// Err is where the command says what is not its output.
func (o IO) Err() io.Writer {
	if o.Stderr == nil {
		return os.Stderr
	}
	return o.Stderr
}

// In is what the command reads.
func (o IO) In() io.Reader {
	if o.Stdin == nil {
		return os.Stdin
	}
	return o.Stdin
}

func orDefaults(p string) string {
	if p == "" {
		return "built-in defaults"
	}
	return p
}

// Doctor checks this host for serving c: Podman, runtime, cgroups,
// limits, images, paths, plugins and routing, and the HTTP listener when
// it would serve HTTP. ErrFailed if a check failed.
func Doctor(ctx context.Context, c Core, o IO) error {
	cfg, w := c.Config, o.Out()
	fmt.Fprintf(w, "ok    %-16s %s\n", "config", orDefaults(c.ConfigPath))
	sts := c.Plugins(ctx)
	images := slices.Sorted(maps.Keys(pluginset.Images(sts)))
	rt, err := c.Runtime(hclog.NewNullLogger())
	if err != nil {
		fmt.Fprintf(w, "FAIL  %-16s %v\n", "runtime", err)
		return ErrFailed
	}
	guarantees := doctor.Guarantees(rt, cfg)
	checks := []doctor.Check{doctor.Podman(rt, cfg, images), doctor.Rootless(rt, cfg, doctor.LocalHost()), doctor.Paths(cfg),
		guarantees, doctor.Seccomp(rt, cfg, c.Instance, images), agentCheck(cfg)}
	if own := runtime.CapabilitiesOf(rt).Doctor; own != nil {
		// The runtime checks itself (a cluster: its API, permissions,
		// nodes and registry) in place of a Podman host.
		findings := own(images)
		cluster := func(ctx context.Context) []doctor.Result {
			var out []doctor.Result
			for _, f := range findings(ctx) {
				out = append(out, doctor.Result{Name: f.Name, Status: doctor.Status(f.Status), Detail: f.Detail, Fix: f.Fix})
			}
			return out
		}
		checks = []doctor.Check{cluster, doctor.Paths(cfg), guarantees}
	}
	checks = append(checks, pluginCheck(cfg, sts), doctor.Environments(cfg, Builders(sts), exec.LookPath), doctor.UV(cfg, exec.LookPath, toolVersion))
	if c.HTTPAddr != "" {
		checks = append(checks, httpserver.Doctor(cfg, c.HTTPAddr))
	}
	if cfg.Telemetry.OTLPEndpoint != "" {
		checks = append(checks, telemetryCheck(cfg.Telemetry))
	}
	checks = append(checks, network.CredentialsCheck(cfg))
	if !doctor.Run(ctx, w, checks...) {
		return ErrFailed
	}
	return nil
}

// toolVersion runs `path --version` with a bound.
func toolVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	return string(out), err
}

// agentCheck reports the mcp-forge-agent the Podman runtime mounts into
// every sandbox (network by host name runs it).
func agentCheck(cfg config.Config) doctor.Check {
	return func(context.Context) []doctor.Result {
		if p := pluginset.Agent(cfg); p != "" {
			return []doctor.Result{{Name: "agent", Status: doctor.OK, Detail: p}}
		}
		return []doctor.Result{{Name: "agent", Status: doctor.Warn,
			Detail: "no mcp-forge-agent (mode 0755) in " + pluginset.Dir(cfg) + ": runs with network by host name are refused",
			Fix:    "run `make build` (it goes next to the plugins) or `make install`"}}
	}
}

// pluginCheck reports each plugin as the core would load it (checksum,
// launch, configuration, capabilities), and the routing of each language.
func pluginCheck(cfg config.Config, sts []plugins.Status) doctor.Check {
	return func(ctx context.Context) []doctor.Result {
		if len(sts) == 0 {
			dir := pluginset.Dir(cfg)
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

// ListImages lists the images the backends run (each plugin's configured
// image, by default the one it declares) and whether they are built.
// ErrFailed if one is missing or a plugin did not load.
func ListImages(ctx context.Context, c Core, o IO) error {
	w := o.Out()
	sts := c.Plugins(ctx)
	if len(sts) == 0 {
		fmt.Fprintf(w, "no plugins found in %s; run `make build`\n", pluginset.Dir(c.Config))
		return ErrFailed
	}
	rt, err := c.Runtime(hclog.NewNullLogger())
	if err != nil {
		return err
	}
	var failed error
	byImage := pluginset.Images(sts)
	for _, img := range slices.Sorted(maps.Keys(byImage)) {
		users := "used by " + strings.Join(byImage[img], ", ")
		ii, ok, err := rt.Image(ctx, img)
		switch {
		case err != nil:
			fmt.Fprintf(w, "%-28s error: %v (%s)\n", img, err, users)
			failed = ErrFailed
		case !ok:
			fmt.Fprintf(w, "%-28s missing: run `make images` (%s)\n", img, users)
			failed = ErrFailed
		default:
			fmt.Fprintf(w, "%-28s %4d MB  recipe %s  packages %s  (%s)\n", img, ii.Size>>20, ii.Labels["io.mcp-forge.recipe"], ii.Labels["io.mcp-forge.packages"], users)
		}
	}
	for _, st := range sts {
		if st.Error != "" {
			fmt.Fprintf(w, "plugin %s is not loaded, so its image is unknown: %s\n", st.Name, st.Error)
			failed = ErrFailed
		}
	}
	return failed
}

// ListPlugins shows the plugins with their versions and checksum status.
// ErrFailed if there is none or one cannot be probed.
func ListPlugins(ctx context.Context, cfg config.Config, o IO) error {
	w := o.Out()
	entries := plugins.Discover(cfg, pluginset.Dir(cfg))
	if len(entries) == 0 {
		fmt.Fprintf(w, "no plugins found in %s; run `make build`\n", pluginset.Dir(cfg))
		return ErrFailed
	}
	var failed error
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tVERSION\tAPI\tCHECKSUM\tPATH")
	var problems []string
	for _, e := range entries {
		p, _, err := plugins.Probe(ctx, e)
		if err != nil {
			fmt.Fprintf(tw, "%s\t?\t?\t?\t%s\t%s\n", e.Name, p.Checksum, e.Path)
			problems = append(problems, fmt.Sprintf("%s: %v", e.Name, err))
			failed = ErrFailed
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", e.Name, p.Type, p.Version, p.APIVersion, p.Checksum, e.Path)
	}
	tw.Flush()
	for _, p := range problems {
		fmt.Fprintln(w, "error:", p)
	}
	return failed
}

// NewTenantKey makes an API key and prints it with the sha256 to put in
// [tenants.NAME].
func NewTenantKey(o IO) error {
	key, hash, err := tenant.NewKey()
	if err != nil {
		return err
	}
	w := o.Out()
	fmt.Fprintf(w, "key:    %s\nsha256: %s\n\n", key, hash)
	fmt.Fprintln(w, "Give the key to the tenant (it is shown once); put only the sha256 in forge.toml:")
	fmt.Fprintf(w, "  [tenants.NAME]\n  api_key_sha256 = [%q]\n", hash)
	return nil
}

// HashTenantKey prints the sha256 of the key on the first line of stdin
// (so that the key stays out of shell history).
func HashTenantKey(o IO) error {
	fmt.Fprintln(o.Err(), "reading the key from stdin (one line)")
	line, err := bufio.NewReader(o.In()).ReadString('\n')
	key := strings.TrimRight(line, "\r\n")
	if key == "" {
		return fmt.Errorf("tenant hash-key: no key on stdin: %v", err)
	}
	fmt.Fprintln(o.Out(), tenant.HashKey(key))
	return nil
}

// Watchdog is the watchdog process of server serverID (started by serve):
// it waits for its server's end on the inherited pipe, then removes the
// server's containers and releases its workspaces. watchdog.ErrNoPipe: it
// was started by hand.
func Watchdog(c Core, serverID string) error {
	cfg := c.Config
	pipe := watchdog.Pipe()
	if watchdog.CheckPipe(pipe) != nil {
		return watchdog.ErrNoPipe
	}
	log, closeLog, err := c.Log()
	if err != nil {
		return err
	}
	defer closeLog()
	log = log.Named("watchdog")
	rt, err := c.Runtime(log)
	if err != nil {
		return err
	}
	n, err := watchdog.Run(pipe, watchdog.Options{
		ServerID: serverID,
		Runtime:  rt,
		Log:      log,
		Release: func() (int, error) {
			return fsquota.ReleaseServer(cfg.Volumes.BasePath, serverID, log.Named("quota"))
		},
		Audit: func() (audit.Recorder, func(), error) {
			al, err := c.Audit()
			if err != nil {
				return nil, nil, err
			}
			al.OnError(func(err error) { log.Error("audit log write failed", "error", err) })
			return al, func() { al.Close() }, nil
		},
	})
	if n > 0 {
		log.Warn("removed the containers of a server that ended without stopping them", "server", serverID, "count", n)
	}
	if err != nil {
		log.Error("sweep incomplete", "error", err)
		return fmt.Errorf("%w: sweep incomplete: %v", ErrFailed, err)
	}
	return nil
}

// telemetryCheck: the collector answers an empty export. A warning at
// worst: traces are optional and never hold a call.
func telemetryCheck(cfg config.Telemetry) doctor.Check {
	return func(ctx context.Context) []doctor.Result {
		if err := telemetry.Probe(ctx, cfg); err != nil {
			return []doctor.Result{{Name: "telemetry", Status: doctor.Warn, Detail: err.Error(),
				Fix: "start the OTLP/HTTP collector at telemetry.otlp_endpoint (the base URL: spans go to /v1/traces), or empty it; calls are served either way"}}
		}
		return []doctor.Result{{Name: "telemetry", Status: doctor.OK, Detail: "traces to " + cfg.OTLPEndpoint}}
	}
}

// Builders are the builder plugins among sts, for doctor.
func Builders(sts []plugins.Status) []doctor.BuilderStatus {
	var out []doctor.BuilderStatus
	for _, s := range sts {
		if s.Type == plugin.TypeBuilder || (s.Type == "" && s.Error != "") {
			out = append(out, doctor.BuilderStatus{Name: s.Name, Version: s.Version, Error: s.Error})
		}
	}
	return out
}
