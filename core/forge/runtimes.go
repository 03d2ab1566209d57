package forge

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/config"
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
	return podman.New(cfg.Server.PodmanSocket), nil
}
