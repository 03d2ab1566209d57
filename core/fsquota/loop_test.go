package fsquota

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/mountinfo"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

const testQuota = 16 << 20

// requireE2E keeps loop devices and mounts out of the unit tier (make
// test-unit touches nothing of the host): they run with FORGE_E2E=1.
func requireE2E(t testing.TB) {
	t.Helper()
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("attaches loop devices and mounts filesystems: end-to-end tier, set FORGE_E2E=1 (make test does)")
	}
}

// loopQuota returns a Quota on a fresh base path, skipping the test where
// the loop mechanism cannot work.
func loopQuota(t *testing.T, o Options) *Quota {
	t.Helper()
	requireE2E(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: loop devices and mount(2) need CAP_SYS_ADMIN")
	}
	base := t.TempDir()
	q, err := New(base, hclog.NewNullLogger(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !q.Mechanism().Enforced() {
		t.Skipf("no loop support here: %s", q.Mechanism())
	}
	if err := os.MkdirAll(filepath.Join(base, "sessions"), 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { assertNothingLeft(t, base) })
	return q
}

// provision provisions a workspace and releases it when the test ends.
func provision(t *testing.T, q *Quota, name string, size int64) string {
	t.Helper()
	ws := filepath.Join(q.base, "sessions", name)
	if err := q.Provision(ws, size, -1, -1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := q.Release(ws); err != nil {
			t.Errorf("release %s: %v", ws, err)
		}
	})
	return ws
}

// assertNothingLeft checks that no mount, loop device or image under base
// outlives the test. Autoclear detaches a loop device after its last close,
// which the kernel may finish a moment later (seconds on a loaded
// machine, seen at load 17 on two cores): poll with a bound.
func assertNothingLeft(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := leftovers(t, base)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("left behind: %s", strings.Join(left, "; "))
			for _, m := range mountsUnder(t, base) { // keep the host clean for the next test
				_ = unix.Unmount(m, unix.MNT_DETACH)
				_ = clearImmutable(m)
			}
			detachLoops(base + "/")
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func leftovers(t *testing.T, base string) []string {
	var left []string
	for _, m := range mountsUnder(t, base) {
		left = append(left, "mount "+m)
	}
	for dev, f := range loopDevicesUnder(base) {
		left = append(left, "loop device "+dev+" on "+f)
	}
	imgs, _ := filepath.Glob(filepath.Join(base, stateDir, "*", "*.img"))
	for _, i := range imgs {
		left = append(left, "image "+i)
	}
	return left
}

func mountsUnder(t *testing.T, base string) []string {
	ms, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		if strings.HasPrefix(m.MountPoint, base+"/") {
			out = append(out, m.MountPoint)
		}
	}
	return out
}

// loopDevicesUnder lists loop devices bound to files under base (what
// `losetup -a` shows).
func loopDevicesUnder(base string) map[string]string {
	out := map[string]string{}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(string(b), base+"/") {
			out[filepath.Base(filepath.Dir(filepath.Dir(f)))] = strings.TrimSpace(string(b))
		}
	}
	return out
}

// writeUntilFull writes n bytes to f in 1 MiB chunks and returns how many
// were written and the first error.
func writeUntilFull(f *os.File, n int64) (int64, error) {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i) | 1 // not zeros, in case anything ever dedupes them
	}
	var done int64
	for done < n {
		k, err := f.Write(buf)
		done += int64(k)
		if err != nil {
			return done, err
		}
	}
	return done, f.Sync()
}

