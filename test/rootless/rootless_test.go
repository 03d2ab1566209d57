// Package rootless runs MCP-Forge as an unprivileged user with that user's
// own rootless Podman, end to end: a fresh account, `make setup-user`'s
// script, root's images copied into the user's storage, and the server
// (`su - user -c 'mcp-forge serve'`) driven by a real MCP client.
package rootless

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// user is a throwaway account.
type user struct {
	name     string
	uid, gid int
	home     string
	runtime  string // its XDG_RUNTIME_DIR
	subStart int    // first sub-uid
}

// images are what the sandbox runs; root's are copied into the user's storage.
var images = []string{"mcp-forge/python:3.11", "mcp-forge/r:4.2"}

type result struct {
	Success    bool     `json:"success"`
	Stdout     string   `json:"stdout"`
	Stderr     string   `json:"stderr"`
	Result     any      `json:"result"`
	ResultRepr string   `json:"result_repr"`
	Notices    []string `json:"notices"`
	Isolation  string   `json:"isolation"`
}

// limitsNotice is how a waived run's notice begins; it names memory, cpu
// and pids among what the run went without.
const limitsNotice = "guarantees not enforced for this run: memory ("

func TestRootless(t *testing.T) {
	testenv.Require(t)
	if os.Geteuid() != 0 {
		t.Skip("creates an unprivileged user: needs root (CI runs as root)")
	}
	bin := testenv.Binary(t)
	u := newUser(t)
	install(t, u, filepath.Dir(bin))

	start := time.Now()
	archive := imagesArchive(t)
	t.Logf("timing: images archive (podman save as root, reused when unchanged) %v", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	out := u.run(t, 15*time.Minute, "IMAGES_ARCHIVE="+archive+" forge/scripts/setup-user.sh")
	t.Logf("timing: setup-user (socket, containers.conf, podman load, id-map warm-up) %v", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(out, "done: rootless Podman") {
		t.Fatalf("setup-user:\n%s", out)
	}
	// Idempotent, and fast the second time.
	start = time.Now()
	u.run(t, 5*time.Minute, "forge/scripts/setup-user.sh")
	t.Logf("timing: setup-user again %v", time.Since(start).Round(time.Millisecond))

	// What rootless Podman on cgroups v1 lacks, waived: the limits through
	// their old key (an alias), the rest by name. oom-detection: the
	// kernel log is closed to the user (kernel.dmesg_restrict).
	const unconfined = "[security]\nenforce_resource_limits = false\nwaive = [\"workspace-quota\", \"oom-detection\"]\n"
	cfg := u.writeConfig(t, "forge.toml", unconfined)

	t.Run("config defaults are XDG", func(t *testing.T) {
		out := u.run(t, time.Minute, "forge/bin/mcp-forge config print")
		for _, want := range []string{
			`base_path = "` + u.home + `/.local/share/mcp-forge"`,
			`audit_log = "` + u.home + `/.local/state/mcp-forge/audit.log"`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("config print lacks %s:\n%s", want, out)
			}
		}
	})

	t.Run("doctor", func(t *testing.T) {
		out, err := u.try(2*time.Minute, "forge/bin/mcp-forge --config "+cfg+" doctor")
		if err != nil {
			t.Fatalf("doctor failed with limits and quota knowingly off: %v\n%s", err, out)
		}
		for _, want := range []string{"cgroups v1: resource limits are NOT enforced", "workspace quota NOT enforced", "user socket", "sub-ids", "newuidmap", "rootless userns"} {
			if !strings.Contains(out, want) {
				t.Errorf("doctor does not say %q:\n%s", want, out)
			}
		}
		strict, err := u.try(2*time.Minute, "forge/bin/mcp-forge doctor")
		for _, want := range []string{`security.waive = ["memory", "cpu", "pids"]`, `security.waive = ["workspace-quota"]`, "FAIL  guarantee memory", "FAIL  guarantee workspace-quota"} {
			if err == nil || !strings.Contains(strict, want) {
				t.Errorf("doctor with the defaults must fail and say %s (%v):\n%s", want, err, strict)
			}
		}
	})

	t.Run("runs", func(t *testing.T) {
		cs := u.serve(t, cfg)
		call := func(tool, code, sid string) (result, *mcp.CallToolResult) {
			args := map[string]any{"code": code}
			if sid != "" {
				args["session_id"] = sid
			}
			var r result
			started := time.Now()
			res := testenv.Call(t, cs, tool, args, &r)
			t.Logf("timing: %s session=%q %v", tool, sid, time.Since(started).Round(time.Millisecond))
			if res.IsError || !r.Success {
				t.Fatalf("%s %q: %s", tool, code, testenv.Text(res))
			}
			if !hasNotice(r.Notices) || !strings.Contains(testenv.Text(res), limitsNotice) {
				t.Errorf("%s %q: the result does not say that limits are not enforced: notices %q", tool, code, r.Notices)
			}
			return r, res
		}

		r, _ := call("execute_python", "import os\nprint(os.getuid(), open('/proc/self/uid_map').read().split())", "")
		if !strings.HasPrefix(r.Stdout, "1000 ['0', '1', '65536']") {
			t.Errorf("stateless Python: uid and map %q, want uid 1000 mapped from the user's sub-ids (0 1 65536)", r.Stdout)
		}
		r, _ = call("execute_python", "import numpy\nnumpy.arange(4).sum()", "")
		if r.Result != "6" {
			t.Errorf("stateless Python result %#v", r.Result)
		}

		call("execute_python", "x = 41\nopen('probe.txt', 'w').write('x')", "py")
		if r, _ := call("execute_python", "x + 1", "py"); r.Result != "42" {
			t.Errorf("Python session: x + 1 = %#v", r.Result)
		}
		// While the kernel runs: on the host, the sandbox is a sub-id of the
		// user's, neither root nor the user.
		sandboxUID := u.subStart + 1000
		kernels := processes("ipykernel")
		var mine []int
		for _, p := range kernels {
			if p.uid == u.uid || p.uid == 0 {
				t.Errorf("a kernel runs as host uid %d (pid %d): %s", p.uid, p.pid, p.cmd)
			}
			if p.uid == sandboxUID {
				mine = append(mine, p.pid)
			}
		}
		if len(mine) == 0 {
			t.Errorf("no ipykernel process runs as host uid %d (the user's sub-uid for sandbox uid 1000); kernels: %+v", sandboxUID, kernels)
		}
		probes, _ := filepath.Glob(filepath.Join(u.home, ".local/share/mcp-forge/sessions/py-*.*/*/probe.txt"))
		if len(probes) != 1 {
			t.Errorf("probe.txt written by the session: found %v", probes)
		} else if st, err := os.Stat(probes[0]); err != nil || int(st.Sys().(*syscall.Stat_t).Uid) != sandboxUID {
			t.Errorf("probe.txt on the host: %v, owner %v, want uid %d", err, st.Sys(), sandboxUID)
		}

		if r, _ := call("execute_r", "cat(1 + 1)", ""); strings.TrimSpace(r.Stdout) != "2" {
			t.Errorf("stateless R stdout %q", r.Stdout)
		}
		call("execute_r", "y <- 20", "r")
		if r, _ := call("execute_r", "y * 2 + 2", "r"); r.ResultRepr != "[1] 42" {
			t.Errorf("R session: %+v", r)
		}
		for _, sid := range []string{"py", "r"} {
			if res := testenv.Call(t, cs, "destroy_session", map[string]any{"session_id": sid}, nil); res.IsError {
				t.Errorf("destroy_session %s: %s", sid, testenv.Text(res))
			}
		}
	})

	// gVisor under the user's rootless Podman: runsc runs there with
	// --ignore-cgroups, which on cgroups v1 gives up nothing the service
	// enforces (the limits are waived above), so kernel isolation holds.
	t.Run("gvisor", func(t *testing.T) {
		if out, err := exec.Command(config.DefaultRunsc, "--version").CombinedOutput(); err != nil {
			t.Skipf("runsc is not installed at %s (make setup installs it): %v %s", config.DefaultRunsc, err, out)
		}
		gcfg := u.writeConfig(t, "gvisor.toml", strings.Replace(unconfined, "[security]\n", "[security]\nisolation = \"gvisor\"\n", 1))
		out, err := u.try(2*time.Minute, "forge/bin/mcp-forge --config "+gcfg+" doctor")
		if err != nil || !strings.Contains(out, "guarantee kernel-isolation enforced") {
			t.Fatalf("doctor with gVisor under rootless Podman (limits waived): %v\n%s", err, out)
		}
		cs := u.serve(t, gcfg)
		call := func(code, sid string) result {
			t.Helper()
			args := map[string]any{"code": code}
			if sid != "" {
				args["session_id"] = sid
			}
			var r result
			started := time.Now()
			res := testenv.Call(t, cs, "execute_python", args, &r)
			t.Logf("timing: gVisor execute_python session=%q %v", sid, time.Since(started).Round(time.Millisecond))
			if res.IsError || !r.Success {
				t.Fatalf("execute_python %q under gVisor: %s", code, testenv.Text(res))
			}
			if r.Isolation != "gvisor" || !hasNotice(r.Notices) {
				t.Errorf("execute_python %q: isolation %q, notices %q; want gvisor, and the limits named as not enforced", code, r.Isolation, r.Notices)
			}
			return r
		}
		const probe = "import os\nprint(open('/proc/version').read().split()[2], os.getuid())"
		if r := call(probe, ""); !strings.HasPrefix(r.Stdout, "4.19.0-gvisor 1000") {
			t.Errorf("stateless run under gVisor: %q, want gVisor's kernel and uid 1000", r.Stdout)
		}
		call("x = 41", "gv")
		if r := call(probe+"\nx + 1", "gv"); !strings.HasPrefix(r.Stdout, "4.19.0-gvisor 1000") || r.Result != "42" {
			t.Errorf("gVisor session: %q, result %#v", r.Stdout, r.Result)
		}
		// The Sentry is a host process: a sub-id of the user's, neither
		// root nor the user.
		var sentries int
		for _, p := range processes("runsc-sandbox") {
			if p.uid == u.uid || p.uid == 0 {
				t.Errorf("a Sentry runs as host uid %d (pid %d)", p.uid, p.pid)
			} else if p.uid >= u.subStart && p.uid < u.subStart+65536 {
				sentries++
			}
		}
		if sentries == 0 {
			t.Errorf("no runsc-sandbox process runs as one of the user's sub-ids (from %d)", u.subStart)
		}
		// A rootless server cannot copy the files the sandbox made private
		// in its workspace (ipykernel's kernel.json is 0600, a sub-id's),
		// so its gVisor sessions are checkpointed as variables, saying why.
		var ck struct {
			Kind     string `json:"kind"`
			NotWhole string `json:"not_whole"`
		}
		started := time.Now()
		if res := testenv.Call(t, cs, "checkpoint_session", map[string]any{"session_id": "gv"}, &ck); res.IsError || ck.Kind != "variables" || !strings.Contains(ck.NotWhole, "not root") {
			t.Errorf("checkpoint_session of a rootless gVisor session: kind %q, not_whole %q; want variables, saying why: %s", ck.Kind, ck.NotWhole, testenv.Text(res))
		}
		t.Logf("timing: checkpoint_session %v", time.Since(started).Round(time.Millisecond))
		if res := testenv.Call(t, cs, "destroy_session", map[string]any{"session_id": "gv"}, nil); res.IsError {
			t.Errorf("destroy_session gv: %s", testenv.Text(res))
		}
	})

	t.Run("fail closed", func(t *testing.T) {
		for _, c := range []struct{ name, config, want string }{
			{"limits", "[security]\nwaive = [\"workspace-quota\", \"oom-detection\"]\n", `security.waive = ["memory", "cpu", "pids"]`},
			{"quota", "[security]\nwaive = [\"memory\", \"cpu\", \"pids\", \"oom-detection\"]\n", `security.waive = ["workspace-quota"]`},
		} {
			t.Run(c.name, func(t *testing.T) {
				cs := u.serve(t, u.writeConfig(t, "strict-"+c.name+".toml", c.config))
				for _, sid := range []string{"", "s"} {
					args := map[string]any{"code": "print('ran')"}
					if sid != "" {
						args["session_id"] = sid
					}
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_python", Arguments: args})
					cancel()
					text := fmt.Sprint(err)
					if res != nil {
						text = testenv.Text(res)
					}
					if (err == nil && !res.IsError) || strings.Contains(text, "\nran") || !strings.Contains(text, c.want) {
						t.Errorf("session=%q: want a refusal naming %s, got err=%v: %s", sid, c.want, err, text)
					}
				}
			})
		}
		audit, _ := os.ReadFile(filepath.Join(u.home, ".local/state/mcp-forge/audit.log"))
		for _, g := range []string{"memory", "workspace-quota"} {
			if !strings.Contains(string(audit), `"guarantee":"`+g+`"`) {
				t.Errorf("the refusal for %s is not audited with its guarantee", g)
			}
		}
		if !strings.Contains(string(audit), `"rule":"guarantee-missing"`) {
			t.Errorf("the refusals are not audited with their rule")
		}
	})

	t.Run("session files", func(t *testing.T) { sessionFiles(t, u, unconfined) })

	t.Run("user's files", func(t *testing.T) {
		// Every server has exited (subtests' cleanups ran): no workspace may
		// remain, and nothing in the user's directories belongs to root.
		left, _ := os.ReadDir(filepath.Join(u.home, ".local/share/mcp-forge/sessions"))
		if len(left) > 0 {
			var names []string
			for _, e := range left {
				names = append(names, e.Name())
			}
			t.Errorf("workspaces left behind: %v", names)
		}
		if st, err := os.Stat(filepath.Join(u.home, ".local/share/mcp-forge")); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("base path must be 0700 (rootless sandboxes write with umask 0): %v %v", err, st)
		}
		for _, dir := range []string{u.home, u.runtime} {
			n := 0
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				n++
				if info, err := d.Info(); err == nil && info.Sys().(*syscall.Stat_t).Uid == 0 {
					t.Errorf("owned by root in the user's directories: %s", p)
				}
				return nil
			})
			t.Logf("walked %d files under %s", n, dir)
		}
	})
}

