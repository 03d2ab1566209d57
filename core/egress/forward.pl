# The in-sandbox forwarder of network by host name (docs/network.md): it
# listens on 127.0.0.1:PORT, returns once it does (its child serves), and
# carries each connection it accepts to the core's egress proxy over the
# run's unix socket. It enforces nothing: the core's end does, so killing
# or replacing it gains a program nothing.
use strict; use warnings; use Socket; use IO::Socket::INET; use IO::Socket::UNIX; use POSIX ();
my ($sock, $port) = @ARGV;
my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port, Listen => 128, ReuseAddr => 1, Proto => 'tcp')
  or die "mcp-forge network: cannot listen on 127.0.0.1:$port: $!\n";
my $pid = fork; die "mcp-forge network: fork: $!\n" unless defined $pid;
exit 0 if $pid;
POSIX::setsid();
open(STDIN, '<', '/dev/null'); open(STDOUT, '>', '/dev/null'); open(STDERR, '>', '/dev/null');
$SIG{CHLD} = 'IGNORE'; $SIG{PIPE} = 'IGNORE';
while (1) {
  my $c = $l->accept or next;
  my $k = fork;
  if (!defined $k || $k) { close $c; next }
  close $l;
  my $u;
  # On a remote runtime the socket's relay may come up just after the code starts.
  for (1 .. 50) { $u = IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => $sock) and last; select(undef, undef, undef, 0.1) }
  exit 0 unless $u;
  my %peer = (fileno($c) => $u, fileno($u) => $c);
  my %open = (fileno($c) => $c, fileno($u) => $u);
  while (%open) {
    my $rin = ''; vec($rin, $_, 1) = 1 for keys %open;
    next if select(my $r = $rin, undef, undef, undef) < 0;
    for my $fd (keys %open) {
      next unless vec($r, $fd, 1);
      my $n = sysread($open{$fd}, my $b, 65536);
      if (!$n) { shutdown($peer{$fd}, 1); delete $open{$fd}; exit 0 unless defined $n; next }
      my $o = 0;
      while ($o < $n) { my $w = syswrite($peer{$fd}, $b, $n - $o, $o); exit 0 unless defined $w; $o += $w }
    }
  }
  exit 0;
}
