package fsquota

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The attack, in a real sandbox: a file written and unlinked while
// open, 32 MiB into a 16 MiB workspace, through the same user namespace and
// `U` bind option the server uses.
func TestPodmanUnlinkedFileHitsQuota(t *testing.T) {
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("end-to-end: set FORGE_E2E=1 (needs root, Podman and the mcp-forge/python:3.11 image)")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not installed")
	}
	q := loopQuota(t, Options{})
	ws := provision(t, q, "e2e.tag", testQuota)
	const userNSStart = 2147483647
	script := `
import errno, os, sys
fd = os.open('/work/hidden', os.O_CREAT | os.O_WRONLY, 0o600)
os.unlink('/work/hidden')
buf, n, err = b'\x01' * (1 << 20), 0, 'none'
try:
    while n < 32 << 20:
        n += os.write(fd, buf)
    os.fsync(fd)
except OSError as e:
    err = errno.errorcode[e.errno]
print('RESULT', err, n, os.getuid(), flush=True)
sys.stdin.read()  # keep the unlinked file open until the host has looked
`
	// Through the API service, as the server does: it resolves the bind
	// source in its own mount namespace, so it must see the mount.
	args := []string{}
	sock := os.Getenv("FORGE_PODMAN_SOCKET")
	if sock == "" {
		sock = "/run/podman/podman.sock"
	}
	if _, err := os.Stat(sock); err == nil {
		args = append(args, "--remote", "--url", "unix://"+sock)
	} else {
		t.Logf("no Podman service at %s: using podman without it", sock)
	}
	args = append(args, "run", "--rm", "-i", "--network", "none",
		"--uidmap", "0:"+strconv.Itoa(userNSStart)+":65536", "--gidmap", "0:"+strconv.Itoa(userNSStart)+":65536",
		"-v", ws+":/work:U", "mcp-forge/python:3.11", "python3", "-c", script)
	cmd := exec.CommandContext(t.Context(), "podman", args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "RESULT ") {
				done <- sc.Text()
				return
			}
		}
		done <- ""
	}()
	var line string
	select {
	case line = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("no result from the container within 60 s")
	}
	if line == "" {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("the container printed no result; stderr:\n%s", stderr.String())
	}
	// While the unlinked file is still open: it is invisible to a walk, and
	// the host disk holds at most the quota for it.
	used := allocated(t, q.imagePath(ws))
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("podman run: %v\n%s", err, stderr.String())
	}

	f := strings.Fields(line) // RESULT <errno> <bytes> <uid>
	if len(f) != 4 {
		t.Fatalf("unexpected result line %q", line)
	}
	n, _ := strconv.ParseInt(f[2], 10, 64)
	if f[1] != "ENOSPC" {
		t.Errorf("writing 32 MiB into a 16 MiB workspace inside the sandbox: error %s after %d bytes, want ENOSPC", f[1], n)
	}
	if n > testQuota {
		t.Errorf("the sandbox wrote %d bytes, more than the %d-byte quota", n, testQuota)
	}
	if used > testQuota {
		t.Errorf("the workspace image holds %d bytes of host disk, more than the quota %d", used, testQuota)
	}
	if used < n/2 {
		t.Errorf("the image holds only %d bytes for %d written: is the workspace really on it?", used, n)
	}
	t.Logf("sandbox wrote %d bytes before %s; image allocated %d bytes of host disk (quota %d)", n, f[1], used, testQuota)
	// Podman's U option chowned the filesystem root to the sandbox user.
	uid, _ := strconv.Atoi(f[3])
	st, err := os.Stat(ws)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Sys().(*syscall.Stat_t).Uid, uint32(userNSStart+uid); got != want {
		t.Errorf("workspace root owned by host uid %d, want %d (the sandbox's uid %d, mapped)", got, want, uid)
	}
	if _, err := os.Stat(filepath.Join(ws, "hidden")); err == nil {
		t.Error("the unlinked file is visible on the host")
	}
}