func hasNotice(ns []string) bool {
	for _, n := range ns {
		if strings.Contains(n, limitsNotice) {
			return true
		}
	}
	return false
}

// newUser creates an account as `useradd` would for a desktop user, and a
// runtime directory as logind would. Cleanup removes both and every process
// of the account (and of its sub-ids), by pid.
func newUser(t *testing.T) *user {
	t.Helper()
	name := fmt.Sprintf("forgerl%d", os.Getpid()%100000)
	if out, err := exec.Command("useradd", "-m", "-U", "-s", "/bin/bash", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	u := &user{name: name, home: "/home/" + name}
	t.Cleanup(func() { u.remove(t) })
	for _, f := range []struct {
		flag string
		dst  *int
	}{{"-u", &u.uid}, {"-g", &u.gid}} {
		out, err := exec.Command("id", f.flag, name).Output()
		if err != nil {
			t.Fatal(err)
		}
		*f.dst, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	}
	u.subStart = subStart(t, name)
	if u.subStart < 0 {
		// An older useradd: add a range as an administrator would.
		s := freeSubRange(t)
		rng := fmt.Sprintf("%d-%d", s, s+65535)
		if out, err := exec.Command("usermod", "--add-subuids", rng, "--add-subgids", rng, name).CombinedOutput(); err != nil {
			t.Fatalf("usermod: %v: %s", err, out)
		}
		u.subStart = s
	}
	u.runtime = fmt.Sprintf("/run/user/%d", u.uid)
	if err := os.MkdirAll(u.runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(u.runtime, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	return u
}

func subStart(t *testing.T, name string) int {
	b, err := os.ReadFile("/etc/subuid")
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) == 3 && f[0] == name {
			n, _ := strconv.Atoi(f[1])
			c, _ := strconv.Atoi(f[2])
			if c >= 65536 {
				return n
			}
		}
	}
	return -1
}

func freeSubRange(t *testing.T) int {
	top := 100000
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			p := strings.Split(l, ":")
			if len(p) != 3 {
				continue
			}
			s, _ := strconv.Atoi(p[1])
			c, _ := strconv.Atoi(p[2])
			if s+c > top && s+c < 1<<30 {
				top = s + c
			}
		}
	}
	return top
}

