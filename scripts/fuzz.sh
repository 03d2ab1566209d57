#!/usr/bin/env bash
# Runs every fuzz target (func FuzzX in a _test.go file) for FUZZTIME each,
# one target per `go test -fuzz` (Go fuzzes one target at a time). A target
# fails when the fuzzer finds an input that breaks it ("Failing input written
# to ..."). Go's fuzzing engine can also end a short run with a bare "context
# deadline exceeded" when the time runs out while a worker is busy: that is
# not a finding, so such a run is tried once more and then reported, not
# failed.
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s} minimize=${FUZZMINIMIZETIME:-200x} only=${FUZZ:-.}
status=0
while IFS=: read -r file _ decl; do
  name=${decl#func }; name=${name%%(*}; pkg=./$(dirname "$file")
  grep -qE "$only" <<<"$name" || continue
  for try in 1 2; do
    echo "== fuzz $name in $pkg for $fuzztime"
    out=$(go test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" "$pkg" 2>&1)
    rc=$?
    printf '%s\n' "$out" | tail -n 4
    if [ $rc = 0 ]; then break; fi
    if grep -q 'Failing input written' <<<"$out" || ! grep -q 'context deadline exceeded' <<<"$out"; then
      printf '%s\n' "$out"; status=1; break
    fi
    [ $try = 2 ] && echo "warning: $name twice ended on the fuzzing engine's deadline, with no failing input"
  done
done < <(git grep -n --untracked -E '^func Fuzz[A-Za-z0-9_]*\(' -- '*_test.go')
exit $status
