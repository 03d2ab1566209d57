package podman

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

var update = flag.Bool("update", false, "rewrite testdata/specgen/*.json from toSpecgen")

// base is a spec as the policy hardens a stateless Python run.
func base() runtime.Spec {
	return runtime.Spec{
		Name:    "forge-run-1",
		Image:   "mcp-forge/python:3.11",
		ImageID: "f371ca1655e0" + strings.Repeat("0", 52),
		// The profile the core installs; the policy refuses a spec without it.
		SeccompProfile: "/var/lib/mcp-forge/mcp-forge-seccomp-0123456789abcdef.json",
		Command:        []string{"python3", "/forge/runner.py"},
		Env:            map[string]string{"MPLBACKEND": "Agg"},
		WorkDir:        "/work",
		Labels: map[string]string{runtime.LabelManaged: "true", runtime.LabelInstance: "abc", runtime.LabelPlugin: "python",
			runtime.LabelOneShot: "true", "io.mcp-forge.server": "1-2"},
		User: "1000:1000", Network: "none", ReadOnlyRoot: true, TmpfsSize: 64 << 20, NoNewPrivileges: true,
		CapDrop: []string{"ALL"}, UserNS: "private", UserNSStart: 2147483647, Init: true,
		Mounts: []runtime.Mount{
			{Source: "/var/lib/mcp-forge/sessions/r1/code", Target: "/forge", ReadOnly: true},
			{Source: "/var/lib/mcp-forge/sessions/r1/out", Target: "/work"},
		},
		Limits: runtime.Limits{MemoryBytes: 512 << 20, CPUQuota: 50000, Pids: 128, NoFile: 1024, Timeout: 30 * time.Second},
		Plugin: "python",
	}
}

func specCases() map[string]runtime.Spec {
	session := base()
	delete(session.Labels, runtime.LabelOneShot)
	session.Command = []string{"python3", "-m", "ipykernel_launcher", "-f", "/run/forge/kernel.json"}
	session.Mounts = []runtime.Mount{{Source: "/var/lib/mcp-forge/sessions/s-a1b2", Target: "/run/forge"}}
	session.SessionID = "main"
	network := base()
	network.Network = "bridge"
	auto := base()
	auto.UserNS, auto.UserNSStart = "auto", 0
	host := base()
	host.UserNS, host.UserNSStart = "", 0
	return map[string]runtime.Spec{"stateless": base(), "session": session, "network": network, "userns-auto": auto, "userns-host": host}
}

// The Podman spec of every representative container matches its golden
// file: a change to anything that confines a container shows up in review.
// Run with -update to accept a deliberate change.
func TestToSpecgenGolden(t *testing.T) {
	for name, s := range specCases() {
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(toSpecgen(s), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "specgen", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run `go test ./core/runtime/podman -run Golden -update` to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("toSpecgen(%s) differs from %s (run with -update if the change is deliberate):\n%s", name, path, diffLines(string(want), string(got)))
			}
		})
	}
}

