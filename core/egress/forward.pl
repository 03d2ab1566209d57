# The in-sandbox forwarder of network by host name (docs/network.md): it
# listens on 127.0.0.1:PORT, returns once it does (its child serves), and
# carries each connection it accepts to the core's egress proxy over the
# run's unix socket. It enforces nothing: the core's end does, so killing
# or replacing it gains a program nothing. One process multiplexes every
# connection: a fork per connection cost 5 ms of each.
use strict; use warnings; use Socket qw(SOCK_STREAM IPPROTO_TCP TCP_NODELAY); use IO::Socket::INET; use IO::Socket::UNIX; use POSIX ();
my ($sock, $port) = @ARGV;
my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port, Listen => 128, ReuseAddr => 1, Proto => 'tcp')
  or die "mcp-forge network: cannot listen on 127.0.0.1:$port: $!\n";
my $pid = fork; die "mcp-forge network: fork: $!\n" unless defined $pid;
exit 0 if $pid;
POSIX::setsid();
open(STDIN, '<', '/dev/null'); open(STDOUT, '>', '/dev/null'); open(STDERR, '>', '/dev/null');
$SIG{PIPE} = 'IGNORE';
my (%h, %peer, %eof, @pending); # by fd: handle, the other end's fd, read side ended
sub drop { my $fd = shift; my $p = delete $peer{$fd}; for my $x ($fd, defined $p ? $p : ()) { close(delete $h{$x}) if $h{$x}; delete $eof{$x}; delete $peer{$x} } }
sub attach { # a client whose way to the core is not open yet: 1 while it waits
  my $e = shift;
  # On a remote runtime the socket's relay may come up just after the code starts.
  my $u = IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => $sock);
  if (!$u) { return 1 if time < $e->[1]; close $e->[0]; return 0 }
  my ($a, $b) = (fileno($e->[0]), fileno($u));
  @h{$a, $b} = ($e->[0], $u); @peer{$a, $b} = ($b, $a);
  return 0;
}
while (1) {
  my $rin = ''; vec($rin, fileno($l), 1) = 1;
  vec($rin, $_, 1) = 1 for grep { !$eof{$_} } keys %h;
  next if select(my $r = $rin, undef, undef, @pending ? 0.05 : undef) < 0;
  if (vec($r, fileno($l), 1) and my $c = $l->accept) {
    setsockopt($c, IPPROTO_TCP, TCP_NODELAY, 1); # replies come in pieces
    push @pending, [$c, time + 5];
  }
  @pending = grep { attach($_) } @pending;
  for my $fd (keys %h) {
    next unless $h{$fd} && !$eof{$fd} && vec($r, $fd, 1);
    my $p = $peer{$fd};
    my $n = sysread($h{$fd}, my $b, 65536);
    if (!$n) {
      if (!defined $n) { drop($fd); next }
      $eof{$fd} = 1; shutdown($h{$p}, 1);
      drop($fd) if $eof{$p};
      next;
    }
    my $o = 0;
    while ($o < $n) { my $w = syswrite($h{$p}, $b, $n - $o, $o); if (!defined $w) { drop($fd); last } $o += $w }
  }
}
