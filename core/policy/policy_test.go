package policy

import (
	"errors"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testSettings(base string) Settings {
	return Settings{
		AllowedImages:   []string{"mcp-forge/python:*", "mcp-forge/custom:*"},
		User:            "1000:1000",
		UserNS:          "private",
		UserNSStart:     2147483647,
		BasePath:        base,
		ToolGrantTarget: "/forge/tools",
		NetworkTarget:   "/forge/net",
		TmpfsMax:        64 << 20,
		Seccomp:         base + "/mcp-forge-seccomp-test.json",
		SeccompGVisor:   base + "/mcp-forge-seccomp-gvisor-test.json",
		Defaults:        runtime.Limits{MemoryBytes: 512 << 20, CPUQuota: 50000, Pids: 128, NoFile: 1024, Timeout: 300 * time.Second},
		Max:             runtime.Limits{MemoryBytes: 2 << 30, CPUQuota: 100000, Pids: 1024, NoFile: 1024, Timeout: 1800 * time.Second},
	}
}

func goodSpec(t *testing.T, p *Policy) runtime.Spec {
	t.Helper()
	s, err := p.Harden(Intent{Image: "mcp-forge/python:3.11", Command: []string{"python3"},
		Limits: p.Settings().Defaults, SessionID: "s1", Plugin: "python", Instance: "i"})
	if err != nil {
		t.Fatalf("hardened intent refused: %v", err)
	}
	return s
}

// Under security.isolation = "gvisor" every spec runs under gVisor with the
// gVisor variant of the profile; a container spec is refused unless the
// operator waived kernel-isolation, and then Downgrade is what runs.
func TestIsolationRules(t *testing.T) {
	base := "/var/lib/mcp-forge"
	set := testSettings(base)
	set.Isolation = runtime.IsolationGVisor
	p := New(set, nil)
	s := goodSpec(t, p)
	if s.Isolation != runtime.IsolationGVisor || s.SeccompProfile != set.SeccompGVisor {
		t.Fatalf("hardened under gvisor: isolation %q, profile %q", s.Isolation, s.SeccompProfile)
	}
	for name, mutate := range map[string]func(*runtime.Spec){
		"container":              func(s *runtime.Spec) { s.Isolation = runtime.IsolationContainer },
		"container's profile":    func(s *runtime.Spec) { s.SeccompProfile = set.Seccomp },
		"downgraded, not waived": func(s *runtime.Spec) { *s = p.Downgrade(*s) },
	} {
		c := s
		mutate(&c)
		var v *Violation
		if err := p.CheckCreate(c); !errors.As(err, &v) || (v.Rule != RuleIsolation && v.Rule != "seccomp") {
			t.Errorf("%s: want a refusal (rule isolation or seccomp), got %v", name, err)
		}
	}
	set.Waived = map[runtime.Guarantee]string{runtime.KernelIsolation: "security.waive[0]"}
	p = New(set, nil)
	if err := p.CheckCreate(p.Downgrade(goodSpec(t, p))); err != nil {
		t.Errorf("kernel-isolation waived: the container downgrade refused: %v", err)
	}
}

func TestCheckCreateRules(t *testing.T) {
	base := "/var/lib/mcp-forge"
	p := New(testSettings(base), nil)
	cases := []struct {
		rule   string
		mutate func(*runtime.Spec)
	}{
		{"", func(*runtime.Spec) {}},
		{"privileged", func(s *runtime.Spec) { s.Privileged = true }},
		{"cap-add", func(s *runtime.Spec) { s.CapAdd = []string{"SYS_ADMIN"} }},
		{"cap-drop", func(s *runtime.Spec) { s.CapDrop = nil }},
		{"devices", func(s *runtime.Spec) { s.Devices = []string{"/dev/kvm"} }},
		{"host-pid", func(s *runtime.Spec) { s.PidNS = "host" }},
		{"host-ipc", func(s *runtime.Spec) { s.IPCNS = "host" }},
		{"host-network", func(s *runtime.Spec) { s.Network = "host" }},
		{"network", func(s *runtime.Spec) { s.Network = "bridge" }},
		{"host-userns", func(s *runtime.Spec) { s.UserNS = "host" }},
		{"userns", func(s *runtime.Spec) { s.UserNS = "" }},
		{"userns", func(s *runtime.Spec) { s.UserNS = "auto" }},
		{"userns", func(s *runtime.Spec) { s.UserNSStart = 1000 }},
		{"image-not-allowed", func(s *runtime.Spec) { s.Image = "docker.io/library/alpine" }},
		{"image-not-allowed", func(s *runtime.Spec) { s.Image = "mcp-forge/r:4.2" }},
		{"", func(s *runtime.Spec) { s.Image = "mcp-forge/custom:anything" }},
		{"", func(s *runtime.Spec) { s.Image = "localhost/mcp-forge/python:3.11" }},
		{"image-not-allowed", func(s *runtime.Spec) { s.Image = "mcp-forge/python:3.11@sha256:" + strings.Repeat("0", 64) }},
		{"image-not-allowed", func(s *runtime.Spec) { s.Image = "mcp-forge/python@sha256:" + strings.Repeat("0", 64) }},
		{"image-not-allowed", func(s *runtime.Spec) { s.Image = "docker.io/mcp-forge/python:3.11" }},
		{"image-not-allowed", func(s *runtime.Spec) { s.Image = "evil.com/mcp-forge/python:3.11" }},
		{"image-not-allowed", func(s *runtime.Spec) { s.Image = "mcp-forge/python:3.11/../../r:4.2" }},
		{"image-not-allowed", func(s *runtime.Spec) { s.Image = "MCP-Forge/python:3.11" }},
		{"image-not-allowed", func(s *runtime.Spec) { s.Image = " mcp-forge/python:3.11" }},
		{"seccomp", func(s *runtime.Spec) { s.SeccompProfile = "" }},
		{"seccomp", func(s *runtime.Spec) { s.SeccompProfile = "unconfined" }},
		{"seccomp", func(s *runtime.Spec) { s.SeccompProfile = "/usr/share/containers/seccomp.json" }},
		{"isolation", func(s *runtime.Spec) { s.Isolation = "" }},
		{"isolation", func(s *runtime.Spec) { s.Isolation = "kata" }},
		{"read-only-root", func(s *runtime.Spec) { s.ReadOnlyRoot = false }},
		{"tmpfs", func(s *runtime.Spec) { s.TmpfsSize = 0 }},
		{"tmpfs", func(s *runtime.Spec) { s.TmpfsSize = 1 << 40 }},
		{"no-new-privileges", func(s *runtime.Spec) { s.NoNewPrivileges = false }},
		{"init", func(s *runtime.Spec) { s.Init = false }},
		{"root-user", func(s *runtime.Spec) { s.User = "0:0" }},
		{"root-user", func(s *runtime.Spec) { s.User = "1000:0" }},
		{"user", func(s *runtime.Spec) { s.User = "root" }},
		{"limits", func(s *runtime.Spec) { s.Limits.MemoryBytes = 0 }},
		{"limits", func(s *runtime.Spec) { s.Limits.MemoryBytes = 3 << 30 }},
		{"limits", func(s *runtime.Spec) { s.Limits.Pids = 0 }},
		{"limits", func(s *runtime.Spec) { s.Limits.CPUQuota = 0 }},
		{"limits", func(s *runtime.Spec) { s.Limits.NoFile = 0 }},
		{"limits", func(s *runtime.Spec) { s.Limits.Timeout = 0 }},
		{"labels", func(s *runtime.Spec) { delete(s.Labels, runtime.LabelManaged) }},
		{"forbidden-mount", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: "/", Target: "/host"}} }},
		{"forbidden-mount", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: "/etc", Target: "/x"}} }},
		{"forbidden-mount", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: "/proc/1", Target: "/x"}} }},
		{"forbidden-mount", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: "/run/podman/podman.sock", Target: "/x"}} }},
		{"forbidden-mount", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: "/var/run/docker.sock", Target: "/x"}} }},
		{"forbidden-mount", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/sessions/s1/../../../../../etc", Target: "/x"}}
		}},
		{"mount-outside-base", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: "/srv/data", Target: "/x"}} }},
		{"mount-outside-base", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/sessions/s1/../../secrets", Target: "/x"}}
		}},
		{"mount-outside-base", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: base, Target: "/x"}} }},
		{"mount-outside-base", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: base + "/sessions", Target: "/x"}} }},
		{"mount-other-session", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: base + "/sessions/s2/work", Target: "/x"}} }},
		{"mount-other-session", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: base + "/uploads/s2", Target: "/x"}} }},
		{"mount-readonly", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/shared/readonly/data", Target: "/x"}}
		}},
		{"mount", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: base + "/sessions/s1", Target: "/proc"}} }},
		{"mount", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: "relative", Target: "/x"}} }},
		{"", func(s *runtime.Spec) {
			s.Workspace = "s1.ab12"
			s.Mounts = []runtime.Mount{{Source: base + "/sessions/s1.ab12/k", Target: "/k"}}
		}},
		{"mount-outside-base", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: "/srv/data", Target: "/x"}} }},
		{"mount-outside-base", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/sessions/s1/../../secrets", Target: "/x"}}
		}},
		{"mount-outside-base", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: base, Target: "/x"}} }},
		{"mount-outside-base", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: base + "/sessions", Target: "/x"}} }},
		{"mount-other-session", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: base + "/sessions/s2/work", Target: "/x"}} }},
		{"mount-other-session", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: base + "/uploads/s2", Target: "/x"}} }},
		{"mount-readonly", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/shared/readonly/data", Target: "/x"}}
		}},
		{"mount", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: base + "/sessions/s1", Target: "/proc"}} }},
		{"mount", func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{Source: "relative", Target: "/x"}} }},
		{"", func(s *runtime.Spec) {
			s.Workspace = "s1.ab12"
			s.Mounts = []runtime.Mount{{Source: base + "/sessions/s1.ab12/k", Target: "/k"}}
		}},
		{"mount-other-session", func(s *runtime.Spec) {
			s.Workspace = "s1.ab12"
			s.Mounts = []runtime.Mount{{Source: base + "/sessions/s1.cd34/k", Target: "/k"}}
		}},
		{"", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/tools/ab12", Target: "/forge/tools", ReadOnly: true}}
		}},
		{"mount-readonly", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/tools/ab12", Target: "/forge/tools"}}
		}},
		{"mount", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/tools/ab12", Target: "/elsewhere", ReadOnly: true}}
		}},
		{"mount-outside-base", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/tools", Target: "/forge/tools", ReadOnly: true}}
		}},
		{"", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/net/ab12", Target: "/forge/net", ReadOnly: true}}
		}},
		{"mount-readonly", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/net/ab12", Target: "/forge/net"}}
		}},
		{"mount", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/net/ab12", Target: "/forge/tools", ReadOnly: true}}
		}},
		{"mount-outside-base", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/net", Target: "/forge/net", ReadOnly: true}}
		}},
		{"mount-outside-base", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/tools/ab12/python", Target: "/forge/tools", ReadOnly: true}}
		}},
		{"", func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Source: base + "/sessions/s1/in", Target: "/in", ReadOnly: true},
				{Source: base + "/sessions/s1", Target: "/work"}, {Source: base + "/uploads/s1/f", Target: "/up"},
				{Source: base + "/shared/readonly/ds", Target: "/data", ReadOnly: true}}
		}},
	}
	for _, tc := range cases {
		name := tc.rule
		if name == "" {
			name = "allowed"
		}
		t.Run(name, func(t *testing.T) {
			s := goodSpec(t, p)
			tc.mutate(&s)
			err := p.CheckCreate(s)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("unexpected refusal: %v", err)
				}
				return
			}
			var v *Violation
			if !errors.As(err, &v) {
				t.Fatalf("want violation %q, got %v", tc.rule, err)
			}
			if v.Rule != tc.rule {
				t.Fatalf("want rule %q, got %q (%v)", tc.rule, v.Rule, err)
			}
		})
	}
}

