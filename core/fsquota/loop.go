package fsquota

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-forge/mcp-forge/core/mountinfo"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Mount flags of a workspace filesystem. nosuid and nodev: a set-id file or
// device node that a sandbox creates must mean nothing on the host. Not
// noexec: sandboxes legitimately run what they put in their workspace
// (scripts, a venv's interpreter link, compiled extension modules that are
// mmapped executable), their /tmp is executable anyway, and the host never
// runs workspace files. noatime: reads need not write.
const mountFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOATIME

// mountData: discard punches freed blocks out of the sparse image, so the
// host gets back what a sandbox deletes; noinit_itable keeps the kernel from
// zeroing inode tables in the background, which would allocate host blocks
// for tables the sparse image already reads as zeros.
const mountData = "discard,noinit_itable"

// fsImmutableFL is FS_IMMUTABLE_FL from linux/fs.h.
const fsImmutableFL = 0x10

// loopMajor is LOOP_MAJOR from linux/major.h.
const loopMajor = 7

// mkfsArgs formats an image for speed and size: no journal (a workspace does
// not outlive a crash of its server: Sweep deletes it), no reserved blocks
// (the quota is all the sandbox's), no resize inode (never grown), 4 KiB
// blocks (the loop device's block size, for direct I/O), one inode per
// 16 KiB whatever the size (mke2fs would give a small filesystem four times
// as many, a sixteenth of its space), and inode tables left unwritten (the
// sparse file reads as zeros).
func mkfsArgs(img string) []string {
	return []string{"-q", "-F", "-b", "4096", "-i", "16384", "-m", "0", "-O", "^has_journal,^resize_inode",
		"-E", "nodiscard,lazy_itable_init=1", img}
}

// mkfsFallbacks are where mkfs.ext4 lives when it is not on PATH.
var mkfsFallbacks = []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"}

// findMkfs locates mkfs.ext4, which is often in an sbin directory that a
// non-login PATH lacks.
func findMkfs() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, p := range mkfsFallbacks {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("mkfs.ext4 not found on PATH, /usr/sbin or /sbin (install e2fsprogs: apt-get install e2fsprogs)")
}

