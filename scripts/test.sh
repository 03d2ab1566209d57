#!/usr/bin/env bash
# Runs every test: lint, repository hygiene, generated-code freshness, the
# race detector on the concurrent packages, each fuzz target for a bounded
# time, then unit and end-to-end tests against real Podman and real MCP
# clients. `make test` runs `make setup build` first.
#   STATICCHECK=1  make lint also runs staticcheck (off until the tree is clean)
#   FUZZTIME=30s   fuzz each target longer (default 10s; 0 skips fuzzing, the
#                  seed corpora still run with the unit tests)
set -euo pipefail
cd "$(dirname "$0")/.."
export FORGE_E2E=1

echo "== lint"
make -s lint

echo "== hygiene: no tracked binaries or big files; modules tidy and building on their own"
make -s hygiene

echo "== generated protobuf code is up to date"
make -s proto-check

echo "== real MCP client from npm (TypeScript SDK)"
if [ ! -d test/node/node_modules/@modelcontextprotocol/sdk ]; then
  (cd test/node && npm ci --no-audit --no-fund --loglevel=error)
fi

echo "== race detector on the concurrent packages"
make -s race

fuzztime=${FUZZTIME:-10s}
if [ "$fuzztime" != 0 ]; then
  echo "== fuzz targets, $fuzztime each"
  make -s fuzz FUZZTIME="$fuzztime"
fi

echo "== unit and end-to-end tests"
go test -count=1 -timeout 40m ./... ./sdk/...
