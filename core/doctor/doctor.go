// Package doctor diagnoses a host: each check says ok, or what is wrong and
// what to run.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/fsquota"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Status of one check.
type Status string

// Statuses.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "FAIL"
)

// Result is one line of the report.
type Result struct {
	Name   string
	Status Status
	Detail string
	Fix    string
}

// Engine is what describes a runtime: its version, cgroups, rootless.
type Engine interface {
	Info(ctx context.Context) (runtime.Info, error)
}

// Check is one diagnosis.
type Check func(ctx context.Context) []Result

// Run runs checks in order and writes the report; it returns false if any failed.
func Run(ctx context.Context, w io.Writer, checks ...Check) bool {
	ok := true
	for _, c := range checks {
		for _, r := range c(ctx) {
			line := fmt.Sprintf("%-4s  %-16s %s", r.Status, r.Name, r.Detail)
			if r.Fix != "" && r.Status != OK {
				line += "\n      → " + r.Fix
			}
			fmt.Fprintln(w, line)
			if r.Status == Fail {
				ok = false
			}
		}
	}
	return ok
}

// Podman checks the engine: reachable, version, OCI runtime, cgroups,
// rootless, and that images (those the
// backends run) are built.
func Podman(rt interface {
	Engine
	runtime.Images
}, cfg config.Config, images []string) Check {
	return func(ctx context.Context) []Result {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		info, err := rt.Info(ctx)
		if err != nil {
			return []Result{{"podman", Fail, err.Error(), "run `make setup` (installs Podman and starts its API service)"}}
		}
		out := []Result{{"podman", OK, fmt.Sprintf("reachable at %s, version %s (API %s)", info.Socket, info.Version, info.APIVersion), ""}}
		if info.OCIRuntime == cfg.Security.OCIRuntime {
			out = append(out, Result{"oci runtime", OK, info.OCIRuntime, ""})
		} else {
			out = append(out, Result{"oci runtime", Warn, fmt.Sprintf("Podman uses %q, security.oci_runtime is %q", info.OCIRuntime, cfg.Security.OCIRuntime),
				"set [engine] runtime in containers.conf (make setup writes runc), or change security.oci_runtime"})
		}
		cg := "v1"
		if info.CgroupsV2 {
			cg = "v2"
		}
		mode := "rootful"
		if info.Rootless {
			mode = "rootless"
		}
		out = append(out, Result{"cgroups", OK, cg + ", " + mode, ""})
		switch {
		case !info.Rootless && cfg.Security.UserNS == "auto":
			out = append(out, subidCheck())
			if runtime.VersionBelow(info.Version, "4.4") {
				out = append(out, Result{"userns", Warn, "userns = \"auto\" with Podman " + info.Version + " deadlocks under concurrent container starts (podman issue 16062)", "use security.userns = \"private\" (the default) or upgrade Podman"})
			}
		case cfg.Security.UserNS == "private" && !info.Rootless: // rootless.go reports the rootless map
			out = append(out, Result{"userns", OK, fmt.Sprintf("each sandbox in its own user namespace; container ids map to host %d.. (never host accounts)", cfg.Security.UserNSStart), ""})
		case cfg.Security.UserNS == "host":
			out = append(out, Result{"userns", Warn, "sandboxes share the host user namespace: container uid 1000 is host uid 1000", "set security.userns = \"private\""})
		}
		for _, img := range images {
			ii, ok, err := rt.Image(ctx, img)
			switch {
			case err != nil:
				out = append(out, Result{"image", Fail, img + ": " + err.Error(), ""})
			case !ok:
				fix := "run `make images` (builds offline from Debian, about 4 minutes)"
				if info.Rootless {
					fix = "run `make setup-user` (copies the images into your storage; see README, rootless)"
				}
				out = append(out, Result{"image", Fail, img + " is missing from " + mode + " storage", fix})
			default:
				out = append(out, Result{"image", OK, fmt.Sprintf("%s (%d MB, recipe %s)", img, ii.Size>>20, ii.Labels["io.mcp-forge.recipe"]), ""})
			}
		}
		return out
	}
}

