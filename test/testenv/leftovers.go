package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/core/fsquota"
)

// Leftovers lists what servers left on the host under base: mounts (from
// /proc/self/mountinfo), loop devices whose backing file is under base
// (/sys/block/loop*/loop/backing_file), workspace directories under
// <base>/sessions and quota state directories under <base>/.quota. A base
// path whose servers all ended, killed or not, must have none.
func Leftovers(base string) []string {
	var out []string
	out = append(out, prefixed("mount ", MountsUnder(base))...)
	out = append(out, prefixed("loop ", LoopsUnder(base))...)
	for _, sub := range []string{"sessions", ".quota"} {
		ents, _ := os.ReadDir(filepath.Join(base, sub))
		for _, e := range ents {
			out = append(out, "dir "+filepath.Join(base, sub, e.Name()))
		}
	}
	return out
}

func prefixed(p string, l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = p + s
	}
	return out
}

// MountsUnder lists the mount points below base.
func MountsUnder(base string) []string { return fsquota.MountPointsUnder(base) }

// LoopsUnder lists the loop devices (as "/dev/loopN=backing file") bound
// to files below base.
func LoopsUnder(base string) []string {
	var out []string
	for dev, backing := range fsquota.LoopBackings() {
		if strings.HasPrefix(backing, base+"/") {
			out = append(out, dev+"="+backing)
		}
	}
	sort.Strings(out)
	return out
}

// releaseLeftovers undoes what Leftovers finds of mounts and loop devices
// under base, so that a failing test does not leave them on the machine
// for the next run (and os.RemoveAll of base can succeed).
func releaseLeftovers(base string) {
	m := MountsUnder(base)
	for i := len(m) - 1; i >= 0; i-- { // the topmost mounts are listed last
		if err := unix.Unmount(m[i], unix.UMOUNT_NOFOLLOW); errors.Is(err, unix.EBUSY) {
			_ = unix.Unmount(m[i], unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
		}
	}
	for _, l := range LoopsUnder(base) {
		dev, _, _ := strings.Cut(l, "=")
		if fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
			_ = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
			unix.Close(fd)
		}
	}
	// Mount points of workspace filesystems are immutable while mounted
	// over; unmounted, they still are: clear the flag so they can go.
	ents, _ := os.ReadDir(filepath.Join(base, "sessions"))
	for _, e := range ents {
		p := filepath.Join(base, "sessions", e.Name())
		if fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			if flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS); err == nil && flags&0x10 != 0 {
				_ = unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags&^0x10))
			}
			unix.Close(fd)
		}
	}
}

// checkLeftovers fails the test when servers left mounts, loop devices or
// workspace directories under base (they must clean up even when killed:
// the watchdog, or the next server on the base path), then releases them.
func checkLeftovers(t testing.TB, base string) {
	t.Helper()
	if left := Leftovers(base); len(left) > 0 {
		t.Errorf("left under %s after the test's servers ended: %v", base, left)
	}
	releaseLeftovers(base)
}
