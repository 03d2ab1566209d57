#!/usr/bin/env bash
# e2e-durations.sh LOG...: the "seconds name" lines scripts/e2e-shards.sh
# splits test/e2e by, from `go test -v` logs of test/e2e (scripts/test.sh
# keeps them as e2e-N.log in its logs directory). Write them to
# test/e2e/testdata/durations after a full run on a machine like CI's.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: e2e-durations.sh e2e-0.log [e2e-1.log ...]" >&2; exit 2; }
sed -n 's/^--- \(PASS\|FAIL\|SKIP\): \([A-Za-z0-9_]*\) (\([0-9.]*\)s)$/\3 \2/p' "$@" |
  awk '{ printf "%.0f %s\n", ($1 < 1 ? 1 : $1), $2 }' | sort -k2
