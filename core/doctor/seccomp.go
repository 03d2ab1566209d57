package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/seccomp"
)

// seccompProbe runs each call in a forked child (so that a call that
// succeeds, such as unshare, cannot change the next one) and reports the
// child's errno, 0 for success.
const seccompProbe = `
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    pid = os.fork()
    if pid == 0:
        r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
        os._exit(0 if r >= 0 else min(ctypes.get_errno(), 255))
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
mode = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0]
print(json.dumps({"mode": mode, "unshare(CLONE_NEWUSER)": call(%d, 0x10000000),
    "ptrace(PTRACE_SEIZE, 1)": call(%d, 0x4206, 1, 0, 0), "keyctl": call(%d, 0, -3, 1)}))
`

// Seccomp reports MCP-Forge's seccomp profile (path, syscall counts) and
// proves that Podman applies it: a probe container, created through the
// sandbox like any run, must see seccomp mode 2 and get EPERM for
// unshare(CLONE_NEWUSER), ptrace and keyctl, all of which Podman's default
// profile allows.
// The probe is Python code: it runs in the first of images that has python3
// (the sandbox images of the loaded plugins).
func Seccomp(rt runtime.Runtime, cfg config.Config, instance string, images []string) Check {
	return func(ctx context.Context) []Result {
		path, err := seccomp.Install(cfg.Volumes.BasePath)
		if err != nil {
			return []Result{{"seccomp", Fail, err.Error(), "make volumes.base_path writable"}}
		}
		s := seccomp.Summarize()
		out := []Result{{"seccomp", OK, fmt.Sprintf("%s: %d syscalls allowed, %d allowed by argument (clone without namespace flags, personality), %d refused with EPERM, %d with ENOSYS, every other call ENOSYS",
			path, s.Allowed, s.Filtered, s.DeniedEPERM, s.DeniedNoSys), ""}}
		last := Result{"seccomp applied", Warn, "not verified: no plugin image is known", "build the plugins (make build) and run doctor again"}
		for _, image := range images {
			var ran bool
			if last, ran = probeSeccomp(ctx, rt, cfg, instance, image); ran {
				break
			}
		}
		return append(out, last)
	}
}

// probeSeccomp reports ran false when image has no python3 to run the probe.
func probeSeccomp(ctx context.Context, rt runtime.Runtime, cfg config.Config, instance, image string) (_ Result, ran bool) {
	fail := func(detail string) (Result, bool) {
		return Result{"seccomp applied", Fail, detail, "the Podman service must read the profile from this host's filesystem; check `podman info` and the server log"}, true
	}
	al, err := audit.Open(cfg.Security.AuditLog, int64(cfg.Security.AuditMaxSize), cfg.Security.AuditKeep)
	if err != nil {
		return Result{"seccomp applied", Warn, "not verified: " + err.Error(), "set security.audit_log to a writable path"}, true
	}
	defer al.Close()
	pol := policy.New(policy.FromConfig(cfg), filepath.EvalSymlinks)
	m := sandbox.New(rt, pol, al, hclog.NewNullLogger(), sandbox.Options{Instance: instance})
	lim := pol.Settings().Defaults
	lim.Timeout = 60 * time.Second
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	code := fmt.Sprintf(seccompProbe, syscall.SYS_UNSHARE, syscall.SYS_PTRACE, syscall.SYS_KEYCTL)
	res, err := m.Run(ctx, policy.Intent{Image: image, Command: []string{"python3", "-c", code}, Limits: lim, Plugin: "doctor",
		Labels: map[string]string{runtime.LabelOneShot: "true", runtime.LabelCodeHash: audit.HashCode(code)}}, 1<<16)
	if err != nil {
		return Result{"seccomp applied", Warn, "not verified: the probe container did not run: " + err.Error(), "fix the checks above (Podman, images), then run doctor again"}, true
	}
	if res.ExitCode == 127 {
		return Result{"seccomp applied", Warn, "not verified: no plugin image has python3 to run the probe in", ""}, false
	}
	var got map[string]any
	if err := json.Unmarshal(res.Stdout, &got); err != nil {
		return fail(fmt.Sprintf("probe output %q (exit %d, stderr %q)", res.Stdout, res.ExitCode, res.Stderr))
	}
	if got["mode"] != "2" {
		return fail(fmt.Sprintf("the probe container runs without a seccomp filter (Seccomp: %v)", got["mode"]))
	}
	var bad []string
	for k, v := range got {
		if k != "mode" && v != float64(syscall.EPERM) {
			bad = append(bad, fmt.Sprintf("%s gave %v", k, v))
		}
	}
	if len(bad) > 0 {
		return fail("the probe container is not under MCP-Forge's profile: " + strings.Join(bad, ", ") + " (want EPERM)")
	}
	return Result{"seccomp applied", OK, "a probe container runs under it: unshare(CLONE_NEWUSER), ptrace and keyctl are refused with EPERM", ""}, true
}