func (u *user) remove(t *testing.T) {
	start := time.Now()
	defer func() {
		t.Logf("timing: removing the user and its storage %v", time.Since(start).Round(time.Millisecond))
	}()
	// The user's own containers first (its storage is its own), then every
	// process of the account and of its sub-ids, by pid.
	u.try(2*time.Minute, "podman rm -af -t 0 >/dev/null 2>&1; true")
	t.Logf("timing: clean-up: podman rm as the user done at %v", time.Since(start).Round(time.Millisecond))
	for round := 0; round < 50; round++ {
		var left []proc
		for _, p := range processes("") {
			if p.uid == u.uid || (p.uid >= u.subStart && p.uid < u.subStart+65536) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			break
		}
		sig := syscall.SIGTERM
		if round > 10 {
			sig = syscall.SIGKILL
		}
		for _, p := range left {
			syscall.Kill(p.pid, sig)
		}
		time.Sleep(100 * time.Millisecond) // bounded by the 50 rounds; polling a process table has nothing to wait on
	}
	t.Logf("timing: clean-up: processes ended at %v", time.Since(start).Round(time.Millisecond))
	if out, err := exec.Command("userdel", "-r", "-f", u.name).CombinedOutput(); err != nil {
		t.Errorf("userdel: %v: %s", err, out)
	}
	os.RemoveAll(u.runtime)
	os.RemoveAll(u.home)
}

