package doctor

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// MinSubIDs is how many sub-ids a rootless user needs: the private user
// namespace of each sandbox maps 65536 container ids onto them.
const MinSubIDs = runtime.UserNSSize

// Host is what the rootless checks read from the machine; tests replace it.
type Host struct {
	Euid      int
	User      string // login name of Euid
	Getenv    func(string) string
	ReadFile  func(string) ([]byte, error)
	Stat      func(string) (os.FileInfo, error)
	Lgetxattr func(path, attr string) bool // the attribute exists
	HardLimit func(resource int) (uint64, error)
}

// LocalHost is this machine.
func LocalHost() Host {
	h := Host{Euid: os.Geteuid(), Getenv: os.Getenv, ReadFile: os.ReadFile, Stat: os.Stat,
		Lgetxattr: func(p, a string) bool {
			n, err := syscall.Getxattr(p, a, nil)
			return err == nil && n > 0
		},
		HardLimit: func(r int) (uint64, error) {
			var l syscall.Rlimit
			err := syscall.Getrlimit(r, &l)
			return l.Max, err
		},
	}
	if u, err := user.LookupId(strconv.Itoa(h.Euid)); err == nil {
		h.User = u.Username
	}
	return h
}

// Rootless checks what a non-root user running rootless Podman needs, each
// failure with the command that fixes it. Root gets no lines: `make setup`
// covers it.
func Rootless(rt Engine, cfg config.Config, h Host) Check {
	return func(ctx context.Context) []Result {
		if h.Euid == 0 {
			return nil
		}
		out := []Result{h.socketCheck(cfg)}
		out = append(out, h.subIDChecks()...)
		out = append(out, h.idmapChecks()...)
		info, err := rt.Info(ctx)
		if err == nil {
			out = append(out, h.cgroupCheck(info, cfg), h.runtimeCheck(info))
			if info.Rootless && cfg.Security.UserNS == "private" {
				out = append(out, Result{"rootless userns", OK, fmt.Sprintf("container ids 0..%d map to your sub-ids (never your own uid %d); sandbox user %s is a sub-id", runtime.UserNSSize-1, h.Euid, cfg.Security.SandboxUser), ""})
			}
		}
		out = append(out, h.storageCheck(), h.rlimitCheck(cfg), h.quotaCheck(cfg))
		return out
	}
}

func (h Host) socketCheck(cfg config.Config) Result {
	if cfg.Server.PodmanSocket != "" {
		return Result{"user socket", OK, "server.podman_socket = " + cfg.Server.PodmanSocket, ""}
	}
	rt := h.Getenv("XDG_RUNTIME_DIR")
	if rt == "" {
		return Result{"user socket", Fail, "XDG_RUNTIME_DIR is not set, so your Podman socket cannot be found",
			fmt.Sprintf("log in through a session that sets it (pam_systemd), or `export XDG_RUNTIME_DIR=/run/user/%d` (a directory you own, mode 0700), then `make setup-user`", h.Euid)}
	}
	sock := filepath.Join(rt, "podman", "podman.sock")
	st, err := h.Stat(sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		return Result{"user socket", Fail, sock + " is missing: your rootless Podman service is not running",
			"run `make setup-user` (starts `systemctl --user` podman.socket, or a background `podman system service`)"}
	}
	return Result{"user socket", OK, sock, ""}
}

// subIDChecks reads /etc/subuid and /etc/subgid for the user's range.
func (h Host) subIDChecks() []Result {
	var out []Result
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		n := h.subIDCount(f)
		if n >= MinSubIDs {
			out = append(out, Result{"sub-ids", OK, fmt.Sprintf("%s: %d ids for %s", f, n, h.User), ""})
			continue
		}
		out = append(out, Result{"sub-ids", Fail, fmt.Sprintf("%s gives %s %d ids; each sandbox's user namespace needs %d", f, h.User, n, MinSubIDs),
			fmt.Sprintf("as root: `usermod --add-subuids 100000-165535 --add-subgids 100000-165535 %s` (pick a range no other user has), then `podman system migrate` as %s", h.User, h.User)})
	}
	return out
}

func (h Host) subIDCount(file string) int {
	b, err := h.ReadFile(file)
	if err != nil {
		return 0
	}
	total := 0
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) != 3 || (f[0] != h.User && f[0] != strconv.Itoa(h.Euid)) {
			continue
		}
		if n, err := strconv.Atoi(f[2]); err == nil {
			total += n
		}
	}
	return total
}

// idmapChecks: rootless Podman writes sub-id maps through newuidmap and
// newgidmap, which need setuid root or file capabilities.
func (h Host) idmapChecks() []Result {
	var out []Result
	for _, name := range []string{"newuidmap", "newgidmap"} {
		p := "/usr/bin/" + name
		st, err := h.Stat(p)
		if err != nil {
			out = append(out, Result{name, Fail, p + " is missing", "as root: `apt-get install uidmap`"})
			continue
		}
		sys, _ := st.Sys().(*syscall.Stat_t)
		setuidRoot := st.Mode()&os.ModeSetuid != 0 && sys != nil && sys.Uid == 0
		if setuidRoot || h.Lgetxattr(p, "security.capability") {
			out = append(out, Result{name, OK, p + " is setuid root or has file capabilities", ""})
			continue
		}
		out = append(out, Result{name, Fail, p + " is neither setuid root nor has file capabilities: sub-id maps cannot be written",
			"as root: `chmod u+s " + p + "` (or `apt-get install --reinstall uidmap`)"})
	}
	return out
}

