package httpe2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Code whose call returns while its sandbox keeps running: it answers on
// the resident runner's connection itself (the one socket it has open),
// then sleeps.
const answerEarly = "import json, os, stat, time\n" +
	"for fd in map(int, os.listdir('/proc/self/fd')):\n" +
	"    try:\n" +
	"        if stat.S_ISSOCK(os.fstat(fd).st_mode):\n" +
	"            os.write(fd, (json.dumps({'repr': 'early'}) + '\\n').encode())\n" +
	"    except OSError:\n" +
	"        pass  # listdir's own descriptor, closed by now\n" +
	"time.sleep(200)\n"

// A tenant's max_concurrent_runs bounds its sandboxes, not its calls in
// flight: eve (limit 2) keeps calling with code that answers early, and at
// no time do more than two of her runs' containers run; calls over the
// limit are refused naming her quota while such containers exist.
func TestHTTPEarlyAnswersHoldTenantRunSlots(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "eve")
	tenants += "max_concurrent_runs = 2\n"
	// No warm pool: every one-shot container is a run's.
	s := testenv.StartHTTP(t, tenants+"[quotas]\nmax_concurrent_runs = 2\nexecutions_per_minute = 6000\nexecution_burst = 1000\n"+
		"[execution]\nmax_timeout = 300\nmax_concurrent_runs = 8\n[plugins.python.config]\nwarm = 0\n[plugins.r.config]\nwarm = 0\n")
	eve := s.MustConnect(t, keys["eve"])

	var most atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			out, err := exec.Command("podman", "ps", "-q", "--filter", "label=io.mcp-forge.instance="+forge.Instance(s.Base),
				"--filter", "label=io.mcp-forge.one-shot=true").Output()
			if n := int64(len(strings.Fields(string(out)))); err == nil && n > most.Load() {
				most.Store(n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// Three clients of eve's, each making calls back to back for a while.
	var answered, refused atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(12 * time.Second)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				res, out := call(t, eve, "execute_python", map[string]any{"code": answerEarly, "timeout": 200})
				switch {
				case !res.IsError:
					answered.Add(1)
				case out.Error != nil && out.Error.Type == "QuotaExceeded" && strings.Contains(testenv.Text(res), "tenants.eve.max_concurrent_runs"):
					refused.Add(1)
					time.Sleep(50 * time.Millisecond)
				default:
					t.Errorf("call: %s", testenv.Text(res))
					return
				}
			}
		}()
	}
	wg.Wait()
	testenv.WaitFor(t, "eve's runs' containers to be removed", 30*time.Second, func() bool {
		return len(testenv.Containers(t, s.Base, false, "io.mcp-forge.one-shot=true")) == 0
	})
	close(stop)
	<-sampled
	t.Logf("%d calls answered, %d refused; at most %d containers ran at once", answered.Load(), refused.Load(), most.Load())
	if most.Load() > 2 {
		t.Errorf("%d of eve's containers ran at once; tenants.eve.max_concurrent_runs = 2", most.Load())
	}
	if answered.Load() < 2 || refused.Load() == 0 {
		t.Errorf("%d answered, %d refused: want some of each", answered.Load(), refused.Load())
	}
}

// restore_session of a session the idle reaper removed creates a live
// session, so it counts against the tenant's max_sessions like an execute
// with a new session_id: refused (QuotaExceeded, audited as quota.refused
// with the tool) while the tenant is at its quota, admitted once a session
// is destroyed.
func TestHTTPRestoreCountsAgainstSessionQuota(t *testing.T) {
	tenants, keys := testenv.TenantKeys(t, "bob")
	tenants += "max_sessions = 2\n"
	s := testenv.StartHTTP(t, tenants+"[sessions]\nidle_timeout = 6\ncleanup_interval = 1\n")
	bob := s.MustConnect(t, keys["bob"])
	live := func() []string {
		var list struct {
			Sessions []struct {
				ID string `json:"session_id"`
			} `json:"sessions"`
		}
		testenv.Call(t, bob, "list_sessions", map[string]any{}, &list)
		var ids []string
		for _, v := range list.Sessions {
			ids = append(ids, v.ID)
		}
		return ids
	}
	if res, _ := call(t, bob, "execute_python", map[string]any{"code": "x = 41", "session_id": "old"}); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if res := testenv.Call(t, bob, "checkpoint_session", map[string]any{"session_id": "old"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	testenv.WaitFor(t, "the idle reaper to remove session old", time.Minute, func() bool { return len(live()) == 0 })
	for _, id := range []string{"s1", "s2"} {
		if res, _ := call(t, bob, "execute_python", map[string]any{"code": "1", "session_id": id}); res.IsError {
			t.Fatal(testenv.Text(res))
		}
	}
	res := testenv.Call(t, bob, "restore_session", map[string]any{"session_id": "old"}, nil)
	var out struct {
		Error *struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	if !res.IsError || out.Error == nil || out.Error.Type != "QuotaExceeded" || !strings.Contains(testenv.Text(res), "tenants.bob.max_sessions") {
		t.Fatalf("restore at the quota: %s %s", testenv.Text(res), b)
	}
	if ids := live(); len(ids) != 2 {
		t.Fatalf("bob has live sessions %v; tenants.bob.max_sessions = 2", ids)
	}
	audited := false
	for _, line := range strings.Split(readFile(t, s.AuditLog), "\n") {
		if strings.Contains(line, `"event":"quota.refused"`) && strings.Contains(line, `"rule":"tenants.bob.max_sessions"`) && strings.Contains(line, `"tool":"restore_session"`) {
			audited = true
		}
	}
	if !audited {
		t.Error("the refused restore is not audited as quota.refused with its rule and tool")
	}
	// Room again: the restore is admitted and brings x back.
	if res := testenv.Call(t, bob, "destroy_session", map[string]any{"session_id": "s1"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if res := testenv.Call(t, bob, "restore_session", map[string]any{"session_id": "old"}, nil); res.IsError {
		t.Fatalf("restore within the quota: %s", testenv.Text(res))
	}
	if res, o := call(t, bob, "execute_python", map[string]any{"code": "x + 1", "session_id": "old"}); res.IsError || o.Result != "42" {
		t.Fatalf("restored session: %s", testenv.Text(res))
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