// shell runs cmd as the user, in a login shell with its runtime directory.
func (u *user) shell(ctx context.Context, cmd string) *exec.Cmd {
	return exec.CommandContext(ctx, "su", "-", u.name, "-c", "export XDG_RUNTIME_DIR="+u.runtime+"; "+cmd)
}

func (u *user) try(timeout time.Duration, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := u.shell(ctx, cmd).CombinedOutput()
	return string(out), err
}

func (u *user) run(t *testing.T, timeout time.Duration, cmd string) string {
	t.Helper()
	out, err := u.try(timeout, cmd)
	if err != nil {
		t.Fatalf("as %s: %s: %v\n%s", u.name, cmd, err, out)
	}
	return out
}

// writeConfig writes a file the user owns in its home.
func (u *user) writeConfig(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(u.home, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	return p
}

// serve starts `mcp-forge serve` as the user and connects a go-sdk client
// over its stdio.
func (u *user) serve(t *testing.T, cfg string) *mcp.ClientSession {
	t.Helper()
	logName := strings.TrimSuffix(cfg, ".toml") + ".log"
	cmd := u.shell(context.Background(), "exec forge/bin/mcp-forge --config "+cfg+" serve 2>>"+logName)
	client := mcp.NewClient(&mcp.Implementation{Name: "forge-rootless", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 60 * time.Second}, nil)
	if err != nil {
		log, _ := os.ReadFile(logName)
		t.Fatalf("connect to mcp-forge serve as %s: %v\n%s", u.name, err, log)
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logName)
			t.Logf("server log:\n%s", log)
		}
	})
	return cs
}