func mkfs(bin, img string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, mkfsArgs(img)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, filepath.Base(img), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// provisionLoop makes path the mount point of a fresh ext4 filesystem of
// size bytes kept in img.
func provisionLoop(mkfsBin, img, path string, size int64, uid, gid int) (err error) {
	if err := os.MkdirAll(filepath.Dir(img), 0o700); err != nil {
		return fmt.Errorf("quota state directory: %w", err)
	}
	if err := os.Mkdir(path, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create the workspace directory: %w", err)
	}
	// Every later step works on this descriptor, so a path component swapped
	// for a symlink meanwhile cannot redirect the mount.
	dfd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return fmt.Errorf("%s is not a directory (a symlink or file is in the way): %w", path, err)
		}
		return fmt.Errorf("open the workspace directory: %w", err)
	}
	defer unix.Close(dfd)
	if root, err := isMountRoot(dfd); err != nil {
		return err
	} else if root {
		return fmt.Errorf("%w (provisioned already, or another filesystem is mounted there): release it first", ErrMountpoint)
	}
	if empty, err := dirEmpty(dfd); err != nil {
		return err
	} else if !empty {
		return fmt.Errorf("%w: a filesystem mounted over it would hide its files outside any quota; remove them first", ErrNotEmpty)
	}

	size &^= 4095
	// The mount point is recorded first, so that whatever step a crash
	// interrupts, Sweep can find the directory and undo it.
	side := sidecar(img)
	if err := os.WriteFile(side, []byte(path), 0o600); err != nil {
		return fmt.Errorf("record the workspace: %w", err)
	}
	mounted := false
	immutable := false
	defer func() {
		if err == nil {
			return
		}
		if mounted {
			_, _ = unmount(path)
		}
		if immutable {
			_ = setImmutableAt(dfd, false)
		}
		os.Remove(img)
		os.Remove(side)
	}()
	os.Remove(img) // a stale image of an earlier failed attempt of this server
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create the filesystem image: %w", err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return fmt.Errorf("size the filesystem image: %w", err)
	}
	if err := mkfs(mkfsBin, img); err != nil {
		return err
	}

	// The directory under the mount is made immutable: should Podman ever
	// see it instead of the mounted filesystem (a server in a mount namespace
	// of its own, a mount gone behind our back), chown (the `U` bind option)
	// and every write into it fail, instead of filling the host disk.
	// A filesystem without the flag, or a server without CAP_LINUX_IMMUTABLE,
	// goes without this second fence: Detect already refuses the known way
	// to lose the mount (a mount namespace of its own).
	if err := setImmutableAt(dfd, true); err == nil {
		immutable = true
	} else if !isNotSupported(err) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("make the mount point immutable: %w", err)
	}

	loop, dev, err := attachLoop(img)
	if err != nil {
		return err
	}
	// With autoclear the device detaches when its last user goes: this
	// descriptor now, the mount once it is made.
	defer unix.Close(loop)
	if err := unix.Mount(dev, fmt.Sprintf("/proc/self/fd/%d", dfd), "ext4", mountFlags, mountData); err != nil {
		return fmt.Errorf("mount %s on the workspace: %w", dev, err)
	}
	mounted = true

	rfd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the mounted workspace: %w", err)
	}
	defer unix.Close(rfd)
	var st, lst unix.Stat_t
	if err := unix.Fstat(rfd, &st); err != nil {
		return fmt.Errorf("stat the mounted workspace: %w", err)
	}
	if err := unix.Fstat(loop, &lst); err != nil || st.Dev != lst.Rdev {
		return fmt.Errorf("%s is not the filesystem just mounted on it (something raced the mount)", path)
	}
	// mkfs makes lost+found; a workspace starts empty.
	if err := unix.Unlinkat(rfd, "lost+found", unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove lost+found: %w", err)
	}
	if err := unix.Fchmod(rfd, 0o711); err != nil {
		return fmt.Errorf("chmod the workspace: %w", err)
	}
	if uid >= 0 || gid >= 0 {
		if err := unix.Fchown(rfd, uid, gid); err != nil {
			return fmt.Errorf("chown the workspace to %d:%d: %w", uid, gid, err)
		}
	}
	return nil
}

// attachLoop binds img to a free loop device with autoclear set, so that no
// device outlives its last user, and returns an open descriptor of it.
func attachLoop(img string) (int, string, error) {
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("open /dev/loop-control: %w", err)
	}
	defer unix.Close(ctl)
	imgFd, err := unix.Open(img, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("open the filesystem image: %w", err)
	}
	defer unix.Close(imgFd) // the device keeps its own reference
	var last error
	// GET_FREE hands the same device to callers racing for it (goroutines
	// here, losetup elsewhere); all but one then get EBUSY and ask again.
	for range 64 {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return -1, "", fmt.Errorf("find a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, "", fmt.Errorf("open %s: %w", dev, err)
		}
		err = configureLoop(fd, imgFd, img)
		if err == nil {
			return fd, dev, nil
		}
		unix.Close(fd)
		if !errors.Is(err, unix.EBUSY) {
			return -1, "", fmt.Errorf("attach %s to %s: %w", filepath.Base(img), dev, err)
		}
		last = err
	}
	return -1, "", fmt.Errorf("attach %s: no loop device stayed free: %w", filepath.Base(img), last)
}

// loopConfigure is false to exercise the path of kernels before 5.8.
var loopConfigure = true

