package policy

import (
	"path/filepath"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/seccomp"
)

func secs(n int64) time.Duration { return time.Duration(n) * time.Second }

// FromConfig derives the rule parameters from a validated configuration.
func FromConfig(c config.Config) Settings {
	e := c.Execution
	roots := map[string]string{}
	for _, r := range c.Volumes.HostRoots {
		roots[filepath.Clean(r.Path)] = r.Claim
	}
	return Settings{
		HostRoots:     roots,
		AllowedImages: c.Images.Allowed,
		AllowNetwork:  c.Security.AllowNetwork,
		User:          c.Security.SandboxUser,
		UserNS:        c.Security.UserNS,
		UserNSStart:   int64(c.Security.UserNSStart),
		BasePath:      c.Volumes.BasePath,
		TmpfsMax:      int64(c.Security.TmpfsSize),
		Seccomp:       seccomp.Path(c.Volumes.BasePath),
		SeccompGVisor: seccomp.GVisorPath(c.Volumes.BasePath),
		Isolation:     c.Security.Isolation,
		Waived:        Waivers(c),
		TurnedOff:     configGaps(c),
		Defaults: runtime.Limits{
			MemoryBytes: int64(e.DefaultMemory), CPUQuota: int64(e.DefaultCPUQuota),
			Pids: int64(e.DefaultPids), NoFile: int64(e.NoFile), Timeout: secs(int64(e.DefaultTimeout)),
		},
		Max: runtime.Limits{
			MemoryBytes: int64(e.MaxMemory), CPUQuota: int64(e.MaxCPUQuota),
			Pids: int64(e.MaxPids), NoFile: int64(e.NoFile), Timeout: secs(int64(e.LongestTimeout())), // a background job's may pass a call's
		},
	}
}
