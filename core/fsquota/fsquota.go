// Package fsquota gives each sandbox workspace a size limit that the kernel
// enforces: the workspace directory becomes the mount point of a filesystem
// of its own (a sparse ext4 image, loop-mounted), so a write past the quota
// fails with ENOSPC inside the sandbox whatever the writer does (a file that
// is unlinked while open included), and the host disk holds at most the
// quota per workspace.
//
// A directory walk cannot bound a workspace: a file written and unlinked
// while open is invisible to it and still fills the host disk.
//
// Layout under the base path:
//
//	<base>/.quota/<server>/<name>-<hash>.img   the filesystem image (sparse)
//	<base>/.quota/<server>/<name>-<hash>.path  the workspace it is mounted on
//
// <server> names the server process that provisioned the workspace, so that
// Sweep releases only what dead servers left behind, never the workspaces of
// another live server sharing the base path.
//
// Use: New once at start (it probes the host), Sweep after the orphan
// containers of dead servers are removed, Provision before anything is
// written into a new workspace and before its container is created, and
// Release after the container is removed, then remove the directory.
package fsquota

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/mountinfo"
	"github.com/mcp-forge/mcp-forge/core/procid"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Kind names a quota mechanism.
type Kind string

const (
	// KindLoop is a loop-mounted ext4 image per workspace.
	KindLoop Kind = "loop"
	// KindNone means no kernel-enforced quota is available.
	KindNone Kind = "none"
)

// Mechanism is what Detect found: the mechanism Provision will use, and why
// each stronger one is not available (for `mcp-forge doctor`).
type Mechanism struct {
	Kind   Kind
	Detail string   // how the chosen mechanism works here
	Notes  []string // "loop: needs root (CAP_SYS_ADMIN) and /dev/loop-control", ...
}

// Enforced reports whether the kernel enforces workspace quotas.
func (m Mechanism) Enforced() bool { return m.Kind != KindNone }

func (m Mechanism) String() string {
	s := string(m.Kind)
	if m.Detail != "" {
		s += " (" + m.Detail + ")"
	}
	if len(m.Notes) > 0 {
		s += "; " + strings.Join(m.Notes, "; ")
	}
	return s
}

// MinSize is the smallest quota Provision accepts: below it ext4's own
// metadata would leave almost nothing for files.
const MinSize = 1 << 20

// ErrUnenforced is wrapped by Provision's error in Required mode when no
// mechanism can enforce the quota.
var ErrUnenforced = errors.New("the workspace quota cannot be enforced on this host")

// ErrMountpoint is wrapped by Provision's error when the workspace path is
// already a mount point (provisioned twice, or someone else's mount).
var ErrMountpoint = errors.New("the workspace path is already a mount point")

// ErrNotEmpty is wrapped by Provision's error when the workspace directory
// already holds files: the mount would hide them outside any quota.
var ErrNotEmpty = errors.New("the workspace directory is not empty")

// Options tune a Quota.
type Options struct {
	// Required makes Provision fail (wrapping ErrUnenforced) when no mechanism
	// can enforce the quota, instead of creating a plain directory.
	Required bool
	// Server names this server process; default "<pid>-<start time>" of this
	// process (the same form as sandbox.ServerID). Letters, digits, '.', '_'
	// and '-' only.
	Server string
	// Alive reports whether the server named by a server still runs; Sweep
	// releases only the workspaces of servers that are not alive. Default:
	// servers of the form "<pid>-<start time>" checked against /proc.
	Alive func(server string) bool
	// Mechanism, when set, is used as if New had detected it, without
	// probing the host: unit tests set Kind KindNone to touch no loop device
	// and mount nothing, whatever the host offers. KindLoop still needs
	// mkfs.ext4 (looked up, not run). nil: New probes for real (a 1 MiB
	// filesystem attached, mounted and released under the base path).
	Mechanism *Mechanism
}

// Quota provisions and releases size-limited workspaces under one base path.
type Quota struct {
	base     string
	dir      string // <base>/.quota/<server>
	server   string
	required bool
	alive    func(string) bool
	log      hclog.Logger
	mech     Mechanism
	mkfs     string

	mu   sync.Mutex
	busy map[string]bool // workspace paths being provisioned or released
}

var ownerPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// New detects the mechanism available for base (probing it for real) and
// returns a Quota that uses it.
func New(base string, log hclog.Logger, o Options) (*Quota, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	abs, err := filepath.Abs(base)
	if err != nil {
		return nil, fmt.Errorf("quota base path %q: %w", base, err)
	}
	if o.Server == "" {
		o.Server = procid.Self()
	}
	if !ownerPattern.MatchString(o.Server) || o.Server == "." || o.Server == ".." {
		return nil, fmt.Errorf("quota server %q: use 1-64 letters, digits, '.', '_' or '-'", o.Server)
	}
	if o.Alive == nil {
		o.Alive = procid.Alive
	}
	q := &Quota{
		base: abs, dir: filepath.Join(abs, stateDir, o.Server), server: o.Server, required: o.Required,
		alive: o.Alive, log: log, busy: map[string]bool{},
	}
	switch {
	case o.Mechanism == nil:
		q.mech, q.mkfs = detect(abs, o.Server)
	case o.Mechanism.Kind == KindNone:
		q.mech = *o.Mechanism
	case o.Mechanism.Kind == KindLoop:
		if q.mkfs, err = findMkfs(); err != nil {
			return nil, fmt.Errorf("quota mechanism %s: %w", KindLoop, err)
		}
		q.mech = *o.Mechanism
	default:
		return nil, fmt.Errorf("quota mechanism %q: use %s or %s", o.Mechanism.Kind, KindLoop, KindNone)
	}
	if q.mech.Enforced() {
		log.Debug("workspace quotas enforced by the kernel", "mechanism", q.mech.String())
	} else if o.Required {
		log.Warn("workspace quotas cannot be enforced; sessions will be refused", "why", q.mech.String())
	} else {
		log.Warn("workspace quotas are not enforced by the kernel", "why", q.mech.String())
	}
	return q, nil
}

// stateDir holds the images, outside every workspace so that no sandbox can
// reach the raw filesystem image.
const stateDir = ".quota"

// Mechanism is what New detected.
func (q *Quota) Mechanism() Mechanism { return q.mech }

// Enforced reports whether Provision gives workspaces a kernel-enforced size.
func (q *Quota) Enforced() bool { return q.mech.Enforced() }

// Server is the server this Quota records on its images.
func (q *Quota) Server() string { return q.server }

// Provision creates path as an empty directory of at most size bytes whose
// root belongs to uid:gid (-1 keeps root, for Podman's `U` bind option to
// chown). With the loop mechanism the directory is the mount point of its
// own ext4 filesystem; with none it is a plain directory (or, in Required
// mode, an error wrapping ErrUnenforced). The parent of path must exist.
// Call Release(path) when the workspace is no longer used.
func (q *Quota) Provision(path string, size int64, uid, gid int) (err error) {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("provision workspace %q: the path must be absolute", path)
	}
	path = filepath.Clean(path)
	if size < MinSize {
		return fmt.Errorf("provision workspace %s: quota %d bytes is below the minimum of %d (1 MiB); raise volumes.session_quota", path, size, MinSize)
	}
	if !q.mech.Enforced() {
		if q.required {
			return fmt.Errorf("provision workspace %s: %w: %s", path, ErrUnenforced, q.mech.String())
		}
		if err := os.Mkdir(path, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("provision workspace: %w", err)
		}
		if uid >= 0 || gid >= 0 {
			return os.Lchown(path, uid, gid)
		}
		return nil
	}
	if err := q.claim(path); err != nil {
		return err
	}
	defer q.unclaim(path)
	start := time.Now()
	img := q.imagePath(path)
	if err := provisionLoop(q.mkfs, img, path, size, uid, gid); err != nil {
		return fmt.Errorf("provision workspace %s: %w", path, err)
	}
	q.log.Debug("workspace provisioned", "path", path, "bytes", size, "image", img, "took", time.Since(start))
	return nil
}

// Release unmounts the workspace filesystem at path (lazily if something on
// the host still uses it), detaches its loop device and deletes its image.
// The directory itself stays, empty: remove it afterwards (os.RemoveAll
// before Release fails on the mount point). Releasing a path that was never
// provisioned, or twice, is not an error.
func (q *Quota) Release(path string) error {
	if !q.mech.Enforced() {
		return nil
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("release workspace %q: the path must be absolute", path)
	}
	path = filepath.Clean(path)
	if err := q.claim(path); err != nil {
		return err
	}
	defer q.unclaim(path)
	start := time.Now()
	lazy, err := releaseLoop(q.imagePath(path), path)
	if err != nil {
		return fmt.Errorf("release workspace %s: %w", path, err)
	}
	q.log.Debug("workspace released", "path", path, "lazy", lazy, "took", time.Since(start))
	return nil
}

