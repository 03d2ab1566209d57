package podman

import (
	"bufio"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Podman's State.OOMKilled stays false on cgroups v1 with runc, and the
// container's memory cgroup (with its oom_kill counter) is gone by the time
// a wait returns. What remains is the kernel's own record: for every
// memory-cgroup OOM kill it logs
//
//	oom-kill:constraint=CONSTRAINT_MEMCG,…,oom_memcg=/libpod_parent/libpod-<id>,task_memcg=…,task=python3,pid=…
//	Memory cgroup out of memory: Killed process 20219 (python3) …
//
// The first line comes from dump_header, which the kernel rate-limits (ten
// per five seconds); the second is always printed but names no cgroup.

// oomWindow is how long before a container's finish an OOM kill of one of
// its processes is taken as the cause of its exit (a session container may
// have had a child killed long before its kernel was killed by a plain
// signal).
const (
	oomBefore = 10 * time.Second
	oomAfter  = 2 * time.Second
)

// kmsgRecord is one record of /dev/kmsg: its time since boot and text.
type kmsgRecord struct {
	at   time.Duration
	text string
}

// parseKmsg parses "prio,seq,usec,flags[,…];text" (continuation lines, which
// start with a space, are dropped).
func parseKmsg(line string) (kmsgRecord, bool) {
	head, text, ok := strings.Cut(line, ";")
	if !ok {
		return kmsgRecord{}, false
	}
	f := strings.SplitN(head, ",", 4)
	if len(f) < 3 {
		return kmsgRecord{}, false
	}
	us, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return kmsgRecord{}, false
	}
	if i := strings.IndexByte(text, '\n'); i >= 0 {
		text = text[:i]
	}
	return kmsgRecord{at: time.Duration(us) * time.Microsecond, text: text}, true
}

// oomVerdict reads the kernel's records for container id (full id), which
// finished at finished (boot-relative; zero: any time).
func oomVerdict(records []kmsgRecord, id string, finished time.Duration) runtime.OOMVerdict {
	cgroup := "libpod-" + id
	inWindow := func(r kmsgRecord) bool {
		return finished == 0 || r.at >= finished-oomBefore && r.at <= finished+oomAfter
	}
	verdict := runtime.NoOOMKill
	for i, r := range records {
		switch {
		case strings.HasPrefix(r.text, "oom-kill:") && strings.Contains(r.text, cgroup) && inWindow(r):
			return runtime.OOMKill
		case strings.Contains(r.text, "of memory: Killed process") && inWindow(r):
			// A kill whose summary was rate-limited away could be ours.
			if i == 0 || !strings.HasPrefix(records[i-1].text, "oom-kill:") {
				verdict = runtime.OOMUnknown
			}
		}
	}
	return verdict
}

// readKmsg returns every record the kernel still holds, oldest first. Only
// the summary lines are kept.
func readKmsg(path string) ([]kmsgRecord, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []kmsgRecord
	buf := make([]byte, 8192) // one record per read; records are at most ~1 kB
	for {
		n, err := syscall.Read(int(f.Fd()), buf)
		switch {
		case errors.Is(err, syscall.EAGAIN):
			return out, nil
		case errors.Is(err, syscall.EPIPE):
			continue // overwritten while we read: go on with the next
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return out, err
		case n == 0:
			return out, nil
		}
		r, ok := parseKmsg(string(buf[:n]))
		if ok && (strings.HasPrefix(r.text, "oom-kill:") || strings.Contains(r.text, "of memory: Killed process")) {
			out = append(out, r)
		}
	}
}

// readKmsgFile reads a dmesg-like transcript in /dev/kmsg format (tests).
func readKmsgFile(r io.Reader) []kmsgRecord {
	var out []kmsgRecord
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if rec, ok := parseKmsg(sc.Text()); ok {
			out = append(out, rec)
		}
	}
	return out
}

// sinceBoot converts a wall-clock time to the kernel log's clock (time since
// boot, not counting suspend, like CLOCK_MONOTONIC).
func sinceBoot(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	now := time.Duration(ts.Nano())
	d := now - time.Since(t)
	if d <= 0 {
		return 0
	}
	return d
}
