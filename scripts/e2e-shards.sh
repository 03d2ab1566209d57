#!/usr/bin/env bash
# e2e-shards.sh N DURATIONS < test names: splits the tests named on stdin into
# N shares of about the same time and prints each share as a `go test -run`
# alternation (A|B|C), one per line. DURATIONS holds "seconds name" lines
# from an earlier run (scripts/e2e-durations.sh makes it from a run's logs); a test it
# does not know counts as the median of those it does, so a new test still
# lands somewhere sensible. Longest first, each into the share with the least
# time so far: the usual greedy split, within a few percent of even here.
set -euo pipefail
n=${1:?usage: e2e-shards.sh N DURATIONS < names}
durations=${2:?usage: e2e-shards.sh N DURATIONS < names}
[ "$n" -ge 1 ] 2>/dev/null || { echo "e2e-shards.sh: N must be a whole number >= 1, not $n" >&2; exit 2; }
[ -f "$durations" ] || durations=/dev/null
awk -v n="$n" '
  FILENAME == ARGV[1] { if (NF >= 2 && $1 + 0 == $1) { d[$2] = $1 + 0; known[++k] = $1 + 0 }; next }
  NF { name[++m] = $1 }
  END {
    if (m == 0) exit
    # the median of the known durations: the guess for a test not in the file
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (known[j] < known[i]) { t = known[i]; known[i] = known[j]; known[j] = t }
    guess = k ? known[int((k + 1) / 2)] : 1
    for (i = 1; i <= m; i++) w[i] = (name[i] in d) ? d[name[i]] : guess
    # longest first (names break ties, so the split is the same every run)
    for (i = 1; i <= m; i++) ord[i] = i
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) {
      a = ord[i]; b = ord[j]
      if (w[b] > w[a] || (w[b] == w[a] && name[b] < name[a])) { ord[i] = b; ord[j] = a }
    }
    for (s = 1; s <= n; s++) load[s] = 0
    for (i = 1; i <= m; i++) {
      best = 1
      for (s = 2; s <= n; s++) if (load[s] < load[best]) best = s
      load[best] += w[ord[i]]
      share[best] = share[best] (share[best] == "" ? "" : "|") name[ord[i]]
    }
    for (s = 1; s <= n; s++) if (share[s] != "") print share[s]
  }
' "$durations" -