func TestNetworkAllowedWhenConfigured(t *testing.T) {
	st := testSettings("/b")
	st.AllowNetwork = true
	p := New(st, nil)
	s := goodSpec(t, p)
	s.Network = "bridge"
	if err := p.CheckCreate(s); err != nil {
		t.Fatal(err)
	}
	s.Network = "host"
	if err := p.CheckCreate(s); err == nil {
		t.Fatal("host network must stay forbidden")
	}
}

// A symlink inside the session directory that points outside is refused
// after resolution, even though its lexical path looks allowed.
func TestSymlinkEscape(t *testing.T) {
	base := t.TempDir()
	sess := filepath.Join(base, "sessions", "s1")
	os.MkdirAll(sess, 0o755)
	os.MkdirAll(filepath.Join(base, "sessions", "s2"), 0o755)
	os.Symlink("/etc", filepath.Join(sess, "etc-link"))
	os.Symlink(filepath.Join(base, "sessions", "s2"), filepath.Join(sess, "other"))
	outside := t.TempDir()
	os.Symlink(outside, filepath.Join(sess, "out"))
	p := New(testSettings(base), filepath.EvalSymlinks)
	for link, rule := range map[string]string{"etc-link": "forbidden-mount", "other": "mount-other-session", "out": "mount-outside-base"} {
		err := p.CheckMount(runtime.Mount{Source: filepath.Join(sess, link), Target: "/x"}, "s1")
		var v *Violation
		if !errors.As(err, &v) || v.Rule != rule {
			t.Errorf("%s: want %s, got %v", link, rule, err)
		}
	}
	if err := p.CheckMount(runtime.Mount{Source: sess, Target: "/x"}, "s1"); err != nil {
		t.Errorf("own session dir refused: %v", err)
	}
}

