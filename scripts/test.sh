#!/usr/bin/env bash
# Runs every test: lint, repository hygiene, generated-code freshness, the
# race detector on the concurrent packages, each fuzz target for a bounded
# time, then unit and end-to-end tests against real Podman and real MCP
# clients. `make test` runs `make setup build` first.
#   STATICCHECK=0  make lint skips staticcheck (on by default: the tree is clean)
#   FUZZTIME=30s   fuzz each target longer (default 10s; 0 skips fuzzing, the
#                  seed corpora still run with the unit tests)
set -euo pipefail
cd "$(dirname "$0")/.."
export FORGE_E2E=1

echo "== lint"
make -s lint

echo "== hygiene: no tracked binaries or big files; modules tidy and building on their own"
make -s hygiene

echo "== make install into a staging directory, as from a fresh clone"
scripts/check-install.sh

echo "== generated protobuf code is up to date"
make -s proto-check

echo "== plugin API: buf lint, and no breaking change to API v1"
make -s proto-lint

echo "== real MCP clients from npm (TypeScript SDK, Inspector)"
if [ ! -d test/node/node_modules/@modelcontextprotocol/sdk ] || [ ! -d test/node/node_modules/@modelcontextprotocol/inspector ]; then
  # npm ci refuses the lock because vite (a dependency of the Inspector's web
  # UI, unused by its CLI) names an optional Windows-only package the
  # registry here does not serve; npm install skips it and keeps the lock.
  (cd test/node && { npm ci --no-audit --no-fund --loglevel=error 2>/dev/null || npm install --no-audit --no-fund --loglevel=error; })
fi

echo "== MCP servers from npm the tool bridge's tests connect to (pinned)"
if [ ! -d test/mcpservers/node_modules/@modelcontextprotocol/server-everything ]; then
  (cd test/mcpservers && { npm ci --no-audit --no-fund --loglevel=error 2>/dev/null || npm install --no-audit --no-fund --loglevel=error; })
fi

echo "== race detector on the concurrent packages"
make -s race

fuzztime=${FUZZTIME:-10s}
if [ "$fuzztime" != 0 ]; then
  echo "== fuzz targets, $fuzztime each"
  make -s fuzz FUZZTIME="$fuzztime"
fi

echo "== unit and end-to-end tests"
go test -count=1 -timeout 55m ./... ./sdk/...

echo "== Kubernetes: a real single-node cluster, the end-to-end matrix on it"
scripts/test-kube.sh

echo "== nothing left on the host: no mount or loop device of a test's base path"
# Every test base path is /var/tmp/forge-*; each test fails on what its
# servers leave (test/testenv Leftovers), this catches what slipped by (a
# test that panicked). Another make test running at the same time would
# show up here too.
left=$(awk '$5 ~ /^\/var\/tmp\/forge-/ {print "mount " $5}' /proc/self/mountinfo
  for f in /sys/block/loop*/loop/backing_file; do
    if [ -r "$f" ] && grep -q '^/var/tmp/forge-' "$f"; then echo "loop $(basename "$(dirname "$(dirname "$f")")") $(cat "$f")"; fi
  done)
if [ -n "$left" ]; then
  echo "left after the tests:"
  echo "$left"
  exit 1
fi
