package doctor

import (
	"context"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/runtimetest"
)

func fakeRT(info runtime.Info) *runtimetest.Runtime {
	rt := runtimetest.New()
	rt.SetInfo(info)
	return rt
}

type fakeFile struct {
	mode os.FileMode
}

func (f fakeFile) Name() string       { return "f" }
func (f fakeFile) Size() int64        { return 0 }
func (f fakeFile) Mode() os.FileMode  { return f.mode }
func (f fakeFile) ModTime() time.Time { return time.Time{} }
func (f fakeFile) IsDir() bool        { return false }
func (f fakeFile) Sys() any           { return nil }

// A healthy rootless desktop host, with one thing broken per case: each
// broken thing must fail (or warn) with a fix, and nothing else may.
func TestRootlessChecks(t *testing.T) {
	good := func() (Host, map[string][]byte, map[string]os.FileMode) {
		files := map[string][]byte{
			"/etc/subuid": []byte("other:1:5\nu:100000:65536\n"),
			"/etc/subgid": []byte("u:100000:65536\n"),
			"/sys/fs/cgroup/user.slice/user-1001.slice/user@1001.service/cgroup.controllers": []byte("cpuset cpu io memory pids\n"),
		}
		stats := map[string]os.FileMode{
			"/run/user/1001/podman/podman.sock": os.ModeSocket,
			"/usr/bin/newuidmap":                0o755, // with file capabilities
			"/usr/bin/newgidmap":                0o755,
		}
		h := Host{Euid: 1001, User: "u",
			Getenv: func(k string) string {
				return map[string]string{"XDG_RUNTIME_DIR": "/run/user/1001", "HOME": "/home/u"}[k]
			},
			ReadFile: func(p string) ([]byte, error) {
				if b, ok := files[p]; ok {
					return b, nil
				}
				return nil, fs.ErrNotExist
			},
			Stat: func(p string) (os.FileInfo, error) {
				if m, ok := stats[p]; ok {
					return fakeFile{m}, nil
				}
				return nil, fs.ErrNotExist
			},
			Lgetxattr: func(p, a string) bool { return a == "security.capability" },
			HardLimit: func(int) (uint64, error) { return 1 << 20, nil },
		}
		return h, files, stats
	}
	v2 := runtime.Info{Rootless: true, CgroupsV2: true, OCIRuntime: "crun"}
	cfg := config.DefaultFor(1001, nil)
	cfg.Volumes.EnforceQuota = false
	cases := []struct {
		name   string
		info   runtime.Info
		cfg    func(*config.Config)
		breaks func(*Host, map[string][]byte, map[string]os.FileMode)
		check  string // the one failing check ("" none)
		fix    string
	}{
		{"healthy v2", v2, nil, nil, "", ""},
		{"no socket", v2, nil, func(_ *Host, _ map[string][]byte, s map[string]os.FileMode) {
			delete(s, "/run/user/1001/podman/podman.sock")
		}, "user socket", "make setup-user"},
		{"no XDG_RUNTIME_DIR", v2, nil, func(h *Host, _ map[string][]byte, _ map[string]os.FileMode) {
			h.Getenv = func(string) string { return "" }
		}, "user socket", "XDG_RUNTIME_DIR"},
		{"no subuids", v2, nil, func(_ *Host, f map[string][]byte, _ map[string]os.FileMode) {
			f["/etc/subuid"] = []byte("other:1:65536\n")
		}, "sub-ids", "usermod --add-subuids"},
		{"small subgid range", v2, nil, func(_ *Host, f map[string][]byte, _ map[string]os.FileMode) {
			f["/etc/subgid"] = []byte("u:100000:1000\n")
		}, "sub-ids", "usermod"},
		{"newuidmap not privileged", v2, nil, func(h *Host, _ map[string][]byte, _ map[string]os.FileMode) {
			h.Lgetxattr = func(string, string) bool { return false }
		}, "newuidmap", "chmod u+s"},
		{"controllers not delegated", v2, nil, func(_ *Host, f map[string][]byte, _ map[string]os.FileMode) {
			f["/sys/fs/cgroup/user.slice/user-1001.slice/user@1001.service/cgroup.controllers"] = []byte("cpuset io\n")
		}, "cgroup delegation", "Delegate="},
		{"v1 enforcing", runtime.Info{Rootless: true, OCIRuntime: "runc"}, nil, nil, "cgroup delegation", `security.waive = ["memory", "cpu", "pids"]`},
		{"v1 crun, limits waived by name", runtime.Info{Rootless: true, OCIRuntime: "crun"}, func(c *config.Config) { c.Security.Waive = []string{"memory", "cpu", "pids"} }, nil, "user runtime", "runc"},
		{"v1 crun", runtime.Info{Rootless: true, OCIRuntime: "crun"}, func(c *config.Config) { c.Security.EnforceResourceLimits = false }, nil, "user runtime", "runc"},
		{"low hard nofile", v2, nil, func(h *Host, _ map[string][]byte, _ map[string]os.FileMode) {
			h.HardLimit = func(int) (uint64, error) { return 100, nil }
		}, "user limits", "execution.nofile"},
		{"quota enforced rootless", v2, func(c *config.Config) { c.Volumes.EnforceQuota = true }, nil, "rootless quota", `security.waive = ["workspace-quota"]`},
		{"vfs storage", v2, nil, func(_ *Host, _ map[string][]byte, s map[string]os.FileMode) {
			s["/home/u/.local/share/containers/storage/vfs"] = os.ModeDir
		}, "user storage", "overlay"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, files, stats := good()
			if c.breaks != nil {
				c.breaks(&h, files, stats)
			}
			cf := cfg
			if c.cfg != nil {
				c.cfg(&cf)
			}
			var bad []Result
			for _, r := range Rootless(fakeRT(c.info), cf, h)(context.Background()) {
				if r.Status == Fail || (r.Status == Warn && r.Name != "rootless quota") {
					bad = append(bad, r)
				}
			}
			if c.check == "" {
				if len(bad) > 0 {
					t.Fatalf("healthy host reported %+v", bad)
				}
				return
			}
			for _, r := range bad {
				if r.Name == c.check && strings.Contains(r.Fix, c.fix) {
					return
				}
			}
			t.Fatalf("want %s failing with a fix containing %q, got %+v", c.check, c.fix, bad)
		})
	}
	if r := Rootless(fakeRT(runtime.Info{}), cfg, Host{Euid: 0})(context.Background()); r != nil {
		t.Fatalf("root gets rootless lines: %+v", r)
	}
}