func TestResolveLimits(t *testing.T) {
	p := New(testSettings("/b"), nil)
	cases := []struct {
		req     LimitRequest
		wantErr string
		check   func(runtime.Limits) bool
	}{
		{LimitRequest{}, "", func(l runtime.Limits) bool { return l.MemoryBytes == 512<<20 && l.Timeout == 300*time.Second }},
		{LimitRequest{Memory: "1G", Timeout: 10, CPUQuota: 100000, Pids: 50}, "", func(l runtime.Limits) bool {
			return l.MemoryBytes == 1<<30 && l.Timeout == 10*time.Second && l.CPUQuota == 100000 && l.Pids == 50
		}},
		{LimitRequest{Memory: "4g"}, "exceeds the maximum 2g", nil},
		{LimitRequest{Memory: "lots"}, `size "lots"`, nil},
		{LimitRequest{Memory: "-1m"}, "greater than zero", nil},
		{LimitRequest{Memory: "1k"}, "minimum", nil},
		{LimitRequest{CPUQuota: 200000}, "exceeds the maximum 100000", nil},
		{LimitRequest{CPUQuota: 2_000_000}, "outside 1000..1000000", nil},
		{LimitRequest{Pids: 5000}, "1..1024", nil},
		{LimitRequest{Timeout: 4000}, "1..1800", nil},
		{LimitRequest{Timeout: -1}, "1..1800", nil},
	}
	for _, tc := range cases {
		l, err := p.ResolveLimits(tc.req)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%+v: want error containing %q, got %v", tc.req, tc.wantErr, err)
			}
			continue
		}
		if err != nil || !tc.check(l) {
			t.Errorf("%+v: got %+v, %v", tc.req, l, err)
		}
	}
}

