#!/usr/bin/env bash
# Runs every test: lint, generated-code freshness, unit tests (the race
# detector where cgo-free packages allow), then end-to-end tests against real
# Podman and real MCP clients. `make test` runs `make setup build` first.
set -euo pipefail
cd "$(dirname "$0")/.."
export FORGE_E2E=1

echo "== lint"
make -s lint

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

echo "== race detector on the concurrent core pieces"
CGO_ENABLED=1 GOFLAGS= go test -count=1 -race ./core/audit/ ./core/policy/ ./core/tenant/ ./core/metrics/

echo "== unit and end-to-end tests"
go test -count=1 -timeout 40m ./... ./sdk/...
