package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// seed streams the core's copy of the workspace into the seed container as
// a tar. The copy is the core's own (the sandbox never saw it), read
// without following links: a link is sent as a link.
func (c *Client) seed(ctx context.Context, id, dir string, mounts []mountPlace) error {
	trees := []runtime.Tree{{Dir: dir, Prefix: path.Base(wsDir)}}
	for _, m := range mounts {
		if m.Copy > 0 {
			trees = append(trees, runtime.Tree{Dir: m.Source, Prefix: strings.TrimPrefix(copyDir(m.Copy), seedRoot+"/")})
		}
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(runtime.TarTrees(pw, trees...)) }()
	var errb bytes.Buffer
	_, err := c.exec(ctx, id, stream{Container: containerSeed, Stdin: pr, Stderr: &errb})
	pr.Close()
	if err != nil {
		return fmt.Errorf("attach to the seed container: %w %s", err, bytes.TrimSpace(errb.Bytes()))
	}
	return nil
}

// keptPath is rel's place for keeperd, which runs in the keeper's /forge.
func keptPath(rel string) (string, error) {
	p, err := wsPath(rel)
	return strings.TrimPrefix(p, path.Dir(wsDir)+"/"), err
}

// wsPath is rel's place in the keeper's view of the workspace; rel is
// relative and clean (the core checked it), and a path leaving the
// workspace is refused again here rather than clamped to its root: a
// caller that joined a '..' onto a directory of the workspace would
// otherwise reach the rest of it.
func wsPath(rel string) (string, error) {
	if strings.Contains(rel, "\x00") {
		return "", fmt.Errorf("path %q: %w", rel, runtime.ErrNoFile)
	}
	clean := path.Clean(rel)
	if path.IsAbs(rel) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("path %q: %w", rel, runtime.ErrPath)
	}
	if clean == "." {
		return wsDir, nil
	}
	return wsDir + "/" + clean, nil
}

// readDirScript prints the regular files directly in a directory: for each,
// its name, size and whether its content follows (within the caps), NUL
// separated. A link is never followed, nor listed.
const readDirScript = `use Fcntl; my ($dir, $maxf, $maxt) = @ARGV; nolink($dir); opendir(my $d, $dir) or do { print STDERR "$dir: $!\n"; exit($!{ENOENT} || $!{ENOTDIR} ? 3 : 1) };
binmode STDOUT; my $used = 0;
for my $n (sort grep { $_ ne '.' && $_ ne '..' } readdir $d) { my @st = lstat("$dir/$n"); next unless @st && -f _;
  my $size = $st[7]; my $take = $size <= $maxf && $used + $size <= $maxt;
  my $data = ''; if ($take) { sysopen(my $f, "$dir/$n", O_RDONLY | O_NONBLOCK | O_NOFOLLOW) or next; next unless -f $f; binmode $f; read($f, $data, $size); $used += length $data }
  print $n, "\0", $take ? length($data) : $size, "\0", $take ? 1 : 0, "\0", $data }`

// ReadDir implements runtime.RemoteWorkspace.
func (c *Client) ReadDir(ctx context.Context, id, rel string, maxFile, maxTotal int64) ([]runtime.File, error) {
	dir, err := keptPath(rel)
	if err != nil {
		return nil, err
	}
	res, err := c.keep(ctx, id, readDirScript, nil, dir, strconv.FormatInt(maxFile, 10), strconv.FormatInt(maxTotal, 10))
	if err != nil {
		return nil, err
	}
	switch res.ExitCode {
	case 0:
	case 3:
		return nil, nil // no such directory: no files
	case 6:
		return nil, fmt.Errorf("%s: %s: %w", rel, bytes.TrimSpace(res.Stderr), runtime.ErrLink)
	default:
		return nil, errExit("read directory "+rel, res)
	}
	return parseFiles(res.Stdout)
}