func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func TestWritePastQuotaFailsWithENOSPC(t *testing.T) {
	q := loopQuota(t, Options{})
	ws := provision(t, q, "s1.tag", testQuota)
	f, err := os.Create(filepath.Join(ws, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := writeUntilFull(f, 2*testQuota)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("writing %d bytes into a %d-byte workspace: err = %v after %d bytes, want ENOSPC", 2*testQuota, testQuota, err, n)
	}
	if n > testQuota {
		t.Errorf("%d bytes written, more than the %d-byte quota", n, testQuota)
	}
	if n < testQuota*9/10 {
		t.Errorf("only %d of %d bytes usable: the filesystem's own overhead is too large", n, testQuota)
	}
	img := q.imagePath(ws)
	if a := allocated(t, img); a > testQuota {
		t.Errorf("the image holds %d bytes of host disk, more than the quota %d", a, testQuota)
	}
	// What the sandbox deletes goes back to the host (discard punches it out
	// of the sparse image).
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for allocated(t, img) > 1<<20 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if a := allocated(t, img); a > 1<<20 {
		t.Errorf("after deleting the file the image still holds %d bytes of host disk", a)
	}
}

// Kernels before 5.8 have no LOOP_CONFIGURE: the two-step set-up must set
// autoclear too, or every workspace would leak a loop device.
func TestLegacyLoopSetup(t *testing.T) {
	q := loopQuota(t, Options{})
	loopConfigure = false
	t.Cleanup(func() { loopConfigure = true })
	ws := filepath.Join(q.base, "sessions", "legacy.tag")
	if err := q.Provision(ws, testQuota, -1, -1); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(ws, "big"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = writeUntilFull(f, 2*testQuota)
	f.Close()
	if !errors.Is(err, unix.ENOSPC) {
		t.Errorf("write past the quota: %v, want ENOSPC", err)
	}
	if err := q.Release(ws); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, q.base)
}

// The hole a directory walk misses: a file unlinked while open.
func TestUnlinkedOpenFileFailsWithENOSPC(t *testing.T) {
	q := loopQuota(t, Options{})
	ws := provision(t, q, "s2.tag", testQuota)
	p := filepath.Join(ws, "hidden")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	n, err := writeUntilFull(f, 2*testQuota)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("unlinked file: err = %v after %d bytes, want ENOSPC", err, n)
	}
	if a := allocated(t, q.imagePath(ws)); a > testQuota {
		t.Errorf("the image holds %d bytes of host disk, more than the quota %d", a, testQuota)
	}
}

