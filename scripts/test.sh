#!/usr/bin/env bash
# Runs every test: lint, unit tests (with the race detector where cgo-free
# packages allow), then end-to-end tests against real Podman, kernels and MCP
# clients. Assumes `make setup build` ran (make test does that first).
set -euo pipefail
cd "$(dirname "$0")/.."
export FORGE_E2E=1

echo "== lint"
make -s lint

echo "== unit and end-to-end tests"
# -race needs cgo; the audit log's concurrency test is where it matters.
CGO_ENABLED=1 GOFLAGS= go test -count=1 -race ./core/audit/ ./core/policy/
go test -count=1 -timeout 40m ./... ./sdk/... 2>&1 | tee /tmp/forge-test.log