// Sweep releases the workspaces that servers no longer running left under
// the base path (their mounts, loop devices and images), and returns how
// many it released. Call it at start-up, after the orphan containers are
// removed.
func (q *Quota) Sweep() (int, error) {
	root := filepath.Join(q.base, stateDir)
	servers, err := ownersUnder(root)
	if err != nil {
		return 0, fmt.Errorf("sweep workspace quotas: %w", err)
	}
	n := 0
	var errs []error
	for _, server := range servers {
		if server == q.server || q.alive(server) {
			continue
		}
		k, err := sweepServer(filepath.Join(root, server), q.log)
		n += k
		if err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// ownersUnder names the servers that have workspace state under root
// (<base>/.quota): a directory of their own, or a loop device, mounted or
// not, whose image lies in one. The kernel keeps a device's backing path
// after the image is deleted, so a mount whose state directory someone
// removed (an `rm -rf` of the base path while it was mounted) is still
// found and released.
func ownersUnder(root string) ([]string, error) {
	seen := map[string]bool{}
	ents, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		if e.IsDir() {
			seen[e.Name()] = true
		}
	}
	for _, backing := range LoopBackings() {
		rest, ok := strings.CutPrefix(backing, root+"/")
		if !ok {
			continue
		}
		if server, _, ok := strings.Cut(rest, "/"); ok && ownerPattern.MatchString(server) && server != "." && server != ".." {
			seen[server] = true
		}
	}
	out := make([]string, 0, len(seen))
	for o := range seen {
		out = append(out, o)
	}
	sort.Strings(out)
	return out, nil
}

// Close removes this server's state directory once its workspaces are all
// released (a clean stop): a directory left per server that ever ran would
// pile up under the base path. One still holding images stays for Sweep.
func (q *Quota) Close() error {
	if err := os.Remove(q.dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("remove the quota state directory: %w", err)
	}
	return nil
}

// ReleaseServer releases the workspaces one server that is no longer
// running left under base. The watchdog of a killed server calls it once
// the server's containers are gone, so the server's filesystems do not wait
// for the next server to start on that base path.
func ReleaseServer(base, server string, log hclog.Logger) (int, error) {
	if !ownerPattern.MatchString(server) || server == "." || server == ".." {
		return 0, fmt.Errorf("quota server %q: use 1-64 letters, digits, '.', '_' or '-'", server)
	}
	if procid.Alive(server) {
		return 0, fmt.Errorf("server %s is still running: its workspaces are in use", server)
	}
	abs, err := filepath.Abs(base)
	if err != nil {
		return 0, fmt.Errorf("quota base path %q: %w", base, err)
	}
	dir := filepath.Join(abs, stateDir, server)
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return sweepServer(dir, log)
}

func (q *Quota) claim(path string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.busy[path] {
		return fmt.Errorf("workspace %s is being provisioned or released by another call", path)
	}
	q.busy[path] = true
	return nil
}

func (q *Quota) unclaim(path string) {
	q.mu.Lock()
	delete(q.busy, path)
	q.mu.Unlock()
}

// imagePath names the image of a workspace: its base name made safe for a
// file name, plus a hash of the whole path so that odd or long names never
// collide.
func (q *Quota) imagePath(path string) string {
	return filepath.Join(q.dir, imageName(path))
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

func imageName(path string) string {
	sum := sha256.Sum256([]byte(path))
	name := unsafeChars.ReplaceAllString(filepath.Base(path), "_")
	if len(name) > 64 {
		name = name[:64]
	}
	return name + "-" + hex.EncodeToString(sum[:6]) + ".img"
}

// sidecar is the file beside an image that records its mount point, so that
// Sweep finds the directory even after a reboot dropped the mount.
func sidecar(img string) string { return strings.TrimSuffix(img, ".img") + ".path" }

// isNotSupported reports an error that means "this kernel or filesystem does
// not offer the operation".
func isNotSupported(err error) bool {
	return errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS)
}

// LoopBackings maps each attached loop device ("/dev/loop3") to its
// backing file, as the kernel keeps it even after the file was deleted.
func LoopBackings() map[string]string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		out["/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f)))] = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), " (deleted)")
	}
	return out
}

// MountPointsUnder lists this process's mount points below base.
func MountPointsUnder(base string) []string {
	entries, _ := mountinfo.Read("/proc/self/mountinfo")
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.MountPoint, base+"/") {
			out = append(out, e.MountPoint)
		}
	}
	return out
}
