package plugin

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The test binary plays the plugin (and, for the re-parenting test, the
// core that starts it) when run with this variable set.
const roleEnv = "FORGE_PARENT_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "plugin":
		watchParent(hclog.NewNullLogger(), func() { os.Exit(7) })
		fmt.Println("watching")
		time.Sleep(time.Minute) // the watch must end this long before
		os.Exit(0)
	case "core":
		// Start a plugin without a lifeline, report its pid, then wait to
		// be killed.
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), roleEnv+"=plugin")
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			os.Exit(1)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		fmt.Printf("%d %s", cmd.Process.Pid, line)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func startRole(t *testing.T, role string, extra *os.File) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	if extra != nil {
		cmd.ExtraFiles = []*os.File{extra}
		cmd.Env = append(cmd.Env, ParentFDEnv+"=3")
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, bufio.NewReader(out)
}

// Closing the lifeline (what the kernel does when the core dies) ends the
// plugin at once; while it is open the plugin lives.
func TestLifelineEndsThePlugin(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd, out := startRole(t, "plugin", r)
	r.Close()
	if line, err := out.ReadString('\n'); err != nil || line != "watching\n" {
		t.Fatalf("plugin did not start: %q %v", line, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("the plugin exited while its core lived: %v", err)
	case <-time.After(3 * parentPoll):
	}
	closed := time.Now()
	w.Close()
	select {
	case err := <-exited:
		if cmd.ProcessState.ExitCode() != 7 {
			t.Fatalf("plugin ended with %v, not by its watch", err)
		}
		t.Logf("plugin exited %s after its lifeline closed", time.Since(closed).Round(time.Millisecond))
	case <-time.After(time.Second):
		t.Fatal("the plugin outlived its lifeline by a second")
	}
}

// A plugin whose core passed no lifeline still exits when the core dies:
// it is re-parented, and it notices within a poll.
func TestReparentedPluginExits(t *testing.T) {
	core, out := startRole(t, "core", nil)
	line, err := out.ReadString('\n')
	if err != nil || !strings.HasSuffix(line, " watching\n") {
		t.Fatalf("core did not start its plugin: %q %v", line, err)
	}
	pid, _ := strconv.Atoi(strings.Fields(line)[0])
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	core.Process.Signal(syscall.SIGKILL)
	core.Wait()
	deadline := time.Now().Add(2 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			return // gone, or exited and awaiting its new parent's reaping
		}
		if time.Now().After(deadline) {
			t.Fatal("the plugin outlived its core by two seconds")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