// A policy without a tool grant target (a server that serves no bridge)
// refuses every grant mount rather than accepting any target.
func TestToolGrantWithoutTarget(t *testing.T) {
	base := t.TempDir()
	st := testSettings(base)
	st.ToolGrantTarget = ""
	err := New(st, nil).CheckMount(runtime.Mount{Source: base + "/tools/ab12", Target: "/forge/tools", ReadOnly: true}, "s1")
	var v *Violation
	if !errors.As(err, &v) || v.Rule != "mount" {
		t.Fatalf("want a mount violation, got %v", err)
	}
}

// A host-root mount is accepted only of a configured root, read-only, at
// its own place under the target, and never of a system directory or of
// one overlapping the base path, whatever the intent says.
func TestHostRootMount(t *testing.T) {
	base, data := t.TempDir(), t.TempDir()
	inBase := filepath.Join(base, "sessions")
	os.MkdirAll(inBase, 0o755)
	stage := filepath.Join(base, "state", "roots")
	staged := filepath.Join(stage, "data")
	os.MkdirAll(staged, 0o700)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(data, link)
	st := testSettings(base)
	st.HostRoots, st.HostRootsTarget, st.HostRootsStage = map[string]string{data: "", "/etc": "", inBase: "", base: "", link: "", staged: ""}, "/mnt", stage
	p := New(st, filepath.EvalSymlinks)
	for _, tc := range []struct {
		name string
		m    runtime.Mount
		rule string
	}{
		{"a configured root", runtime.Mount{Source: data, Target: "/mnt/data", ReadOnly: true}, ""},
		{"not configured", runtime.Mount{Source: t.TempDir(), Target: "/mnt/data", ReadOnly: true}, "mount"},
		{"beneath a root", runtime.Mount{Source: filepath.Join(data, "sub"), Target: "/mnt/data", ReadOnly: true}, "mount"},
		{"writable", runtime.Mount{Source: data, Target: "/mnt/data"}, "mount-readonly"},
		{"another claim", runtime.Mount{Source: data, Target: "/mnt/data", ReadOnly: true, Claim: "other"}, "mount"},
		{"over a system directory", runtime.Mount{Source: data, Target: "/etc", ReadOnly: true}, "mount"},
		{"below its place", runtime.Mount{Source: data, Target: "/mnt/data/x", ReadOnly: true}, "mount"},
		{"the target itself", runtime.Mount{Source: data, Target: "/mnt", ReadOnly: true}, "mount"},
		{"not clean", runtime.Mount{Source: data, Target: "/mnt/x/../data", ReadOnly: true}, "mount"},
		{"a system directory", runtime.Mount{Source: "/etc", Target: "/mnt/etc", ReadOnly: true}, "forbidden-mount"},
		{"inside the base path", runtime.Mount{Source: inBase, Target: "/mnt/s", ReadOnly: true}, "mount-outside-base"},
		{"the base path", runtime.Mount{Source: base, Target: "/mnt/b", ReadOnly: true}, "mount-outside-base"},
		{"a root that became a link", runtime.Mount{Source: link, Target: "/mnt/data", ReadOnly: true}, "mount"},
		{"the core's bind of a root", runtime.Mount{Source: staged, Target: "/mnt/data", ReadOnly: true}, ""},
	} {
		tc.m.HostRoot = true
		err := p.CheckMount(tc.m, "s1")
		var v *Violation
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.rule != "" && (!errors.As(err, &v) || v.Rule != tc.rule):
			t.Errorf("%s: want %s, got %v", tc.name, tc.rule, err)
		}
	}
	st.HostRootsTarget = ""
	if err := New(st, filepath.EvalSymlinks).CheckMount(runtime.Mount{Source: data, Target: "/mnt/data", ReadOnly: true, HostRoot: true}, "s1"); err == nil {
		t.Error("a host root mounted without a configured target")
	}
}