func subidCheck() Result {
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), "containers:") {
			return Result{"userns", Fail, f + " has no range for the \"containers\" user, needed by userns=auto",
				"add `containers:2147483647:2147483648` to /etc/subuid and /etc/subgid (make setup does)"}
		}
	}
	return Result{"userns", OK, "each sandbox gets its own user namespace (userns=auto)", ""}
}

// Paths checks that the audit log and the base path are writable.
func Paths(cfg config.Config) Check {
	return func(context.Context) []Result {
		out := AuditLog(cfg.Security.AuditLog)
		probe := filepath.Join(cfg.Volumes.BasePath, "sessions")
		if err := os.MkdirAll(probe, 0o711); err != nil {
			out = append(out, Result{"volumes", Fail, err.Error(), "set volumes.base_path to a writable directory"})
		} else {
			out = append(out, Result{"volumes", OK, cfg.Volumes.BasePath + " is writable", ""})
		}
		// Whether sandboxes may run without it is guarantee workspace-quota's line.
		if m := fsquota.Detect(cfg.Volumes.BasePath); m.Enforced() {
			out = append(out, Result{"workspace quota", OK, m.String(), ""})
		} else {
			out = append(out, Result{"workspace quota", Warn, m.String() + " (see guarantee workspace-quota)", "run as root with loop devices and e2fsprogs (make setup)"})
		}
		return out
	}
}

// minAuditSpace is the free space below which the audit log is reported as
// unwritable: a line is a few hundred bytes, a run writes about ten.
const minAuditSpace = 1 << 20

// AuditLog checks that the audit log can be written: the server refuses
// every execution while it cannot.
func AuditLog(path string) []Result {
	const refused = "; the server refuses every execution while its audit log cannot be written"
	fail := func(detail, fix string) []Result { return []Result{{"audit log", Fail, detail + refused, fix}} }
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err.Error(), "set security.audit_log to a writable path")
	}
	st, err := os.Lstat(path)
	switch {
	case err == nil && st.IsDir():
		return fail(path+" is a directory, not a file", "remove or move the directory, or set security.audit_log to another path")
	case err == nil && !st.Mode().IsRegular():
		return fail(path+" is not a regular file ("+st.Mode().Type().String()+")", "replace it with a regular file or set security.audit_log to another path")
	case err != nil && !os.IsNotExist(err):
		return fail(err.Error(), "set security.audit_log to a readable, writable path")
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fix := "set security.audit_log to a writable path"
		if errors.Is(err, syscall.EPERM) {
			fix = "the file may be immutable or append-only (`lsattr " + path + "`; `chattr -i " + path + "`), or on a read-only mount"
		} else if errors.Is(err, syscall.EROFS) {
			fix = "the file is on a read-only filesystem; set security.audit_log to a writable path"
		}
		return fail(err.Error(), fix)
	}
	f.Close()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err == nil {
		if free := int64(fs.Bavail) * int64(fs.Bsize); free < minAuditSpace {
			return fail(fmt.Sprintf("the filesystem of %s has %d bytes free", dir, free), "free space there, or set security.audit_log to a path on another filesystem")
		}
	}
	var out []Result
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&^0o600 != 0 {
		out = append(out, Result{"audit log", Warn, fmt.Sprintf("%s has mode %v; the server tightens it to 0600 at start", path, st.Mode().Perm()), "chmod 600 " + path})
	}
	if st, err := os.Stat(dir); err == nil && st.Mode().Perm()&0o077 != 0 && st.Mode()&os.ModeSticky == 0 {
		out = append(out, Result{"audit log", Warn, fmt.Sprintf("its directory %s has mode %v: other users can list it", dir, st.Mode().Perm()), "chmod 700 " + dir + " (if only the log lives there)"})
	}
	return append(out, Result{"audit log", OK, path + " is writable", ""})
}
