package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/procid"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/podman"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// podmanService is a Podman API service of this test's own (never the
// shared one at /run/podman/podman.sock, which others use).
type podmanService struct {
	sock string
	log  string
	cmd  *exec.Cmd
}

func (p *podmanService) start(t *testing.T) {
	t.Helper()
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command("podman", "--runtime", "runc", "system", "service", "--time=0", "unix://"+p.sock)
	p.cmd.Dir = "/"
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rt := podman.New(p.sock)
	if !poll(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := rt.Info(ctx)
		return err == nil
	}) {
		b, _ := os.ReadFile(p.log)
		t.Fatalf("the test's Podman service does not answer on %s:\n%s", p.sock, b)
	}
}

// stop kills the service abruptly (a crash, not a shutdown).
func (p *podmanService) stop(t *testing.T) {
	t.Helper()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
	p.cmd = nil
}

// The Podman service dies mid-run and comes back: the run in flight and
// calls meanwhile fail with a clear error, the server recovers without a
// restart, the container of the interrupted run is removed once the service
// is back, no conmon lingers, and the audit log accounts for every
// container.
func TestPodmanServiceRestart(t *testing.T) {
	testenv.Require(t)
	dir := testenv.BaseDir(t)
	svc := &podmanService{sock: filepath.Join(dir, "podman.sock"), log: filepath.Join(dir, "podman.log")}
	svc.start(t)
	t.Cleanup(func() { svc.stop(t) })
	s := testenv.StartServer(t, fmt.Sprintf("[server]\npodman_socket = %q\n", svc.sock)+testenv.NoSessionPools+coldConfig) // pools off: the test counts the session's and the run's containers
	id := procid.Of(s.Cmd.Process.Pid)
	call := sessionCaller(t, s, "execute_python")
	if o, res := call("x = 41", "keep", 0); res.IsError {
		t.Fatalf("session before the fault: %+v %s", o, testenv.Text(res))
	}
	if res := s.Call(t, "execute_python", map[string]any{"code": "print(1)"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	// That run's container may outlive its answer by up to a second (it is
	// stopped once the answer is in): only the session's may be running
	// before the run in flight starts, or its count below is not that run's.
	if !poll(30*time.Second, func() bool { return len(runningContainers(t, id)) == 1 }) {
		t.Fatalf("the stateless run's container stayed: %v", serverContainers(t, id))
	}

	inflight := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python",
			Arguments: map[string]any{"code": "import time\ntime.sleep(30)\nprint('finished')", "timeout": 60}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "protocol error: " + err.Error()}}}
		}
		inflight <- res
	}()
	// Both containers running: the run is past its start, in its wait.
	if !poll(30*time.Second, func() bool { return len(runningContainers(t, id)) == 2 }) {
		t.Fatalf("the run's container did not start: %v", serverContainers(t, id))
	}
	svc.stop(t)

	var res *mcp.CallToolResult
	select {
	case res = <-inflight:
	case <-time.After(60 * time.Second):
		t.Fatal("the run in flight did not end within 60 s of the service's death")
	}
	clear := func(what string, res *mcp.CallToolResult) {
		t.Helper()
		text := testenv.Text(res)
		t.Logf("%s: %s", what, text)
		if !res.IsError || !strings.Contains(text, "Podman") || strings.Contains(text, "protocol error") {
			t.Errorf("%s: want a tool error that names Podman, got %q", what, text)
		}
	}
	clear("run in flight", res)
	clear("run while down", s.Call(t, "execute_python", map[string]any{"code": "print(2)"}, nil))

	svc.start(t)
	var o out
	if !poll(30*time.Second, func() bool {
		return !s.Call(t, "execute_python", map[string]any{"code": "6*7"}, &o).IsError && o.ResultRepr == "42"
	}) {
		t.Fatal("the server did not recover within 30 s of the service's return")
	}
	if o, res := call("x + 1", "keep", 0); res.IsError || o.ResultRepr != "42" {
		t.Fatalf("the session after the fault: %+v %s", o, testenv.Text(res))
	}
	// The interrupted run's container goes once removal is retried.
	if !poll(30*time.Second, func() bool { return len(serverContainers(t, id)) == 1 }) {
		t.Fatalf("orphans after the service's return: %v", serverContainers(t, id))
	}
	if res := s.Call(t, "destroy_session", map[string]any{"session_id": "keep"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if c := serverContainers(t, id); len(c) != 0 {
		t.Fatalf("containers left: %v", c)
	}
	// No lost audit line: every container created was removed, on the record.
	created, removed := map[string]bool{}, map[string]bool{}
	for _, e := range auditEntries(t, s.AuditLog) {
		cid, _ := e.Details["container_id"].(string)
		switch {
		case e.Event == audit.ContainerCreate && e.Success:
			created[cid] = true
		case e.Event == audit.ContainerRemove && e.Success:
			removed[cid] = true
		}
	}
	if len(created) < 4 {
		t.Errorf("only %d container creations audited", len(created))
	}
	for cid := range created {
		if !removed[cid] {
			t.Errorf("container %.12s: creation audited, removal not", cid)
		}
		// conmon, or the cleanup it runs, may take a moment to go.
		var procs []byte
		if !poll(10*time.Second, func() bool { procs, _ = exec.Command("pgrep", "-a", "-f", cid).Output(); return len(procs) == 0 }) {
			t.Errorf("processes of removed container %.12s linger: %s", cid, procs)
		}
	}
}

func runningContainers(t *testing.T, serverID string) []string {
	t.Helper()
	out, err := exec.Command("podman", "ps", "-q", "--filter", "status=running", "--filter", "label="+runtime.LabelServer+"="+serverID).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}