// A tenant's isolation raises the configuration's, with gVisor's profile;
// nothing lowers it, and an unknown one is refused.
func TestIntentIsolation(t *testing.T) {
	p := New(testSettings(t.TempDir()), nil)
	for _, tc := range []struct {
		in, want, rule string
	}{
		{"", runtime.IsolationContainer, ""},
		{runtime.IsolationContainer, runtime.IsolationContainer, ""},
		{runtime.IsolationGVisor, runtime.IsolationGVisor, ""},
		{"kata", "", "isolation"},
	} {
		s, err := p.Harden(Intent{Image: "mcp-forge/python:3.11", Command: []string{"python3"}, Limits: p.Settings().Defaults, SessionID: "s1", Plugin: "python", Instance: "i", Isolation: tc.in})
		var v *Violation
		switch {
		case tc.rule != "" && (!errors.As(err, &v) || v.Rule != tc.rule):
			t.Errorf("%q: %v, want %s", tc.in, err, tc.rule)
		case tc.rule == "" && (err != nil || s.Isolation != tc.want):
			t.Errorf("%q: %v %q, want %q", tc.in, err, s.Isolation, tc.want)
		case tc.want == runtime.IsolationGVisor && s.SeccompProfile != p.Settings().SeccompGVisor:
			t.Errorf("gVisor without its profile: %s", s.SeccompProfile)
		}
	}
}
