package agent

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// The file service: the workspace's files as the core asks for them, with
// the refusals a workspace of the core's own makes. Every path is
// resolved beneath the workspace's directory without following a link
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or a walk of O_NOFOLLOW
// opens where the kernel has no openat2), and the last component is
// handled with *at calls that do not follow it either: a link where a
// file should be is the sandbox's doing, and is refused the same way on
// every runtime. Only what cannot block is done (a pipe the sandbox put
// where a file was is opened non-blocking and refused once fstat sees it),
// bounded by the request, so the sandbox cannot make a request run long
// or leave the service holding memory.

// MaxPath bounds a request's path: longer is refused before any lookup.
const MaxPath = 4096

// MaxRequestData bounds a write's data (the core's file budgets are
// smaller).
const MaxRequestData = 1 << 30

// Files serves the workspace whose directory it holds.
type Files struct {
	root int    // O_DIRECTORY fd of the workspace
	out  string // Init's OUTDIR ("": none)
}

// OpenFiles opens the workspace at dir; out is where the sandbox's init
// captures its output ("": no logs).
func OpenFiles(dir, out string) (*Files, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the workspace %s: %w", dir, err)
	}
	return &Files{root: fd, out: out}, nil
}

// Close releases the workspace.
func (f *Files) Close() error { return unix.Close(f.root) }

// logs reads what Init captured: the first max bytes of each stream.
func (f *Files) logs(max int64) (Response, []byte) {
	if f.out == "" {
		return Response{Code: Failed, Error: "no output directory"}, nil
	}
	dfd, err := unix.Open(f.out, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err), nil
	}
	defer unix.Close(dfd)
	part := func(name string, n int64) []byte {
		var st unix.Stat_t
		if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil
		}
		fl, err := openRegular(dfd, name, st)
		if err != nil {
			return nil
		}
		defer fl.Close()
		b, _ := readUpTo(fl, n)
		return b
	}
	l := &Logs{}
	_, _ = fmt.Sscan(string(part("totals", 64)), &l.StdoutTotal, &l.StderrTotal)
	o, e := part("stdout", max), part("stderr", max)
	l.Stdout = int64(len(o))
	return Response{Logs: l}, append(o, e...)
}

// Serve answers requests from r on w until r ends.
func (f *Files) Serve(r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, 64<<10)
	bw := bufio.NewWriterSize(w, 64<<10)
	for {
		var req Request
		data, err := ReadMsg(br, &req, MaxRequestData)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		res, out := f.Do(req, data)
		if err := WriteMsg(bw, res, out); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
	}
}

// Do runs one request.
func (f *Files) Do(req Request, data []byte) (Response, []byte) {
	if req.Op == OpLogs {
		return f.logs(max(req.Max, 0))
	}
	rel, err := cleanPath(req.Path)
	if err != nil {
		return fail(err), nil
	}
	switch req.Op {
	case OpList:
		return f.list(rel, int(min(max(req.Max, 0), 1<<20))), nil
	case OpReadDir:
		return f.readDir(rel, req.Max, req.MaxTotal)
	case OpRead:
		return f.read(rel, req.Max)
	case OpWrite:
		return f.write(rel, data, req.Replace), nil
	case OpStat:
		return f.stat(rel), nil
	case OpRemove:
		return f.remove(rel), nil
	case OpStatfs:
		var st unix.Statfs_t
		if err := unix.Fstatfs(f.root, &st); err != nil {
			return fail(err), nil
		}
		bs := st.Frsize
		if bs == 0 {
			bs = st.Bsize
		}
		return Response{Statfs: &Statfs{BlockSize: bs, Blocks: st.Blocks, Avail: st.Bavail, Files: st.Files, FilesFree: st.Ffree}}, nil
	}
	return Response{Code: Failed, Error: fmt.Sprintf("no operation %q", req.Op)}, nil
}

// refusal is an error with its code.
type refusal struct {
	code Code
	msg  string
}

func (r *refusal) Error() string { return r.msg }

func refuse(code Code, format string, a ...any) error {
	return &refusal{code: code, msg: fmt.Sprintf(format, a...)}
}

// fail is the response of an error: a refusal's code, or the code of an
// errno where one says more than Failed.
func fail(err error) Response {
	var r *refusal
	if errors.As(err, &r) {
		return Response{Code: r.code, Error: r.msg}
	}
	code := Failed
	switch {
	case errors.Is(err, unix.ENOENT):
		code = NoFile
	case errors.Is(err, unix.ELOOP):
		code = Link
	case errors.Is(err, unix.EXDEV):
		code = BadPath
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		code = NoSpace
	case errors.Is(err, unix.ENAMETOOLONG):
		code = BadPath
	}
	return Response{Code: code, Error: err.Error()}
}

// cleanPath checks a request's path: relative, within the workspace, no
// NUL, within MaxPath; "" and "." are the workspace itself.
func cleanPath(p string) (string, error) {
	switch {
	case len(p) > MaxPath:
		return "", refuse(BadPath, "a path of %d bytes, over %d", len(p), MaxPath)
	case strings.ContainsRune(p, 0):
		return "", refuse(NoFile, "path %q: no such file", p)
	case path.IsAbs(p):
		return "", refuse(BadPath, "path %q is absolute", p)
	}
	c := path.Clean("./" + p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", refuse(BadPath, "path %q leaves the workspace", p)
	}
	return c, nil
}