// install copies the built binaries and the set-up script into the user's
// home, as the user would have them in a checkout.
func install(t *testing.T, u *user, binDir string) {
	t.Helper()
	repo := testenv.RepoRoot()
	for _, dir := range []string{"forge/bin", "forge/scripts"} {
		if err := os.MkdirAll(filepath.Join(u.home, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(binDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "mcp-forge") {
			copyFile(filepath.Join(binDir, e.Name()), filepath.Join(u.home, "forge/bin", e.Name()))
		}
	}
	copyFile(filepath.Join(repo, "scripts/setup-user.sh"), filepath.Join(u.home, "forge/scripts/setup-user.sh"))
	if out, err := exec.Command("chown", "-R", u.name+":"+u.name, filepath.Join(u.home, "forge")).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v: %s", err, out)
	}
}

// imagesArchive is `make images-archive`: root's images saved once for
// `podman load` by the user, reused while the image ids are unchanged.
func imagesArchive(t *testing.T) string {
	t.Helper()
	const archive = "/var/tmp/mcp-forge-rootless-images.tar"
	var ids []string
	for _, img := range images {
		out, err := exec.Command("podman", "image", "inspect", "--format", "{{.Id}}", img).Output()
		if err != nil {
			t.Fatalf("%s is not in root's storage (make images): %v", img, err)
		}
		ids = append(ids, strings.TrimSpace(string(out)))
	}
	stamp := strings.Join(ids, "\n")
	if b, err := os.ReadFile(archive + ".ids"); err == nil && string(b) == stamp {
		if _, err := os.Stat(archive); err == nil {
			return archive
		}
	}
	cmd := exec.Command("make", "-s", "images-archive", "IMAGES_ARCHIVE="+archive)
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make images-archive: %v\n%s", err, out)
	}
	if err := os.WriteFile(archive+".ids", []byte(stamp), 0o644); err != nil {
		t.Fatal(err)
	}
	return archive
}

type proc struct {
	pid, uid int
	cmd      string
}

// processes lists host processes whose command line contains match.
func processes(match string) []proc {
	var out []proc
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), match) {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		uid := -1
		for _, l := range strings.Split(string(status), "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "Uid:" {
				uid, _ = strconv.Atoi(f[2]) // effective
			}
		}
		out = append(out, proc{pid: pid, uid: uid, cmd: strings.ReplaceAll(string(cmd), "\x00", " ")})
	}
	return out
}
