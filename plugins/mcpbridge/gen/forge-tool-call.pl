#!/usr/bin/perl
# forge-tool-call: R's helper for the MCP-Forge tool bridge (R 4.2 has no
# unix-socket connections). Reads one NDJSON request on stdin, sends it to
# the socket at $FORGE_TOOLS_SOCKET, prints the one answer line. Perl is in
# every Debian image (perl-base is essential). Generated; do not edit.
use strict;
use warnings;
use Socket;
use IO::Socket::UNIX;

my $max  = __MAX_MESSAGE__;
my $path = $ENV{FORGE_TOOLS_SOCKET} or die "forge-tool-call: FORGE_TOOLS_SOCKET is not set: this run was not granted any tools\n";
my $req  = do { local $/; <STDIN> };
die "forge-tool-call: no request on stdin\n" unless defined $req && length $req;
$req =~ s/\s+\z//;
die "forge-tool-call: the request is over $max bytes\n" if length($req) + 1 > $max;
my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $path)
  or die "forge-tool-call: cannot connect to the tool bridge at $path: $!\n";
$s->autoflush(1);
print {$s} $req, "\n" or die "forge-tool-call: cannot send: $!\n";
my $line = <$s>;
die "forge-tool-call: the tool bridge closed the connection without an answer\n" unless defined $line;
die "forge-tool-call: the answer is over $max bytes\n" if length($line) > $max;
print $line;
close $s;
