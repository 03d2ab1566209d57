package fsquota

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/mountinfo"
	"github.com/mcp-forge/mcp-forge/core/procid"

	"golang.org/x/sys/unix"
)

// Detect reports the quota mechanism available for workspaces under base,
// and why stronger ones are not. It probes the loop mechanism for real (a
// 1 MiB filesystem mounted and released under <base>/.quota), so a host
// where it cannot work reports none.
func Detect(base string) Mechanism {
	abs, err := filepath.Abs(base)
	if err != nil {
		return Mechanism{Kind: KindNone, Notes: []string{fmt.Sprintf("base path %q: %v", base, err)}}
	}
	server := procid.Self()
	m, _ := detect(abs, server)
	os.Remove(filepath.Join(abs, stateDir, server)) // the probe's, if empty: a server may own it too
	return m
}

func detect(base, server string) (Mechanism, string) {
	bin, fence, err := loopUsable(base, server)
	if err == nil {
		m := Mechanism{Kind: KindLoop, Detail: "an ext4 image per workspace, loop-mounted; " + bin}
		if fence != nil {
			m.Notes = append(m.Notes, fmt.Sprintf("fence: the directory under each workspace mount cannot be made immutable (%v), so a Podman service that did not see the mount would write to the host disk unbounded", fence))
		}
		return m, bin
	}
	notes := []string{"loop: " + err.Error()}
	if n := projectQuotaNote(base); n != "" {
		notes = append(notes, n)
	}
	return Mechanism{Kind: KindNone, Notes: notes}, ""
}

// loopUsable checks what the loop mechanism needs, then provisions and
// releases a small workspace to be sure. fence says why mount points cannot
// be made immutable (nil: they can).
func loopUsable(base, server string) (bin string, fence, err error) {
	fd, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return "", nil, errors.New("/dev/loop-control is missing (load the loop module: modprobe loop; in a container, pass the loop devices in)")
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
		return "", nil, errors.New("needs root (CAP_SYS_ADMIN) and /dev/loop-control; rootless servers get no kernel-enforced workspace quota")
	case err != nil:
		return "", nil, fmt.Errorf("open /dev/loop-control: %w", err)
	}
	unix.Close(fd)
	bin, err = findMkfs()
	if err != nil {
		return "", nil, err
	}
	// Podman must see the workspace filesystems: a server in a mount
	// namespace of its own (systemd PrivateTmp, ProtectSystem, ...) mounts
	// where the Podman service cannot see. (Where init's namespace cannot be
	// read, as in some containers, the immutable fence is what remains.)
	self, err1 := os.Readlink("/proc/self/ns/mnt")
	pid1, err2 := os.Readlink("/proc/1/ns/mnt")
	if err1 == nil && err2 == nil && self != pid1 {
		return "", nil, fmt.Errorf("this server runs in a mount namespace of its own (%s, init has %s), so the Podman service would not see workspace filesystems; run it in the host's mount namespace (no PrivateTmp/ProtectSystem/PrivateMounts in its systemd unit)", self, pid1)
	}
	fence, err = probe(base, server, bin)
	if err != nil {
		return "", nil, fmt.Errorf("probe under %s failed: %w", base, err)
	}
	return bin, fence, nil
}

func probe(base, server, bin string) (fence, err error) {
	dir := filepath.Join(base, stateDir, server)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	b := make([]byte, 6)
	rand.Read(b)
	mnt := filepath.Join(dir, "probe-"+hex.EncodeToString(b))
	img := filepath.Join(dir, imageName(mnt))
	if err := os.Mkdir(mnt, 0o711); err != nil {
		return nil, err
	}
	if fd, err := unix.Open(mnt, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		if fence = setImmutableAt(fd, true); fence == nil {
			fence = setImmutableAt(fd, false)
		}
		unix.Close(fd)
	}
	err = provisionLoop(bin, img, mnt, MinSize, -1, -1)
	if err == nil {
		_, err = releaseLoop(img, mnt)
	}
	if rerr := os.Remove(mnt); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return fence, err
}

// projectQuotaNote says whether the base path's filesystem has project
// quotas (XFS or ext4 mounted with prjquota), a mechanism this package
// detects but does not use.
func projectQuotaNote(base string) string {
	var sfs unix.Statfs_t
	if err := unix.Statfs(base, &sfs); err != nil {
		return ""
	}
	var fs string
	switch sfs.Type {
	case unix.XFS_SUPER_MAGIC:
		fs = "xfs"
	case unix.EXT4_SUPER_MAGIC:
		fs = "ext4"
	default:
		return fmt.Sprintf("project-quota: %s is on a filesystem without project quotas (need xfs or ext4)", base)
	}
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	var st unix.Stat_t
	if unix.Stat(base, &st) != nil {
		return ""
	}
	for _, m := range mounts {
		if m.Major != unix.Major(st.Dev) || m.Minor != unix.Minor(st.Dev) {
			continue
		}
		for _, o := range strings.Split(m.SuperOptions, ",") {
			if o == "prjquota" || o == "pquota" || o == "prjjquota" || strings.HasPrefix(o, "prjjquota=") {
				return fmt.Sprintf("project-quota: %s (%s) has project quotas, which this build does not use yet", base, fs)
			}
		}
	}
	return fmt.Sprintf("project-quota: %s (%s) is mounted without project quotas (mount option prjquota)", base, fs)
}
