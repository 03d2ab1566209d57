#!/usr/bin/env bash
# Fails when a tracked file is a compiled binary (ELF, anywhere) or larger
# than 1 MB outside a testdata/ directory: build outputs belong in bin/ and
# big data in testdata/ at most (tracker issue 8). No other exemptions are
# needed today: the largest other files are go.sum, the generated
# sdk/internal/pb code and test/node/package-lock.json, all under 50 KB.
set -euo pipefail
cd "$(dirname "$0")/.."

# One perl process for all files (perl-base is part of every Debian).
git ls-files -z | perl -0ne '
  chomp(my $f = $_);
  # Deleted in the work tree, a symlink (its size is the name of its
  # target) or a submodule: nothing to read.
  next if -l $f || !-f $f;
  open(my $fh, "<", $f) or next;
  read($fh, my $magic, 4);
  if ($magic eq "\x7fELF") {
    print STDERR "tracked file is an ELF binary: $f (build outputs go to bin/, which is ignored)\n";
    $bad = 1;
  }
  if ("/$f" !~ m{/testdata/} && -s $f > 1024 * 1024) {
    printf STDERR "tracked file is larger than 1 MB: %s (%d bytes); put test data under testdata/ or leave it out\n", $f, -s $f;
    $bad = 1;
  }
  END { exit($bad ? 1 : 0) }
'