func parseFiles(b []byte) ([]runtime.File, error) {
	var out []runtime.File
	for len(b) > 0 {
		parts := bytes.SplitN(b, []byte{0}, 4)
		if len(parts) < 4 {
			return nil, errors.New("read directory: a truncated listing")
		}
		size, err := strconv.ParseInt(string(parts[1]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read directory: %w", err)
		}
		f := runtime.File{Name: string(parts[0]), Size: size}
		rest := parts[3]
		if string(parts[2]) == "1" {
			if int64(len(rest)) < size {
				return nil, errors.New("read directory: a truncated file")
			}
			f.Data, rest = rest[:size], rest[size:]
		} else {
			f.Skipped = true
		}
		out = append(out, f)
		b = rest
	}
	return out, nil
}

const readFileScript = `use Fcntl; my ($p, $max) = @ARGV; nolink($p); my @st = lstat $p; if (!@st) { print STDERR "$p: no such file\n"; exit 3 }
if (!-f _) { print STDERR -d _ ? "is a directory\n" : "is a device, socket or pipe\n"; exit 8 }
if ($st[7] > $max) { print STDERR "$st[7]\n"; exit 4 } sysopen(my $f, $p, O_RDONLY | O_NONBLOCK | O_NOFOLLOW) or do { print STDERR "$p: $!\n"; exit($!{ELOOP} ? 6 : 1) };
if (!-f $f) { print STDERR "is not a regular file\n"; exit 8 } binmode $f; my $d = ''; read($f, $d, $max + 1);
if (length($d) > $max) { print STDERR "more than $max\n"; exit 4 } binmode STDOUT; print $d`

// ReadFile implements runtime.RemoteWorkspace.
func (c *Client) ReadFile(ctx context.Context, id, rel string, max int64) ([]byte, error) {
	p, err := keptPath(rel)
	if err != nil {
		return nil, err
	}
	res, err := c.keep(ctx, id, readFileScript, nil, p, strconv.FormatInt(max, 10))
	if err != nil {
		return nil, err
	}
	switch res.ExitCode {
	case 0:
		return res.Stdout, nil
	case 3:
		return nil, fmt.Errorf("%s: %w", rel, runtime.ErrNoFile)
	case 4:
		return nil, fmt.Errorf("%s is %s bytes, over %d: %w", rel, bytes.TrimSpace(res.Stderr), max, runtime.ErrTooLarge)
	case 6:
		return nil, fmt.Errorf("%s: %s: %w", rel, bytes.TrimSpace(res.Stderr), runtime.ErrLink)
	case 8:
		return nil, fmt.Errorf("%s %s: %w", rel, bytes.TrimSpace(res.Stderr), runtime.ErrNotRegular)
	}
	return nil, errExit("read "+rel, res)
}

// ListFiles implements runtime.RemoteWorkspace.
func (c *Client) ListFiles(ctx context.Context, id, rel string, max int) ([]runtime.Entry, bool, error) {
	dir, err := keptPath(rel)
	if err != nil {
		return nil, false, err
	}
	res, err := c.keep(ctx, id, "builtin:list", nil, dir, strconv.Itoa(max))
	if err != nil {
		return nil, false, err
	}
	switch res.ExitCode {
	case 0:
	case 3:
		return nil, false, fmt.Errorf("%s: %w", rel, runtime.ErrNoFile)
	case 6:
		return nil, false, fmt.Errorf("%s: %s: %w", rel, bytes.TrimSpace(res.Stderr), runtime.ErrLink)
	case 7:
		// As a workspace of the core's answers (file-type, not file-not-found).
		return nil, false, fmt.Errorf("%s is not a directory: %w", rel, runtime.ErrNotRegular)
	default:
		return nil, false, errExit("list "+rel, res)
	}
	return parseEntries(res.Stdout)
}

func parseEntries(b []byte) ([]runtime.Entry, bool, error) {
	more := bytes.HasSuffix(b, []byte("\x00more"))
	b = bytes.TrimSuffix(b, []byte("\x00more"))
	fields := bytes.Split(b, []byte{0})
	if len(fields) > 0 && len(fields[len(fields)-1]) == 0 {
		fields = fields[:len(fields)-1]
	}
	if len(fields)%5 != 0 {
		return nil, false, errors.New("list: a truncated listing")
	}
	var out []runtime.Entry
	for i := 0; i < len(fields); i += 5 {
		size, err1 := strconv.ParseInt(string(fields[i+1]), 10, 64)
		mt, err2 := strconv.ParseInt(string(fields[i+2]), 10, 64)
		ino, err3 := strconv.ParseUint(string(fields[i+3]), 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, false, fmt.Errorf("list: %w", err)
		}
		out = append(out, runtime.Entry{Type: string(fields[i]), Size: size, Modified: time.Unix(0, mt), Ino: ino, Path: string(fields[i+4])})
	}
	return out, more, nil
}

const writeFileScript = `use Fcntl; use File::Path qw(make_path); use File::Basename; my ($p, $replace) = @ARGV; nolink($p, $replace); make_path(dirname($p));
my $t = "$p.forge-" . join('', map { sprintf '%02x', int rand 256 } 1 .. 8); sub fail { my $no = $!{ENOSPC} || $!{EDQUOT}; print STDERR "$p: $!\n"; unlink $t; exit($no ? 5 : 1) }
sysopen(my $f, $t, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644) or fail(); binmode $f; binmode STDIN; local $/; my $d = <STDIN> // '';
print $f $d or fail(); close $f or fail(); rename($t, $p) or fail();`

// WriteFile implements runtime.RemoteWorkspace.
func (c *Client) WriteFile(ctx context.Context, id, rel string, data []byte, replaceLink bool) error {
	p, err := keptPath(rel)
	if err != nil {
		return err
	}
	if data == nil {
		data = []byte{}
	}
	res, err := c.keep(ctx, id, writeFileScript, data, p, map[bool]string{true: "1", false: "0"}[replaceLink])
	if err != nil {
		return err
	}
	switch res.ExitCode {
	case 0:
		return nil
	case 5:
		return fmt.Errorf("write %s: %w", rel, runtime.ErrNoSpace)
	case 6:
		return fmt.Errorf("write %s: %s: %w", rel, bytes.TrimSpace(res.Stderr), runtime.ErrLink)
	}
	return errExit("write "+rel, res)
}

const statScript = `my ($p) = @ARGV; nolink($p); my @st = lstat $p; if (!@st) { print STDERR "no such file\n"; exit 3 }
if (!-f _) { print STDERR -d _ ? "is a directory\n" : "is a device, socket or pipe\n"; exit 8 } print $st[7]`

const removeScript = `my ($p) = @ARGV; nolink($p, 1); my @st = lstat $p; if (!@st) { exit 3 } if (-d _) { print STDERR "is a directory\n"; exit 8 }
unlink $p or do { print STDERR "$p: $!\n"; exit 1 }`

// statfsScript prints the workspace's filesystem as stat -f measures it:
// block size, blocks, blocks free to the sandbox, inodes, inodes free
// (Perl has no statfs, and coreutils is essential in every Debian-based
// image, as perl-base is).
const statfsScript = `exec { 'stat' } 'stat', '-f', '-c', '%S %b %a %c %d', '--', $ARGV[0]; print STDERR "stat: $!\n"; exit 1`

// WorkspaceUsage implements runtime.WorkspaceUsage: the pod's workspace
// is its own filesystem (an emptyDir; a tmpfs of the quota's size with
// workspace_medium Memory).
func (c *Client) WorkspaceUsage(ctx context.Context, id string) (runtime.FSUsage, error) {
	dir, err := keptPath(".")
	if err != nil {
		return runtime.FSUsage{}, err
	}
	res, err := c.keep(ctx, id, statfsScript, nil, dir)
	if err != nil {
		return runtime.FSUsage{}, err
	}
	if res.ExitCode != 0 {
		return runtime.FSUsage{}, errExit("statfs of the workspace", res)
	}
	return parseStatfs(res.Stdout)
}

func parseStatfs(b []byte) (runtime.FSUsage, error) {
	f := strings.Fields(string(b))
	if len(f) != 5 {
		return runtime.FSUsage{}, fmt.Errorf("statfs of the workspace: %q is not 5 numbers", b)
	}
	var n [5]int64
	for i, s := range f {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return runtime.FSUsage{}, fmt.Errorf("statfs of the workspace: %q: %q is not a count", b, s)
		}
		n[i] = v
	}
	return runtime.FSUsage{Size: n[0] * n[1], Free: n[0] * n[2], NoInodes: n[3] > 0 && n[4] == 0}, nil
}

