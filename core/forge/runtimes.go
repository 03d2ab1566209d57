package forge

import (
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/forge/pluginset"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes"
	"github.com/mcp-forge/mcp-forge/core/runtime/podman"
)

// runtimeFor is the runtime [runtime] kind names: the one place the core
// names a runtime implementation (test/imports). What it can do beyond
// runtime.Runtime it declares itself (runtime.Capabilities).
func runtimeFor(cfg config.Config, log hclog.Logger) (Runtime, error) {
	if cfg.Runtime.Kind == "kubernetes" {
		return kubernetes.New(cfg.Runtime.Kubernetes, kubernetes.Options{Quota: int64(cfg.Volumes.SessionQuota), MaxPids: int64(cfg.Execution.MaxPids),
			SessionGrace: time.Duration(cfg.Sessions.IdleTimeout) * time.Second, Log: log.Named("kubernetes")})
	}
	a := pluginset.Agent(cfg)
	if a == "" {
		log.Warn("no mcp-forge-agent beside the plugins: sandboxes cannot have network by host name", "dir", pluginset.Dir(cfg), "fix", "make build or make install")
	}
	return podman.New(cfg.Server.PodmanSocket).WithAgent(a).WithGVisor(cfg.Security.Runsc, cfg.Volumes.BasePath, RunscRoot(os.Geteuid(), os.Getenv), RunscNetwork(cfg)).
		WithLimitsWaived(policy.LimitsWaived(cfg)), nil
}

// RunscRoot is the state directory of the runsc that runs this core's
// gVisor sandboxes, apart from any other runsc user's on the host: root's
// under /run, a rootless user's in its runtime directory (where
// `make setup-user` keeps its Podman socket), which it owns and which
// goes with its session.
func RunscRoot(euid int, getenv func(string) string) string {
	if euid == 0 {
		return "/run/mcp-forge/runsc"
	}
	rt := getenv("XDG_RUNTIME_DIR")
	if rt == "" {
		rt = "/run/user/" + strconv.Itoa(euid)
	}
	return filepath.Join(rt, "mcp-forge", "runsc")
}

// RunscNetwork is runsc's network for this core's gVisor sandboxes: its own
// stack only where sandboxes may have a network; "none" still gives them a
// loopback.
func RunscNetwork(cfg config.Config) string {
	if cfg.Security.AllowNetwork {
		return "sandbox"
	}
	return "none"
}
