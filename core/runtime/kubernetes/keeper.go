package kubernetes

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// An exec through the API server costs the round trip and the container
// runtime's exec (≈ 100 ms); a session's every execute lists its output
// directory, a stateless run reads its results. So the keeper runs one
// long-lived helper (keeperd) per pod, and each file operation is a
// request on its stdin: the operation's script forked in the keeper with
// its arguments and stdin, answered with its exit code, stdout and stderr.

// keeperd serves requests from the directory of the workspace's mount (its
// first argument names the mount), where
// the requests' paths are relative: ws/ the workspace, run/ the output.
// A request is a count of fields, then each field (8 hex digits
// of length, the bytes): the script, its stdin, its arguments. The answer
// is the exit code, stdout and stderr, each a field. The script runs in a
// child, as `perl -e` would run it, for at most 30 s (a pipe the sandbox put
// where a file was, opened for all that the open checks, does not hold the
// service); a builtin (below) runs in keeperd itself, bounded by its
// arguments.
const keeperd = `use strict; use POSIX (); use Fcntl ':mode'; binmode STDIN; binmode STDOUT; $| = 1; my $ws = shift @ARGV; chdir "$ws/.." or die "chdir $ws/..: $!";
` + builtins + `
sub rd { my $n = shift; my $b = ''; while (length($b) < $n) { my $r = sysread(STDIN, $b, $n - length($b), length($b)); POSIX::_exit(0) unless $r } $b }
sub field { my $n = hex(rd(8)); $n ? rd($n) : '' }
sub out { my $d = shift; my $b = sprintf('%08x', length $d) . $d; my $o = 0; while ($o < length $b) { my $w = syswrite(STDOUT, $b, length($b) - $o, $o); POSIX::_exit(0) unless defined $w; $o += $w } }
while (1) {
  my $n = hex(rd(8)); my @f = map { field() } 1 .. $n; my ($script, $in, @args) = @f;
  if ($script =~ /\Abuiltin:(\w+)\z/) { my $b = $builtin{$1}; my @r = $b ? eval { $b->(@args) } : (); @r = (1, '', $b ? "$@" : "no builtin $1\n") unless @r; out($_) for @r[0 .. 2]; next }
  pipe(my $ir, my $iw) or die; pipe(my $or, my $ow) or die; pipe(my $er, my $ew) or die;
  my $pid = fork; defined $pid or die "fork: $!";
  if (!$pid) { close $iw; close $or; close $er; open STDIN, '<&', $ir; open STDOUT, '>&', $ow; open STDERR, '>&', $ew; close $ir; close $ow; close $ew;
    binmode STDOUT; @ARGV = @args; alarm 30; eval $script; if ($@) { print STDERR $@; POSIX::_exit(1) } close STDOUT; close STDERR; POSIX::_exit(0) }
  close $ir; close $ow; close $ew;
  my %buf = (o => '', e => ''); my %fh = (o => $or, e => $er); my $off = 0;
  my $win = length($in) ? 1 : 0; close $iw unless $win;
  while (%fh || $win) { my ($r, $w) = ('', ''); vec($r, fileno($fh{$_}), 1) = 1 for keys %fh; vec($w, fileno($iw), 1) = 1 if $win;
    next if select($r, $w, undef, undef) < 0;
    if ($win && vec($w, fileno($iw), 1)) { my $x = syswrite($iw, $in, 65536, $off); if (!defined $x) { $win = 0; close $iw } else { $off += $x; if ($off >= length $in) { $win = 0; close $iw } } }
    for my $k (keys %fh) { next unless vec($r, fileno($fh{$k}), 1); my $x = sysread($fh{$k}, my $b, 65536); if (!$x) { close $fh{$k}; delete $fh{$k} } else { $buf{$k} .= $b } } }
  waitpid($pid, 0); my $st = $?; my $code = ($st & 127) ? 128 + ($st & 127) : $st >> 8;
  out($code); out($buf{o}); out($buf{e});
}`

// builtins are keeperd's own subs. linked names the link on a path of
// the workspace (but on its last component with a true second argument: a
// write replaces a link there, never writing through it); nolink, which
// the scripts' children call, refuses such a path with exit 6, as the core
// refuses one in a workspace of its own: inside the pod a link could only
// lead to what the pod sees, but a link where a file should be is the
// sandbox's doing, and is refused the same way on every runtime.
//
// The rest are operations keeperd runs itself, without a child: a
// session's every execute lists its output directory, and the child's
// fork and the script's compile were most of that request's cost. Only
// what cannot block runs here (directory reads and lstat: the sandbox can
// mount nothing that would hang them), bounded by its arguments rather
// than by the child's alarm, so the sandbox cannot make one run long or
// leave keeperd holding memory.
//
// list walks a directory without following links, depth first in name
// order, answering type, size, mtime (ns, whole seconds, clamped to what
// an int64 holds), inode and path (relative to the workspace) of up to max
// entries, NUL separated, and "\0more" if it stopped at max or after
// reading 4 max + 1024 names (those it could not lstat count too); exit 3:
// no such directory, 6: a link on its path, 7: not a directory. A
// directory is read only if the one opened is the one lstat saw (a link
// swapped in for it meanwhile is not followed).
const builtins = `sub kind { my $m = shift; S_ISREG($m) ? 'file' : S_ISDIR($m) ? 'directory' : S_ISLNK($m) ? 'symlink' : S_ISFIFO($m) ? 'fifo' : S_ISSOCK($m) ? 'socket' : (S_ISCHR($m) || S_ISBLK($m)) ? 'device' : 'other' }
sub linked { my ($p, $last) = @_; my $acc = 'ws'; my @c = grep { length } split m{/}, substr($p, length $acc); pop @c if $last;
  for my $c (@c) { $acc .= "/$c"; my @st = lstat $acc; last unless @st; return "$acc is a symbolic link\n" if -l _ } undef }
sub nolink { my $l = linked(@_); return unless defined $l; print STDERR $l; exit 6 }
sub list { my ($root, $max) = @_; my $l = linked($root); return (6, '', $l) if defined $l;
  my @st0 = lstat $root; return (3, '', '') unless @st0; return (7, '', '') unless -d _;
  my ($n, $more, $o, $read) = (0, 0, '', 0); my $walk; $walk = sub { my ($dir, $depth, $dev, $ino) = @_;
    opendir(my $d, $dir) or return; my @ds = stat $d; return unless @ds && $ds[0] == $dev && $ds[1] == $ino;
    my @names; while (defined(my $e = readdir $d)) { next if $e eq '.' || $e eq '..'; if ($read++ >= 4 * $max + 1024) { $more = 1; last } push @names, $e } closedir $d;
    for my $name (sort @names) { if ($n >= $max) { $more = 1; return } my $p = "$dir/$name"; my @st = lstat $p or next; my $k = kind($st[2]);
      my $mt = $st[9] > 9e9 ? 9e9 : $st[9] < -9e9 ? -9e9 : $st[9];
      $o .= join("\0", $k, $k eq 'file' ? $st[7] : 0, sprintf('%d', $mt * 1000000000), $st[1], substr($p, length('ws/'))) . "\0"; $n++;
      $walk->($p, $depth + 1, @st[0, 1]) if $k eq 'directory' && $depth < 64 && !$more } };
  $walk->($root, 0, @st0[0, 1]); undef $walk; $o .= "\0more" if $more; return (0, $o, '') }
my %builtin = (list => \&list);`