// fileErr is the error of a keeper helper's exit code (0: none).
func fileErr(rel string, res runtime.ExecResult) error {
	msg := bytes.TrimSpace(res.Stderr)
	switch res.ExitCode {
	case 0:
		return nil
	case 3:
		return fmt.Errorf("%s: %w", rel, runtime.ErrNoFile)
	case 6:
		return fmt.Errorf("%s: %s: %w", rel, msg, runtime.ErrLink)
	case 8:
		return fmt.Errorf("%s %s: %w", rel, msg, runtime.ErrNotRegular)
	}
	return errExit(rel, res)
}

// FileSize implements runtime.RemoteWorkspace.
func (c *Client) FileSize(ctx context.Context, id, rel string) (int64, error) {
	p, err := keptPath(rel)
	if err != nil {
		return 0, err
	}
	res, err := c.keep(ctx, id, statScript, nil, p)
	if err != nil {
		return 0, err
	}
	if err := fileErr(rel, res); err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(res.Stdout), 10, 64)
}

// RemoveFile implements runtime.RemoteWorkspace.
func (c *Client) RemoveFile(ctx context.Context, id, rel string) error {
	p, err := keptPath(rel)
	if err != nil {
		return err
	}
	res, err := c.keep(ctx, id, removeScript, nil, p)
	if err != nil {
		return err
	}
	return fileErr(rel, res)
}