// cgroupCheck: rootless limits need cgroups v2 with the controllers
// delegated to the user's systemd instance.
func (h Host) cgroupCheck(info runtime.Info, cfg config.Config) Result {
	const enable = "boot with systemd.unified_cgroup_hierarchy=1 (cgroups v2), then as root `systemctl edit user@.service` with `[Service]` `Delegate=cpu cpuset io memory pids` and log in again"
	if !info.Rootless {
		return Result{"cgroup delegation", OK, "the Podman service is rootful: it enforces limits itself", ""}
	}
	if !info.CgroupsV2 {
		st := Fail
		detail := "cgroups v1: rootless Podman cannot enforce memory, CPU or pids limits; runs are refused (guarantees memory, cpu, pids are missing)"
		fix := enable + `; or set security.waive = ["memory", "cpu", "pids"] to run without limits (every result then says so)`
		if policy.LimitsWaived(cfg) {
			st, detail, fix = Warn, "cgroups v1: resource limits are NOT enforced (memory, cpu, pids waived); every result says so", enable
		}
		return Result{"cgroup delegation", st, detail, fix}
	}
	p := fmt.Sprintf("/sys/fs/cgroup/user.slice/user-%d.slice/user@%d.service/cgroup.controllers", h.Euid, h.Euid)
	b, err := h.ReadFile(p)
	have := strings.Fields(string(b))
	var missing []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		if !contains(have, c) {
			missing = append(missing, c)
		}
	}
	if err == nil && len(missing) == 0 {
		return Result{"cgroup delegation", OK, "cgroups v2 with memory, pids and cpu delegated to you", ""}
	}
	st := Fail
	if policy.LimitsWaived(cfg) {
		st = Warn
	}
	return Result{"cgroup delegation", st, fmt.Sprintf("cgroups v2 but %s not delegated to your user (%s)", strings.Join(missing, ", "), p),
		"as root: `systemctl edit user@.service` with `[Service]` `Delegate=cpu cpuset io memory pids`, then log in again"}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (h Host) runtimeCheck(info runtime.Info) Result {
	if !info.CgroupsV2 && info.OCIRuntime == "crun" {
		return Result{"user runtime", Fail, "crun cannot run on a cgroups v1 (hybrid) host",
			"run `make setup-user` (writes [engine] runtime = \"runc\" to ~/.config/containers/containers.conf) and restart your Podman service"}
	}
	return Result{"user runtime", OK, info.OCIRuntime, ""}
}

// storageCheck warns about vfs: with a private user namespace each new
// container would copy the whole image.
func (h Host) storageCheck() Result {
	data := h.Getenv("XDG_DATA_HOME")
	if data == "" {
		data = filepath.Join(h.Getenv("HOME"), ".local", "share")
	}
	root := filepath.Join(data, "containers", "storage")
	if _, err := h.Stat(filepath.Join(root, "vfs")); err == nil {
		if _, err := h.Stat(filepath.Join(root, "overlay")); err != nil {
			return Result{"user storage", Warn, root + " uses the vfs driver: starting a sandbox copies the whole image",
				"put `[storage]` `driver = \"overlay\"` in ~/.config/containers/storage.conf (make setup-user does on fresh storage), `podman system reset`, then `make setup-user` again"}
		}
	}
	return Result{"user storage", OK, root, ""}
}

// rlimitCheck: containers get execution.nofile and max_pids as rlimits; a
// rootless service cannot raise them above the user's own hard limits.
func (h Host) rlimitCheck(cfg config.Config) Result {
	nofile, err1 := h.HardLimit(syscall.RLIMIT_NOFILE)
	nproc, err2 := h.HardLimit(6) // RLIMIT_NPROC
	if err1 != nil || err2 != nil {
		return Result{"user limits", Warn, "cannot read your hard limits", ""}
	}
	if nofile < uint64(cfg.Execution.NoFile) || nproc < uint64(cfg.Execution.MaxPids) {
		return Result{"user limits", Fail, fmt.Sprintf("your hard limits (nofile %d, nproc %d) are below execution.nofile %d / execution.max_pids %d: containers fail with `error setting rlimit`", nofile, nproc, cfg.Execution.NoFile, cfg.Execution.MaxPids),
			"lower execution.nofile / execution.max_pids, or as root raise them in /etc/security/limits.d/ for your user"}
	}
	return Result{"user limits", OK, fmt.Sprintf("hard nofile %d, nproc %d", nofile, nproc), ""}
}

// quotaCheck says plainly why a rootless server has no kernel quota.
func (h Host) quotaCheck(cfg config.Config) Result {
	if by, ok := policy.Waivers(cfg)[runtime.WorkspaceQuota]; ok {
		return Result{"rootless quota", Warn, "workspace quota NOT enforced by the kernel (waived by " + by + "): only a periodic walk bounds workspaces", ""}
	}
	return Result{"rootless quota", Fail, "a non-root user cannot loop-mount a filesystem per workspace, so the workspace quota cannot be enforced and sessions and runs are refused",
		`set security.waive = ["workspace-quota"] (workspaces are then bounded only by a periodic walk of visible files), or run as root`}
}