// Whatever the golden files say, these confine every container: checked on
// the generated spec itself so that an -update cannot accept their loss.
func TestToSpecgenConfines(t *testing.T) {
	for name, s := range specCases() {
		t.Run(name, func(t *testing.T) {
			g := toSpecgen(s)
			check := func(ok bool, what string) {
				t.Helper()
				if !ok {
					t.Errorf("%s: %s", name, what)
				}
			}
			check(g.Privileged != nil && !*g.Privileged, "not privileged")
			check(g.ReadOnlyFilesystem != nil && *g.ReadOnlyFilesystem, "read-only root")
			check(g.ReadWriteTmpfs != nil && !*g.ReadWriteTmpfs, "no writable tmpfs over the read-only root")
			check(g.NoNewPrivileges != nil && *g.NoNewPrivileges, "no-new-privileges")
			check(slices.Equal(g.CapDrop, []string{"ALL"}) && len(g.CapAdd) == 0, "all capabilities dropped, none added")
			check(g.Init != nil && *g.Init, "an init process")
			check(g.SeccompProfilePath == s.SeccompProfile && s.SeccompProfile != "", "MCP-Forge's seccomp profile")
			check(g.Image == s.ImageID && s.ImageID != "", "created from the resolved image ID, not a name")
			check(g.User == "1000:1000", "non-root user")
			check(len(g.Devices) == 0, "no devices")
			check(g.PidNS.NSMode == "" && g.IpcNS.NSMode == "" && g.UtsNS.NSMode == "", "no host pid, ipc or uts namespace")
			if s.Network == "none" {
				check(g.NetNS.NSMode == "none", "no network")
			} else {
				check(g.NetNS.NSMode == "bridge", "bridge network, never host")
			}
			switch s.UserNS {
			case "private":
				check(g.UserNS.NSMode == "private" && g.IDMappings != nil && len(g.IDMappings.UIDMap) == 1 &&
					g.IDMappings.UIDMap[0].HostID == int(s.UserNSStart) && g.IDMappings.UIDMap[0].Size == runtime.UserNSSize &&
					slices.Equal(g.IDMappings.UIDMap, g.IDMappings.GIDMap), "private user namespace at UserNSStart")
			case "auto":
				check(g.UserNS.NSMode == "auto" && g.IDMappings != nil && g.IDMappings.AutoUserNs, "automatic user namespace")
			}
			r := g.ResourceLimits
			check(r != nil && r.Memory != nil && r.Memory.Limit != nil && *r.Memory.Limit == s.Limits.MemoryBytes, "memory limit")
			check(r != nil && r.Memory != nil && r.Memory.Swap != nil && *r.Memory.Swap == s.Limits.MemoryBytes, "no swap beyond the memory limit")
			check(r != nil && r.CPU != nil && r.CPU.Quota != nil && *r.CPU.Quota == s.Limits.CPUQuota && r.CPU.Period != nil && *r.CPU.Period == 100000, "CPU quota")
			check(r != nil && r.Pids != nil && r.Pids.Limit == s.Limits.Pids, "pids limit")
			rl := map[string]uint64{}
			for _, l := range g.Rlimits {
				check(l.Soft == l.Hard, "rlimit soft == hard")
				rl[l.Type] = l.Hard
			}
			check(rl["nofile"] == uint64(s.Limits.NoFile) && rl["nproc"] == uint64(s.Limits.Pids), "nofile and nproc rlimits")
			var tmp, binds int
			for _, m := range g.Mounts {
				opts := strings.Join(m.Options, ",")
				check(slices.Contains(m.Options, "nosuid") && slices.Contains(m.Options, "nodev"), "mount "+m.Destination+" nosuid,nodev: "+opts)
				switch m.Type {
				case "tmpfs":
					tmp++
					check(m.Destination == "/tmp", "tmpfs only on /tmp")
				case "bind":
					binds++
					var want *runtime.Mount
					for i := range s.Mounts {
						if s.Mounts[i].Target == m.Destination {
							want = &s.Mounts[i]
						}
					}
					check(want != nil && want.Source == m.Source, "bind mount "+m.Destination+" is one the spec asked for")
					if want != nil && want.ReadOnly {
						check(slices.Contains(m.Options, "ro") && !slices.Contains(m.Options, "rw"), "read-only mount "+m.Destination)
					}
				default:
					check(false, "unexpected mount type "+m.Type)
				}
			}
			check(tmp == 1 && binds == len(s.Mounts), "one tmpfs and exactly the spec's bind mounts")
			check(len(g.Volumes) == 0 && len(g.OverlayVolumes) == 0 && len(g.ImageVolumes) == 0, "no volumes")
			check(g.Remove != nil && !*g.Remove, "not auto-removed (the core removes it after reading its logs)")
			if s.Labels[runtime.LabelOneShot] == "true" {
				check(g.Timeout == uint((s.Limits.Timeout+LifetimeGrace).Seconds()), "a one-shot container's lifetime is bounded by conmon")
			} else {
				check(g.Timeout == 0, "a session's container lives as long as its session")
			}
		})
	}
}

// diffLines shows the lines of b that differ from a, in order.
func diffLines(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			out = append(out, "- "+x, "+ "+y)
		}
	}
	return strings.Join(out, "\n")
}