// TarOut implements runtime.RemoteWorkspace: tar in the keeper (its own
// exec: a workspace is larger than a file service answer), which archives
// links as links.
func (c *Client) TarOut(ctx context.Context, id, rel string, w io.Writer) error {
	return c.tar(ctx, id, rel, "copy out of", stream{Stdout: w}, "-c", ".")
}

// TarIn implements runtime.RemoteWorkspace.
func (c *Client) TarIn(ctx context.Context, id, rel string, r io.Reader) error {
	return c.tar(ctx, id, rel, "copy into", stream{Stdin: r}, "-x", "--no-same-owner")
}

// tar runs the keeper's tar in rel's directory with s's streams.
func (c *Client) tar(ctx context.Context, id, rel, what string, s stream, args ...string) error {
	dir, err := wsPath(rel)
	if err != nil {
		return err
	}
	return c.tarAt(ctx, id, dir, what, s, args...)
}

// tarAt runs the keeper's tar in its directory dir.
func (c *Client) tarAt(ctx context.Context, id, dir, what string, s stream, args ...string) error {
	errb := runtime.Capped{Max: 4096}
	s.Container, s.Stderr = containerKeeper, &errb
	s.Command = append([]string{"tar", "-f", "-", "-C", dir}, args...)
	code, err := c.exec(ctx, id, s)
	if err == nil && code != 0 {
		err = fmt.Errorf("tar exited %d: %s", code, bytes.TrimSpace(errb.Buf.Bytes()))
		if bytes.Contains(errb.Buf.Bytes(), []byte("No space left")) {
			err = fmt.Errorf("%w: %v", runtime.ErrNoSpace, err)
		}
	}
	return fail(what, id, err)
}

// relayScript connects to a unix socket (from its directory: no path
// length limit) and relays it to stdin and stdout; one byte 1 says it is
// connected, exit 3 that nothing listens there yet.
const relayScript = `use Socket; use File::Basename; my $p = $ARGV[0]; chdir(dirname($p)) or do { print STDERR "$p: $!\n"; exit 3 };
socket(my $s, AF_UNIX, SOCK_STREAM, 0) or die "socket: $!";
connect($s, pack_sockaddr_un(basename($p))) or do { print STDERR "$p: $!\n"; exit($!{ENOENT} || $!{ECONNREFUSED} ? 3 : 1) };
$| = 1; binmode STDOUT; binmode STDIN; syswrite STDOUT, "\x01";
my ($in, $out) = (1, 1);
while ($out) { my $rin = ''; vec($rin, fileno(STDIN), 1) = 1 if $in; vec($rin, fileno($s), 1) = 1;
  next if select(my $r = $rin, undef, undef, undef) < 0;
  if ($in && vec($r, fileno(STDIN), 1)) { my $n = sysread(STDIN, my $b, 65536); if (!$n) { $in = 0; shutdown($s, 1) } else { my $o = 0; while ($o < $n) { my $w = syswrite($s, $b, $n - $o, $o); exit 0 unless defined $w; $o += $w } } }
  if (vec($r, fileno($s), 1)) { my $n = sysread($s, my $b, 65536); if (!$n) { $out = 0 } else { my $o = 0; while ($o < $n) { my $w = syswrite(STDOUT, $b, $n - $o, $o); exit 0 unless defined $w; $o += $w } } } }`

