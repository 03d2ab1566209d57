package forge

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/forge/pluginset"
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
	return podman.New(cfg.Server.PodmanSocket).WithAgent(a).WithGVisor(cfg.Security.Runsc, cfg.Volumes.BasePath, RunscRoot, RunscNetwork(cfg)), nil
}

// RunscRoot is the state directory of the runsc that runs this core's
// gVisor sandboxes: apart from any other runsc user's on the host.
const RunscRoot = "/run/mcp-forge/runsc"

// RunscNetwork is runsc's network for this core's gVisor sandboxes: its own
// stack only where sandboxes may have a network; "none" still gives them a
// loopback.
func RunscNetwork(cfg config.Config) string {
	if cfg.Security.AllowNetwork {
		return "sandbox"
	}
	return "none"
}