// maxAnswer bounds one field of an answer: the largest is a directory read
// up to its total cap (host.MaxFileBytes per file, a few files).
const maxAnswer = 64 << 20

// keeper is the connection to a pod's keeperd.
type keeper struct {
	mu sync.Mutex
	// dead: a request was cut, the stream is out of step (deadMu, not mu,
	// which a request holds)
	deadMu sync.Mutex
	dead   bool
	in     *io.PipeWriter
	out    *bufio.Reader
	outR   *io.PipeReader
	ended  chan struct{}
	err    error // why it ended
}

// keeperOf is pod id's keeperd, started on first use (and again if it ended).
func (c *Client) keeperOf(ctx context.Context, id string) (*keeper, error) {
	p, err := c.info(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := p.keeper; k != nil && !k.isDead() {
		return k, nil
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	k := &keeper{in: inW, out: bufio.NewReaderSize(outR, 64<<10), outR: outR, ended: make(chan struct{})}
	go func() {
		errb := runtime.Capped{Max: 4096}
		_, err := c.exec(context.WithoutCancel(ctx), id, stream{Container: containerKeeper,
			Command: []string{"perl", "-e", keeperd, "--", wsDir}, Stdin: inR, Stdout: outW, Stderr: &errb})
		if err == nil {
			err = fmt.Errorf("the pod's file service ended: %s", errb.Buf.String())
		}
		k.err = err
		outW.CloseWithError(err)
		inR.CloseWithError(err)
		close(k.ended)
	}()
	p.keeper = k
	return k, nil
}

func (k *keeper) isDead() bool {
	select {
	case <-k.ended:
		return true
	default:
	}
	k.deadMu.Lock()
	defer k.deadMu.Unlock()
	return k.dead
}

// close ends the service: its stdin closed, keeperd exits once its current
// request has (a child's: 30 s at most); a new one serves the next request.
func (k *keeper) close() {
	k.deadMu.Lock()
	k.dead = true
	k.deadMu.Unlock()
	k.in.Close()
	k.outR.Close()
}

// call runs script with args and stdin in the keeper of pod id: what c.run
// of `perl -e script -- args` would answer, without an exec per call.
func (c *Client) keep(ctx context.Context, id, script string, stdin []byte, args ...string) (runtime.ExecResult, error) {
	k, err := c.keeperOf(ctx, id)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	cx, cancel := op(ctx)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-cx.Done():
			k.close() // a request cut in the middle leaves the stream unusable
		case <-done:
		}
	}()
	fields := append([]string{script, string(stdin)}, args...)
	req := []byte(fmt.Sprintf("%08x", len(fields)))
	for _, f := range fields {
		req = append(req, fmt.Sprintf("%08x", len(f))...)
		req = append(req, f...)
	}
	if _, err := k.in.Write(req); err != nil {
		return runtime.ExecResult{}, fail("exec in keeper", id, fmt.Errorf("%w (%v)", err, k.err))
	}
	var res runtime.ExecResult
	for i, into := range []*[]byte{nil, &res.Stdout, &res.Stderr} {
		b, err := readField(k.out)
		if err != nil {
			k.close()
			return runtime.ExecResult{}, fail("exec in keeper", id, err)
		}
		if i == 0 {
			if res.ExitCode, err = strconv.Atoi(string(b)); err != nil {
				k.close()
				return runtime.ExecResult{}, fail("exec in keeper", id, fmt.Errorf("exit code %q", b))
			}
			continue
		}
		*into = b
	}
	res.StdoutTotal, res.StderrTotal = int64(len(res.Stdout)), int64(len(res.Stderr))
	return res, nil
}

func readField(r *bufio.Reader) ([]byte, error) {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	var n [4]byte
	if _, err := hex.Decode(n[:], head[:]); err != nil {
		return nil, fmt.Errorf("a malformed answer: %w", err)
	}
	size := int(n[0])<<24 | int(n[1])<<16 | int(n[2])<<8 | int(n[3])
	if size > maxAnswer {
		return nil, errors.New("an answer over its bound")
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, err
}
