package security

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// runMode is how a stateless run gets its container: started for it
// (cold), or taken ready from the plugin's warm pool.
type runMode struct {
	name, config string
	warm         bool
}

var runModes = []runMode{
	{"cold", "[plugins.python.config]\nwarm = 0\n[plugins.r.config]\nwarm = 0\n", false},
	{"warm", testenv.DefaultPools, true},
}

// call runs a stateless call in this mode; a warm call must be a hit.
func (m runMode) call(t *testing.T, s *testenv.Server, plugin string, args map[string]any, o *execOut) *mcp.CallToolResult {
	t.Helper()
	if !m.warm {
		return s.Call(t, "execute_"+plugin, args, o)
	}
	before := testenv.WaitWarm(t, s.Session, plugin, 1)
	res := s.Call(t, "execute_"+plugin, args, o)
	if after := testenv.Pool(t, s.Session, plugin); after == nil || after.Hits != before.Hits+1 {
		t.Fatalf("the call was not served by a warm container: before %+v, after %+v", before, after)
	}
	return res
}

// confinementProbe reports, from inside the sandbox, everything that makes
// up its confinement (and nothing that differs between two containers
// anyway, such as the hostname).
const confinementProbe = `
import os, socket, json, resource
def read(p):
    try:
        return open(p).read().strip()
    except OSError as e:
        return "unreadable: " + type(e).__name__
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
out = {"ifaces": sorted(n for _, n in socket.if_nameindex()), "uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups())}
try:
    socket.create_connection(("1.1.1.1", 80), timeout=3); out["connect"] = "connected"
except OSError as e:
    out["connect"] = type(e).__name__
try:
    open("/forge-root-write", "w"); out["root_write"] = "written"
except OSError as e:
    out["root_write"] = e.strerror
out["root_ro"] = bool(os.statvfs("/").f_flag & os.ST_RDONLY)
try:
    open("/tmp/ok", "w").write("x"); out["tmp_write"] = "ok"
except OSError as e:
    out["tmp_write"] = e.strerror
for k in ("NoNewPrivs", "CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb", "Seccomp", "Seccomp_filters"):
    out[k] = st.get(k, "").strip()
out["uid_map"] = read("/proc/self/uid_map").split()
out["gid_map"] = read("/proc/self/gid_map").split()
out["memory_limit"] = read("/sys/fs/cgroup/memory/memory.limit_in_bytes")
out["memsw_limit"] = read("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
out["pids_max"] = read("/sys/fs/cgroup/pids/pids.max")
out["cpu_quota"] = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
out["nofile"] = resource.getrlimit(resource.RLIMIT_NOFILE)
out["nproc"] = resource.getrlimit(resource.RLIMIT_NPROC)
mounts = {}
for line in open("/proc/self/mountinfo"):
    f = line.split()
    if f[4] in ("/", "/tmp", "/forge/in", "/forge/out", "/forge/meta", "/forge/chan", "/proc", "/sys"):
        mounts[f[4]] = sorted(set(f[5].split(",")) - {"relatime", "noatime"})
out["mounts"] = mounts
out["env"] = sorted(k for k in os.environ if k != "HOSTNAME")
out["cwd"] = os.getcwd()
out["pid1"] = read("/proc/1/comm")
print(json.dumps(out, sort_keys=True))
`

// TestWarmConfinementEqualsCold: a container from the warm pool is
// confined exactly as one started for the run: the same namespaces, ids,
// capabilities, seccomp filter, cgroup limits, rlimits, mounts and
// environment, and every one of them as strict as the sandbox requires.
func TestWarmConfinementEqualsCold(t *testing.T) {
	probes := map[string]map[string]any{}
	for _, m := range runModes {
		t.Run(m.name, func(t *testing.T) {
			s := testenv.StartServer(t, m.config)
			var o execOut
			res := m.call(t, s, "python", map[string]any{"code": confinementProbe, "timeout": 30}, &o)
			if res.IsError {
				t.Fatalf("probe failed: %s", testenv.Text(res))
			}
			var p map[string]any
			if err := json.Unmarshal([]byte(o.Stdout), &p); err != nil {
				t.Fatalf("probe output %q: %v", o.Stdout, err)
			}
			t.Logf("%s: %s", m.name, o.Stdout)
			probes[m.name] = p
			check := func(what string, ok bool) {
				if !ok {
					t.Errorf("%s: %v", what, p)
				}
			}
			check("only lo", reflect.DeepEqual(p["ifaces"], []any{"lo"}))
			check("no connection out", p["connect"] != "connected")
			check("read-only root", p["root_ro"] == true && p["root_write"] == testenv.RootWriteError())
			check("writable /tmp", p["tmp_write"] == "ok")
			check("not root", p["uid"] != float64(0))
			check("no new privileges", p["NoNewPrivs"] == "1")
			check("no capabilities", strings.Trim(p["CapEff"].(string), "0") == "" && strings.Trim(p["CapPrm"].(string), "0") == "" && strings.Trim(p["CapBnd"].(string), "0") == "")
			check("seccomp filter", p["Seccomp"] == "2")
			um, _ := p["uid_map"].([]any)
			// Under gVisor the map is the Sentry's own; the host side is
			// TestGVisorIsolation's.
			check("private user namespace", testenv.GVisor() || len(um) >= 3 && um[1] != "0" && um[1] != "1000")
			check("memory limit", p["memory_limit"] != "" && !strings.HasPrefix(p["memory_limit"].(string), "9223372036854"))
			// Under gVisor the Sentry's cgroupfs shows no pids limit: the
			// host cgroup holds the Sentry, RLIMIT_NPROC the code and the
			// core's relays: at least the configured count (docs/gvisor.md).
			nproc, _ := p["nproc"].([]any)
			check("pids limit", p["pids_max"] != "max" || testenv.GVisor() && len(nproc) == 2 && nproc[0].(float64) >= float64(config.Default().Execution.DefaultPids))
			check("init process", p["pid1"] == "catatonit" || p["pid1"] == "podman-init") // Podman installs catatonit as podman-init
			mounts, _ := p["mounts"].(map[string]any)
			in, _ := mounts["/forge/in"].([]any)
			check("read-only code mount", slices.Contains(strs(in), "ro"))
		})
	}
	if probes["cold"] != nil && probes["warm"] != nil && !reflect.DeepEqual(probes["cold"], probes["warm"]) {
		for k := range probes["cold"] {
			if !reflect.DeepEqual(probes["cold"][k], probes["warm"][k]) {
				t.Errorf("%s: cold %v, warm %v", k, probes["cold"][k], probes["warm"][k])
			}
		}
	}
}

func strs(v []any) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i], _ = x.(string)
	}
	return out
}