// DialSocket implements runtime.RemoteWorkspace: an exec in the keeper
// relays the socket; the caller gets one end of a socketpair, so that it
// has deadlines and half-close like any unix connection.
func (c *Client) DialSocket(ctx context.Context, id, target string) (net.Conn, error) {
	p, err := c.info(id)
	if err != nil {
		return nil, err
	}
	rel, ok := socketPlace(p.mounts, target)
	if !ok {
		return nil, fmt.Errorf("%s is under no mount of the workspace", target)
	}
	sp, err := wsPath(rel)
	if err != nil {
		return nil, err
	}
	ours, theirs, err := socketPair()
	if err != nil {
		return nil, err
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errb bytes.Buffer
	ended := make(chan struct{})
	var code int
	var xerr error
	// The relay lives as long as the connection, not as the Dial's context:
	// cut ends it when the caller has closed its end, or the Dial failed.
	rctx, cut := context.WithCancel(context.WithoutCancel(ctx))
	// A pod handed to another core (forget) cuts it too: a plugin that
	// keeps the other end reaches nothing more.
	c.mu.Lock()
	if c.pods[id] != p {
		c.mu.Unlock() // forgotten meanwhile (removed, or handed over)
		cut()
		ours.Close()
		theirs.Close()
		return nil, fmt.Errorf("pod %s is no longer this core's", id)
	}
	if p.dials == nil {
		p.dials = map[*context.CancelFunc]bool{}
	}
	p.dials[&cut] = true
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			delete(p.dials, &cut)
			c.mu.Unlock()
		}()
		defer close(ended)
		code, xerr = c.exec(rctx, id, stream{Container: containerKeeper,
			Command: []string{"perl", "-e", relayScript, "--", sp}, Stdin: inR, Stdout: outW, Stderr: &errb})
		outW.Close()
		inR.Close()
	}()
	first := make([]byte, 1)
	got := make(chan error, 1)
	go func() { _, err := io.ReadFull(outR, first); got <- err }()
	select {
	case err := <-got:
		if err != nil || first[0] != 1 {
			cut()
			<-ended
			ours.Close()
			theirs.Close()
			if code == 3 {
				return nil, fmt.Errorf("%s: %w", target, runtime.ErrNoListener)
			}
			return nil, fmt.Errorf("relay to %s in pod %s: %v %v %s", target, id, xerr, err, bytes.TrimSpace(errb.Bytes()))
		}
	case <-ctx.Done():
		cut()
		inW.Close()
		outR.Close()
		ours.Close()
		theirs.Close()
		return nil, ctx.Err()
	}
	go func() { // the caller's writes to the pod
		_, _ = io.Copy(inW, bufio.NewReaderSize(theirs, 32<<10))
		inW.Close()
		// A half-close, or the caller's Close: only the latter hangs up
		// both ways, and then nothing will read what the pod sends.
		for !hungUp(theirs) {
			select {
			case <-ended:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		cut()
		outR.Close()
	}()
	go func() { // the pod's answers to the caller
		_, _ = io.Copy(theirs, outR)
		_ = theirs.CloseWrite()
		cut() // the pod's end closed, or the caller's: the relay is done
		<-ended
		theirs.Close()
	}()
	return ours, nil
}

// hungUp reports whether the peer of c closed both ways (POLLHUP), not
// only its writing half.
func hungUp(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return true
	}
	hup := false
	_ = raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			hup = fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return hup
}

// socketPlace is the workspace path of a socket at target in the sandbox.
func socketPlace(mounts []mountPlace, target string) (string, bool) {
	best := -1
	for i, m := range mounts {
		if m.ReadOnly {
			continue
		}
		if target == m.Target || strings.HasPrefix(target, strings.TrimSuffix(m.Target, "/")+"/") {
			if best < 0 || len(m.Target) > len(mounts[best].Target) {
				best = i
			}
		}
	}
	if best < 0 {
		return "", false
	}
	m := mounts[best]
	rest := strings.TrimPrefix(strings.TrimPrefix(target, strings.TrimSuffix(m.Target, "/")), "/")
	return path.Join(m.Rel, rest), true
}

// socketPair is a connected pair of unix stream sockets.
func socketPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	conv := func(fd int, name string) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	a, err := conv(fds[0], "channel")
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, err
	}
	b, err := conv(fds[1], "relay")
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}
