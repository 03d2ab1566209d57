package forge

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/mcp-forge/mcp-forge/core/environments"
	"github.com/mcp-forge/mcp-forge/core/periodic"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// cleanupInterval is how often auto_cleanup runs; its limits are in days.
const cleanupInterval = time.Hour

// environments sets up custom environment builds and their MCP tools, and
// starts auto_cleanup. A missing builder plugin is a warning, not a failed
// start: the tools then refuse builds saying so, and list and delete work.
func (f *Forge) environments(bg context.Context, pol *policy.Policy, rt Runtime) {
	cfg := f.Config
	if !cfg.EnvironmentBuilder.Enabled {
		return
	}
	if why := f.caps.NoBuilds; why != nil {
		// The runtime cannot run what is built (a cluster's node runs
		// only what it can pull): refused before any builder fetches a
		// package, with the key that enables it.
		f.Log.Warn("custom environments are unavailable", "reason", why)
		f.MCP.SetEnvironments(nil, why.Error())
		return
	}
	bld := cfg.EnvironmentBuilder.Builder
	if !slices.Contains(f.Plugins.Typed(plugin.TypeBuilder), bld) {
		f.Log.Warn("the configured builder plugin is not loaded; build_environment refuses until it is (mcp-forge doctor)",
			"environment_builder.builder", bld, "builders", f.Plugins.Typed(plugin.TypeBuilder))
	}
	base := map[string]string{}
	for _, l := range f.Engine.Languages() {
		for _, o := range []string{l.Stateless.Capabilities.Image, l.Session.Capabilities.Image} {
			if o != "" && base[l.ID] == "" {
				base[l.ID] = o
			}
		}
	}
	svc, err := environments.New(environments.Options{
		Config: cfg.EnvironmentBuilder, Instance: Instance(cfg.Volumes.BasePath), StateDir: cfg.Volumes.BasePath,
		Images: rt, Containers: rt, Builders: f.Plugins, DefaultBase: base, CheckImage: pol.CheckImage, Audit: f.Audit, Log: f.Log.Named("environments"),
		BuilderVersion: func(name string) string {
			for _, s := range f.Plugins.Statuses() {
				if s.Name == name {
					return s.Version
				}
			}
			return ""
		},
	})
	if err != nil {
		f.Log.Error("custom environments are unavailable", "error", err)
		f.MCP.SetEnvironments(nil, fmt.Sprintf("the server could not set them up: %v", err))
		return
	}
	f.Environments = svc
	f.MCP.SetEnvironments(svc, "")
	go func() {
		clean := func(ctx context.Context) bool {
			if n, err := svc.Cleanup(ctx); err != nil {
				if ctx.Err() != nil {
					return false // the server is stopping: not a failure
				}
				f.Log.Warn("environment cleanup failed", "error", err)
			} else if len(n) > 0 {
				f.Log.Info("removed old custom environments", "count", len(n))
			}
			return true
		}
		clean(bg)
		periodic.Every(bg, cleanupInterval, clean)
	}()
}
