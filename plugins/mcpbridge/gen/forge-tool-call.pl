#!/usr/bin/perl
# forge-tool-call: R's link to the MCP-Forge tool bridge (R 4.2 has no
# unix-socket connections). Perl is in every Debian image (perl-base is
# essential). Generated; do not edit.
#
#   forge-tool-call               one NDJSON request on stdin, its answer on stdout
#   forge-tool-call --fifo REQ RESP
#                                 long-lived: requests from the FIFO REQ, answers
#                                 to the FIFO RESP, over one connection, until
#                                 REQ closes (R keeps one such helper per process)
use strict;
use warnings;
use Socket qw(AF_UNIX SOCK_STREAM pack_sockaddr_un);

my $max  = __MAX_MESSAGE__;
my $path = $ENV{FORGE_TOOLS_SOCKET};

sub connect_bridge {
  die "forge-tool-call: FORGE_TOOLS_SOCKET is not set: this run was not granted any tools\n" unless $path;
  socket(my $s, AF_UNIX, SOCK_STREAM, 0) or die "forge-tool-call: socket: $!\n";
  connect($s, pack_sockaddr_un($path)) or die "forge-tool-call: cannot connect to the tool bridge at $path: $!\n";
  select((select($s), $| = 1)[0]);
  return $s;
}

# One request line → its answer line (without checking ids: one in flight).
sub roundtrip {
  my ($s, $req) = @_;
  $req =~ s/\s+\z//;
  return undef, "the request is over $max bytes" if length($req) + 1 > $max;
  print {$s} $req, "\n" or return undef, "cannot send: $!";
  my $line = <$s>;
  return undef, "the tool bridge closed the connection without an answer" unless defined $line;
  return undef, "the answer is over $max bytes" if length($line) > $max;
  return $line, undef;
}

if (@ARGV == 3 && $ARGV[0] eq '--fifo') {
  # Open the FIFOs before anything can fail: R waits on them, and every
  # later failure is an answer on RESP.
  open(my $in, '<', $ARGV[1]) or die "forge-tool-call: $ARGV[1]: $!\n";
  open(my $out, '>', $ARGV[2]) or die "forge-tool-call: $ARGV[2]: $!\n";
  select((select($out), $| = 1)[0]);
  my $s = eval { connect_bridge() };
  my $err = $@;
  while (my $req = <$in>) {
    my ($id) = $req =~ /^\{"id":(\d+)/;
    $id //= 0;
    my $line;
    if ($s) {
      ($line, $err) = roundtrip($s, $req);
    }
    if (!defined $line) {
      $err =~ s/["\\]/ /g;
      $err =~ s/[\x00-\x1f]/ /g;
      print {$out} qq({"id":$id,"error":{"kind":"server","message":"forge-tool-call: $err"}}\n);
      exit 1;
    }
    print {$out} $line;
  }
  exit 0;
}

my $req = do { local $/; <STDIN> };
die "forge-tool-call: no request on stdin\n" unless defined $req && length $req;
my $s = connect_bridge();
my ($line, $err) = roundtrip($s, $req);
die "forge-tool-call: $err\n" unless defined $line;
print $line;