func TestProvisionedWorkspace(t *testing.T) {
	q := loopQuota(t, Options{})
	ws := filepath.Join(q.base, "sessions", "own.tag")
	const uid, gid = 2147484647, 2147484647
	if err := q.Provision(ws, testQuota, uid, gid); err != nil {
		t.Fatal(err)
	}
	defer q.Release(ws)
	st, err := os.Stat(ws)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != uid || sys.Gid != gid || st.Mode().Perm() != 0o711 {
		t.Errorf("workspace root %d:%d %v, want %d:%d -rwx--x--x", sys.Uid, sys.Gid, st.Mode().Perm(), uid, gid)
	}
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		t.Errorf("a new workspace holds %v, want it empty (no lost+found)", ents)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(ws, &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Flags&unix.ST_NOSUID == 0 || sfs.Flags&unix.ST_NODEV == 0 || sfs.Flags&unix.ST_NOEXEC != 0 {
		t.Errorf("mount flags %#x: want nosuid and nodev, and exec allowed", sfs.Flags)
	}
	if sfs.Type != unix.EXT4_SUPER_MAGIC {
		t.Errorf("filesystem type %#x, want ext4", sfs.Type)
	}
	if total := int64(sfs.Blocks) * sfs.Bsize; total > testQuota {
		t.Errorf("filesystem of %d bytes, more than the quota %d", total, testQuota)
	}
}

func TestReleaseLeavesNothing(t *testing.T) {
	q := loopQuota(t, Options{})
	ws := filepath.Join(q.base, "sessions", "rel.tag")
	if err := q.Provision(ws, testQuota, -1, -1); err != nil {
		t.Fatal(err)
	}
	if len(loopDevicesUnder(q.base)) != 1 || len(mountsUnder(t, q.base)) != 1 {
		t.Fatalf("after Provision: loop devices %v, mounts %v; want one of each", loopDevicesUnder(q.base), mountsUnder(t, q.base))
	}
	if err := os.WriteFile(filepath.Join(ws, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := q.Release(ws); err != nil {
		t.Fatal(err)
	}
	if err := q.Release(ws); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	assertNothingLeft(t, q.base)
	if _, err := os.Stat(q.imagePath(ws)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("image still there: %v", err)
	}
	// The mount point is an ordinary directory again: the caller can remove it.
	if err := os.Remove(ws); err != nil {
		t.Errorf("remove the released workspace: %v", err)
	}
}

// A host process still inside the workspace (the server reading a file, a
// shell) makes the unmount lazy; the loop device goes when it leaves.
func TestReleaseWhileBusyIsLazy(t *testing.T) {
	q := loopQuota(t, Options{})
	ws := filepath.Join(q.base, "sessions", "busy.tag")
	if err := q.Provision(ws, testQuota, -1, -1); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(ws, "open"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Release(ws); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if m := mountsUnder(t, q.base); len(m) != 0 {
		t.Errorf("still mounted after Release: %v", m)
	}
	if _, err := f.Write([]byte("still writable through the open file")); err != nil {
		t.Errorf("write to a file of a lazily unmounted workspace: %v", err)
	}
	f.Close()
	assertNothingLeft(t, q.base)
	if err := os.Remove(ws); err != nil {
		t.Errorf("remove the released workspace: %v", err)
	}
}

func TestProvisionRefusals(t *testing.T) {
	q := loopQuota(t, Options{})
	ws := provision(t, q, "twice.tag", testQuota)
	if err := q.Provision(ws, testQuota, -1, -1); !errors.Is(err, ErrMountpoint) {
		t.Errorf("second Provision of %s = %v, want ErrMountpoint", ws, err)
	}

	full := filepath.Join(q.base, "sessions", "full.tag")
	if err := os.MkdirAll(full, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "old"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := q.Provision(full, testQuota, -1, -1); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("Provision of a non-empty directory = %v, want ErrNotEmpty", err)
	}

	target := t.TempDir()
	link := filepath.Join(q.base, "sessions", "link.tag")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := q.Provision(link, testQuota, -1, -1); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Provision through a symlink = %v, want a refusal naming the symlink", err)
		q.Release(link)
	}
	for _, l := range leftovers(t, q.base) {
		if !strings.Contains(l, "twice.tag") {
			t.Errorf("a refused provision left %s", l)
		}
	}
}

func TestOddNames(t *testing.T) {
	q := loopQuota(t, Options{})
	for _, name := range []string{"a b\tc", "new\nline", `back\slash`, "ünïcødé", "-rf", strings.Repeat("n", 200)} {
		ws := provision(t, q, name, testQuota)
		if err := os.WriteFile(filepath.Join(ws, "f"), []byte(name), 0o644); err != nil {
			t.Errorf("%q: %v", name, err)
		}
		if img := q.imagePath(ws); filepath.Dir(img) != q.dir {
			t.Errorf("%q: image %q outside %s", name, img, q.dir)
		}
	}
	if n := len(mountsUnder(t, q.base)); n != 6 {
		t.Errorf("%d mounts, want 6", n)
	}
}

func TestConcurrentProvision(t *testing.T) {
	q := loopQuota(t, Options{})
	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n)
	paths := make([]string, n)
	for i := range n {
		paths[i] = filepath.Join(q.base, "sessions", fmt.Sprintf("c%d.tag", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = q.Provision(paths[i], testQuota, -1, -1)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Provision %d: %v", i, err)
		}
	}
	devs := loopDevicesUnder(q.base)
	if len(devs) != n {
		t.Errorf("%d loop devices for %d workspaces: %v", len(devs), n, devs)
	}
	for i := range n {
		var sfs unix.Statfs_t
		if err := unix.Statfs(paths[i], &sfs); err != nil || sfs.Type != unix.EXT4_SUPER_MAGIC {
			t.Errorf("%s: not its own filesystem (type %#x, %v)", paths[i], sfs.Type, err)
		}
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = q.Release(paths[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Release %d: %v", i, err)
		}
	}
}

func TestSweepReleasesWhatDeadServersLeft(t *testing.T) {
	alive := map[string]bool{"live-1": true, "sweeper-1": true}
	opts := func(owner string) Options {
		return Options{Server: owner, Alive: func(o string) bool { return alive[o] }}
	}
	dead := loopQuota(t, opts("dead-1"))
	base := dead.base
	live, err := New(base, nil, opts("live-1"))
	if err != nil {
		t.Fatal(err)
	}
	leaked := []string{
		filepath.Join(base, "sessions", "s.dead"),
		filepath.Join(base, "sessions", "odd name\nhere"),
	}
	for _, ws := range leaked {
		if err := dead.Provision(ws, testQuota, -1, -1); err != nil {
			t.Fatal(err)
		}
	}
	// After a reboot the mount is gone but the image and the immutable mount
	// point stay.
	rebooted := filepath.Join(base, "sessions", "rebooted.dead")
	if err := dead.Provision(rebooted, testQuota, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(rebooted, 0); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(base, "sessions", "s.live")
	if err := live.Provision(kept, testQuota, -1, -1); err != nil {
		t.Fatal(err)
	}

	sweeper, err := New(base, nil, opts("sweeper-1"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := sweeper.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("Sweep released %d workspaces, want 3", n)
	}
	for _, ws := range append(leaked, rebooted) {
		// Gone: unmounted, no longer immutable, and removed (the dead
		// server cannot remove its directories itself).
		if _, err := os.Lstat(ws); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Sweep the workspace directory %q remains: %v", ws, err)
		}
	}
	if _, err := os.Stat(dead.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead server's state directory is still there: %v", err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(kept, &sfs); err != nil || sfs.Type != unix.EXT4_SUPER_MAGIC {
		t.Errorf("Sweep touched a live server's workspace (type %#x, %v)", sfs.Type, err)
	}
	if err := live.Release(kept); err != nil {
		t.Fatal(err)
	}
}

// A dead server's workspaces are found by their loop devices even when
// their state directory is gone (the base path removed while they were
// mounted): the watchdog's ReleaseOwner and the next server's Sweep release
// the mount and the device and remove the directory.
func TestSweepWithoutStateDirectory(t *testing.T) {
	for _, c := range []struct {
		name  string
		sweep func(base string) (int, error)
	}{
		{"next server", func(base string) (int, error) {
			q, err := New(base, nil, Options{Server: "sweeper-1", Alive: func(o string) bool { return o == "sweeper-1" }})
			if err != nil {
				return 0, err
			}
			return q.Sweep()
		}},
		{"watchdog", func(base string) (int, error) { return ReleaseServer(base, "dead-1", nil) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dead := loopQuota(t, Options{Server: "dead-1", Alive: func(string) bool { return false }})
			ws := filepath.Join(dead.base, "sessions", "s.dead")
			if err := dead.Provision(ws, testQuota, -1, -1); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(dead.dir); err != nil {
				t.Fatal(err)
			}
			n, err := c.sweep(dead.base)
			if err != nil || n != 1 {
				t.Fatalf("released %d, %v; want 1", n, err)
			}
			if _, err := os.Lstat(ws); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the workspace directory remains: %v", err)
			}
		})
	}
}

// A clean stop leaves no state directory of its server behind.
func TestCloseRemovesStateDirectory(t *testing.T) {
	q := loopQuota(t, Options{})
	ws := filepath.Join(q.base, "sessions", "s.tag")
	if err := q.Provision(ws, testQuota, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close with a workspace still provisioned: %v", err)
	}
	if _, err := os.Stat(q.dir); err != nil {
		t.Errorf("Close removed the state of a provisioned workspace: %v", err)
	}
	if err := q.Release(ws); err != nil {
		t.Fatal(err)
	}
	os.Remove(ws)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(q.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state directory outlived Close: %v", err)
	}
}

// Should Podman ever see the directory under the mount (a server in a mount
// namespace of its own), chown and writes fail instead of filling the disk.
func TestDirectoryUnderTheMountFailsClosed(t *testing.T) {
	q := loopQuota(t, Options{})
	ws := provision(t, q, "under.tag", testQuota)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare(1) from util-linux")
	}
	script := `umount -l "$1" && { chown 1000 "$1" 2>&1 && echo CHOWNED; echo x > "$1/f" 2>&1 && echo WROTE; true; }`
	out, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", ws).CombinedOutput()
	if err != nil {
		t.Fatalf("unshare: %v: %s", err, out)
	}
	if s := string(out); strings.Contains(s, "CHOWNED") || strings.Contains(s, "WROTE") || !strings.Contains(s, "not permitted") {
		t.Errorf("the directory under the workspace mount accepted chown or writes:\n%s", s)
	}
}

// Provision and Release times by quota: 1 GiB is the default
// (volumes.session_quota), 10 GiB the default ceiling.
func BenchmarkProvisionRelease(b *testing.B) {
	requireE2E(b)
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	base := b.TempDir()
	q, err := New(base, nil, Options{})
	if err != nil || !q.Mechanism().Enforced() {
		b.Skipf("no loop support: %v %v", err, q.Mechanism())
	}
	if err := os.MkdirAll(filepath.Join(base, "sessions"), 0o711); err != nil {
		b.Fatal(err)
	}
	for _, size := range []int64{16 << 20, 1 << 30, 10 << 30} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			var prov, rel time.Duration
			for i := range b.N {
				ws := filepath.Join(base, "sessions", fmt.Sprintf("b%d-%d", size, i))
				t0 := time.Now()
				if err := q.Provision(ws, size, 2147484647, 2147484647); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := q.Release(ws); err != nil {
					b.Fatal(err)
				}
				rel += time.Since(t1)
				prov += t1.Sub(t0)
			}
			b.ReportMetric(float64(prov.Microseconds())/float64(b.N)/1000, "provision-ms")
			b.ReportMetric(float64(rel.Microseconds())/float64(b.N)/1000, "release-ms")
		})
	}
}