// split is rel's parent directory and last component ("." for the
// workspace: its parent is itself).
func split(rel string) (string, string) {
	if rel == "." {
		return ".", "."
	}
	return path.Dir(rel), path.Base(rel)
}

const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// noOpenat2 is set once openat2 answered ENOSYS (an old kernel, gVisor).
var noOpenat2 bool

// openDir opens directory rel of the workspace without following a link
// on the way; mk makes what is missing (0755).
func (f *Files) openDir(rel string, mk bool) (int, error) {
	if rel == "." {
		return unix.Openat(f.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if !mk && !noOpenat2 {
		fd, err := unix.Openat2(f.root, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: resolve})
		if !errors.Is(err, unix.ENOSYS) {
			return fd, f.linkErr(rel, err)
		}
		noOpenat2 = true
	}
	// A walk, one component at a time, none followed.
	fd, err := unix.Openat(f.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(rel, "/") {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOENT) && mk {
			if err = unix.Mkdirat(fd, c, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
			}
		}
		if err != nil {
			unix.Close(fd)
			return -1, f.linkErr(rel, err)
		}
		unix.Close(fd)
		fd = next
	}
	return fd, nil
}

// linkErr says which component of rel is a link when opening it failed
// with ELOOP or ENOTDIR (O_NOFOLLOW, O_DIRECTORY on a link).
func (f *Files) linkErr(rel string, err error) error {
	if err == nil || !(errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) {
		return err
	}
	acc := ""
	for _, c := range strings.Split(rel, "/") {
		acc = path.Join(acc, c)
		var st unix.Stat_t
		if unix.Fstatat(f.root, acc, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			break
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return refuse(Link, "ws/%s is a symbolic link", acc)
		}
	}
	if errors.Is(err, unix.ENOTDIR) {
		return refuse(NoFile, "%s: not a directory", rel)
	}
	return err
}

// lstatIn is the last component of rel, not followed, and its directory
// (open: the caller closes it).
func (f *Files) lstatIn(rel string) (int, string, unix.Stat_t, error) {
	var st unix.Stat_t
	dir, base := split(rel)
	dfd, err := f.openDir(dir, false)
	if err != nil {
		return -1, "", st, err
	}
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		unix.Close(dfd)
		return -1, "", st, err
	}
	return dfd, base, st, nil
}

// Kind names the type of a file of mode as listings do (Entry.Type), on
// every runtime: file, directory, symlink, fifo, socket, device, other.
func Kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device"
	}
	return "other"
}

func notRegular(st unix.Stat_t) error {
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return refuse(NotRegular, "is a directory")
	}
	return refuse(NotRegular, "is a device, socket or pipe")
}

// openRegular opens base in dfd for reading if it is the regular file st
// describes: not followed, non-blocking (a pipe swapped in meanwhile does
// not hold the service), checked again once open.
func openRegular(dfd int, base string, st unix.Stat_t) (*os.File, error) {
	fd, err := unix.Openat(dfd, base, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Mode&unix.S_IFMT != unix.S_IFREG || now.Ino != st.Ino || now.Dev != st.Dev {
		unix.Close(fd)
		return nil, refuse(NotRegular, "is not a regular file")
	}
	return os.NewFile(uintptr(fd), base), nil
}

// readUpTo reads at most n bytes of fl.
func readUpTo(fl *os.File, n int64) ([]byte, error) {
	return io.ReadAll(io.LimitReader(fl, n))
}

func (f *Files) read(rel string, max int64) (Response, []byte) {
	dfd, base, st, err := f.lstatIn(rel)
	if err != nil {
		return fail(err), nil
	}
	defer unix.Close(dfd)
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return fail(refuse(Link, "ws/%s is a symbolic link", rel)), nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fail(notRegular(st)), nil
	}
	if st.Size > max {
		return Response{Code: TooLarge, Size: st.Size, Error: fmt.Sprint(st.Size)}, nil
	}
	fl, err := openRegular(dfd, base, st)
	if err != nil {
		return fail(err), nil
	}
	defer fl.Close()
	data, err := readUpTo(fl, max+1)
	if err != nil {
		return fail(err), nil
	}
	if int64(len(data)) > max {
		return Response{Code: TooLarge, Size: int64(len(data)), Error: fmt.Sprintf("more than %d", max)}, nil
	}
	return Response{Size: int64(len(data))}, data
}

func (f *Files) stat(rel string) Response {
	dfd, _, st, err := f.lstatIn(rel)
	if err != nil {
		return fail(err)
	}
	unix.Close(dfd)
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return fail(refuse(Link, "ws/%s is a symbolic link", rel))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fail(notRegular(st))
	}
	return Response{Size: st.Size}
}