// configureLoop binds imgFd to the loop device fd: LOOP_CONFIGURE sets the
// file and the autoclear flag in one step (Linux 5.8+; before, it is an
// unknown ioctl: EINVAL or ENOTTY); older kernels need LOOP_SET_FD then
// LOOP_SET_STATUS64.
func configureLoop(fd, imgFd int, img string) error {
	var info unix.LoopInfo64
	info.Flags = unix.LO_FLAGS_AUTOCLEAR
	copy(info.File_name[:len(info.File_name)-1], img)
	unknown := func(err error) bool { return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) }
	if loopConfigure {
		// Direct I/O: the image's pages are not cached a second time under
		// the workspace filesystem's own cache (and writes measured twice as
		// fast here). Some backing filesystems refuse it: retry without.
		cfg := unix.LoopConfig{Fd: uint32(imgFd), Size: 4096, Info: info}
		cfg.Info.Flags |= unix.LO_FLAGS_DIRECT_IO
		err := unix.IoctlLoopConfigure(fd, &cfg)
		if err == nil || !unknown(err) {
			return err
		}
		cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
		if err := unix.IoctlLoopConfigure(fd, &cfg); err == nil || !unknown(err) {
			return err
		}
	}
	if err := unix.IoctlSetInt(fd, unix.LOOP_SET_FD, imgFd); err != nil {
		return err
	}
	if err := unix.IoctlLoopSetStatus64(fd, &info); err != nil {
		_ = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
		return fmt.Errorf("set autoclear: %w", err)
	}
	return nil
}

// releaseLoop undoes provisionLoop. It refuses to unmount a filesystem that
// is not img (someone else's mount on the path).
func releaseLoop(img, path string) (lazy bool, err error) {
	dfd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, removeImage(img)
	case err != nil:
		return false, fmt.Errorf("open the workspace: %w", err)
	}
	root, err := isMountRoot(dfd)
	if err == nil && root {
		var backing string
		backing, err = backingFileAt(dfd)
		if err == nil && backing != img {
			err = fmt.Errorf("%s is mounted from %q, not from its quota image %s; left alone", path, backing, img)
		}
	}
	unix.Close(dfd)
	if err != nil {
		return false, err
	}
	if root {
		if lazy, err = unmount(path); err != nil {
			return false, err
		}
	}
	if err := clearImmutable(path); err != nil {
		return lazy, err
	}
	return lazy, removeImage(img)
}

func removeImage(img string) error {
	var errs []error
	for _, p := range []string{img, sidecar(img)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unmount detaches the filesystem at path; if a host process still uses it
// the unmount is lazy (the kernel finishes it when the last user goes).
func unmount(path string) (lazy bool, err error) {
	err = unix.Unmount(path, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		lazy = true
		err = unix.Unmount(path, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
	}
	if err != nil {
		return lazy, fmt.Errorf("unmount %s: %w", path, err)
	}
	return lazy, nil
}

// clearImmutable lets the (unmounted) workspace directory be removed again.
func clearImmutable(path string) error {
	dfd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open the workspace: %w", err)
	}
	defer unix.Close(dfd)
	if root, err := isMountRoot(dfd); err != nil || root {
		return err // still covered (a lazy unmount elsewhere, or a stacked mount): nothing to clear
	}
	if err := setImmutableAt(dfd, false); err != nil && !isNotSupported(err) {
		return fmt.Errorf("clear the immutable flag of %s: %w", path, err)
	}
	return nil
}

// setImmutableAt sets or clears FS_IMMUTABLE_FL on the directory dfd names.
func setImmutableAt(dfd int, on bool) error {
	fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	want := flags &^ fsImmutableFL
	if on {
		want |= fsImmutableFL
	}
	if want == flags {
		return nil
	}
	return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(want))
}

// isMountRoot reports whether the directory dfd names is the root of a
// mount (statx knows since Linux 5.8; before, a device change from the
// parent tells, missing only bind mounts within one filesystem).
func isMountRoot(dfd int) (bool, error) {
	var stx unix.Statx_t
	if err := unix.Statx(dfd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &stx); err != nil {
		return false, fmt.Errorf("statx the workspace: %w", err)
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	var st, parent unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return false, err
	}
	if err := unix.Fstatat(dfd, "..", &parent, 0); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev || st.Ino == parent.Ino, nil
}

func dirEmpty(dfd int) (bool, error) {
	fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("read the workspace directory: %w", err)
	}
	f := os.NewFile(uintptr(fd), "workspace")
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}

// backingFileAt names the image behind the loop device that the mount at
// dfd lives on ("" when it is not a loop device).
func backingFileAt(dfd int) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return "", err
	}
	return backingFile(unix.Major(st.Dev), unix.Minor(st.Dev))
}