func (f *Files) remove(rel string) Response {
	if rel == "." {
		return fail(refuse(NotRegular, "is a directory"))
	}
	dfd, base, st, err := f.lstatIn(rel)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(dfd)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fail(refuse(NotRegular, "is a directory"))
	}
	if err := unix.Unlinkat(dfd, base, 0); err != nil {
		return fail(err)
	}
	return Response{}
}

// write replaces rel with data: a new file beside it, renamed over it,
// so that a reader sees the old file or the new one.
func (f *Files) write(rel string, data []byte, replace bool) Response {
	if rel == "." {
		return fail(refuse(NotRegular, "is a directory"))
	}
	dir, base := split(rel)
	dfd, err := f.openDir(dir, true)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK && !replace {
		return fail(refuse(Link, "ws/%s is a symbolic link", rel))
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := base + ".forge-" + hex.EncodeToString(rnd[:])
	if len(tmp) > 255 {
		tmp = ".forge-" + hex.EncodeToString(rnd[:])
	}
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fail(err)
	}
	fl := os.NewFile(uintptr(fd), tmp)
	_, err = fl.Write(data)
	if cerr := fl.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, base)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return fail(err)
	}
	return Response{}
}

// dirAt opens directory rel, not followed: Link for a link on the way or
// at rel, NoFile where nothing is, NotDir where something else is.
func (f *Files) dirAt(rel string) (int, error) {
	pfd, base, st, err := f.lstatIn(rel)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return -1, refuse(Link, "ws/%s is a symbolic link", rel)
	case unix.S_IFDIR:
	default:
		return -1, refuse(NotDir, "%s is not a directory", rel)
	}
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Ino != st.Ino || now.Dev != st.Dev {
		unix.Close(fd)
		return -1, refuse(NoFile, "%s was replaced while opened", rel)
	}
	return fd, nil
}

// readDir answers the regular files directly in rel, with the contents of
// those within maxFile each and maxTotal in all; a link is never followed,
// nor listed.
func (f *Files) readDir(rel string, maxFile, maxTotal int64) (Response, []byte) {
	dfd, err := f.dirAt(rel)
	if err != nil {
		r := fail(err)
		if r.Code == NotDir {
			r.Code = NoFile // no such directory: no files
		}
		return r, nil
	}
	d := os.NewFile(uintptr(dfd), rel)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fail(err), nil
	}
	sort.Strings(names)
	var res Response
	var out []byte
	var used int64
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		take := st.Size <= maxFile && used+st.Size <= maxTotal
		if !take {
			res.Files = append(res.Files, FileData{Name: n, Size: st.Size})
			continue
		}
		fl, err := openRegular(dfd, n, st)
		if err != nil {
			continue
		}
		data, err := readUpTo(fl, st.Size)
		fl.Close()
		if err != nil {
			continue
		}
		used += int64(len(data))
		out = append(out, data...)
		res.Files = append(res.Files, FileData{Name: n, Size: int64(len(data)), Data: true})
	}
	return res, out
}

// list walks rel without following links, depth first in name order:
// up to max entries, and More if it stopped at max or after reading
// 4 max + 1024 names (those it could not lstat count too), or below
// 64 levels. A directory is read through its own fd opened without
// following, so a link swapped in for it is never followed.
func (f *Files) list(rel string, max int) Response {
	dfd, err := f.dirAt(rel)
	if err != nil {
		return fail(err)
	}
	w := walker{max: max, budget: 4*max + 1024}
	prefix := ""
	if rel != "." {
		prefix = rel + "/"
	}
	w.walk(dfd, prefix, 0)
	return Response{Entries: w.out, More: w.more}
}

type walker struct {
	max, budget, read int
	more              bool
	out               []Entry
}

// walk lists dir (an fd it closes), its paths under prefix.
func (w *walker) walk(dfd int, prefix string, depth int) {
	d := os.NewFile(uintptr(dfd), prefix)
	defer d.Close()
	var names []string
	for !w.more {
		batch, err := d.Readdirnames(min(256, w.budget-w.read+1))
		for _, n := range batch {
			if w.read >= w.budget {
				w.more = true
				break
			}
			w.read++
			names = append(names, n)
		}
		if err != nil || len(batch) == 0 {
			break
		}
	}
	sort.Strings(names)
	for _, n := range names {
		if len(w.out) >= w.max {
			w.more = true
			return
		}
		var st unix.Stat_t
		if unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		k := Kind(st.Mode)
		e := Entry{Type: k, Modified: clampNs(st.Mtim.Sec), Ino: st.Ino, Path: prefix + n}
		if k == "file" {
			e.Size = st.Size
		}
		w.out = append(w.out, e)
		if k == "directory" && depth < 64 && !w.more {
			sub, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			var now unix.Stat_t
			if unix.Fstat(sub, &now) != nil || now.Ino != st.Ino || now.Dev != st.Dev {
				unix.Close(sub)
				continue
			}
			w.walk(sub, prefix+n+"/", depth+1)
		}
	}
}

// clampNs is whole seconds s in nanoseconds, clamped to what an int64
// holds (±9e9 s).
func clampNs(s int64) int64 {
	s = min(max(s, -9e9), 9e9)
	return s * 1e9
}