// backingFile names the file behind loop device major:minor, without the
// " (deleted)" the kernel appends once it is unlinked.
func backingFile(major, minor uint32) (string, error) {
	if major != loopMajor {
		return "", nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/loop/backing_file", major, minor))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil // detached meanwhile
	}
	if err != nil {
		return "", fmt.Errorf("loop device %d:%d: %w", major, minor, err)
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), " (deleted)"), nil
}

// sweepServer releases every workspace of a dead server whose state is in dir:
// mounts of its images, mount points left immutable (after a reboot, say),
// loop devices still attached, and then the images.
func sweepServer(dir string, log hclog.Logger) (int, error) {
	var errs []error
	released := map[string]bool{} // image paths
	points := map[string]bool{}   // workspace directories, removed once bare
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	prefix := dir + "/"
	// Topmost mounts last in mountinfo: undo them first.
	for i := len(mounts) - 1; i >= 0; i-- {
		m := mounts[i]
		backing, err := backingFile(m.Major, m.Minor)
		if err != nil || !strings.HasPrefix(backing, prefix) {
			continue
		}
		if err := sweepMount(m, backing); err != nil {
			errs = append(errs, err)
			continue
		}
		released[backing] = true
		points[m.MountPoint] = true
		log.Info("released a workspace filesystem left by a dead server", "path", m.MountPoint, "image", backing)
	}
	sides, _ := filepath.Glob(filepath.Join(dir, "*.path"))
	for _, side := range sides {
		b, err := os.ReadFile(side)
		if err != nil || len(b) == 0 || !filepath.IsAbs(string(b)) {
			continue
		}
		if err := clearImmutable(string(b)); err != nil {
			errs = append(errs, err)
		}
		released[strings.TrimSuffix(side, ".path")+".img"] = true
		points[string(b)] = true
	}
	detachLoops(prefix)
	// The workspace directories go too: the dead server cannot remove
	// them, and nothing else knows they were its.
	base := filepath.Dir(filepath.Dir(dir)) // dir is <base>/.quota/<server>
	for p := range points {
		if !strings.HasPrefix(p, base+"/") {
			continue // recorded elsewhere: not a directory of this base path to remove
		}
		if err := removeMountPoint(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
	}
	return len(released), errors.Join(errs...)
}

// removeMountPoint removes the directory a released workspace filesystem
// was mounted on. It is empty (immutable while the filesystem was mounted
// over it); one that is still covered (a lazy unmount elsewhere, a stacked
// mount) or holds files was not ours alone and is left.
func removeMountPoint(path string) error {
	dfd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove the workspace directory %s: %w", path, err)
	}
	root, err := isMountRoot(dfd)
	unix.Close(dfd)
	if err != nil || root {
		return err
	}
	if err := unix.Rmdir(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove the workspace directory %s: %w", path, err)
	}
	return nil
}

// sweepMount unmounts one leaked workspace mount, after checking that the
// topmost mount at its path is still that filesystem.
func sweepMount(m mountinfo.Entry, backing string) error {
	dfd, err := unix.Open(m.MountPoint, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sweep %s: %w", m.MountPoint, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(dfd, &st)
	unix.Close(dfd)
	if err != nil {
		return fmt.Errorf("sweep %s: %w", m.MountPoint, err)
	}
	if unix.Major(st.Dev) != m.Major || unix.Minor(st.Dev) != m.Minor {
		return fmt.Errorf("sweep %s: another filesystem is mounted over the workspace of %s; left alone", m.MountPoint, backing)
	}
	if _, err := unmount(m.MountPoint); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	return clearImmutable(m.MountPoint)
}

// detachLoops clears loop devices bound to files under prefix that nothing
// mounts (left when a server died between LOOP_SET_FD and setting autoclear
// on a kernel without LOOP_CONFIGURE).
func detachLoops(prefix string) {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !strings.HasPrefix(strings.TrimSuffix(string(b), "\n"), prefix) {
			continue
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		if fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
			_ = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0) // EBUSY while mounted: fine
			unix.Close(fd)
		}
	}
}
