# MCP-Forge. Quick start on a fresh Debian machine:  make run  /  make test
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/go/bin
# The Podman bindings need these tags to build without cgo libraries.
export GOFLAGS := -tags=containers_image_openpgp,remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper
export CGO_ENABLED := 0

BIN       := bin
PLUGINS   := $(notdir $(wildcard plugins/*))
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/mcp-forge/mcp-forge/core/version.Version=$(VERSION)

.PHONY: all setup setup-user images-archive build plugins images run test test-unit test-e2e bench fuzz lint proto proto-check clean doctor

all: build

## setup: install what is missing, configure Podman, start its service, build images
setup:
	@scripts/setup.sh

## setup-user: rootless Podman for a non-root user (run as that user; see README)
setup-user:
	@scripts/setup-user.sh

## images-archive: (root) save the built images for `make setup-user IMAGES_ARCHIVE=...`
IMAGES_ARCHIVE ?= /var/tmp/mcp-forge-images.tar
images-archive:
	podman save -m -o $(IMAGES_ARCHIVE).tmp mcp-forge/python:3.11 mcp-forge/r:4.2
	chmod 0644 $(IMAGES_ARCHIVE).tmp && mv -f $(IMAGES_ARCHIVE).tmp $(IMAGES_ARCHIVE)

## build: the server and every plugin into bin/
build: plugins
	go build -ldflags '$(LDFLAGS)' -o $(BIN)/mcp-forge ./cmd/mcp-forge

plugins:
	@mkdir -p $(BIN)
	@for p in $(PLUGINS); do go build -ldflags '$(LDFLAGS)' -o $(BIN)/mcp-forge-plugin-$$p ./plugins/$$p || exit 1; done

## images: build the sandbox images offline (skips unchanged recipes)
images:
	@images/build.sh

## run: set up, build, and start the server on stdio with the built-in defaults
run: setup build
	@$(BIN)/mcp-forge serve

doctor: build
	@$(BIN)/mcp-forge doctor

## test: every test, unit and end-to-end against real Podman
test: setup build
	@scripts/test.sh

test-unit:
	go test ./... ./sdk/...

test-e2e: setup build
	FORGE_E2E=1 go test -count=1 -timeout 30m ./test/...

## bench: benchmarks against baselines measured in the same run
bench: setup build
	FORGE_E2E=1 go test -run '^$$' -bench Stateless -benchtime 20x -timeout 30m ./test/bench/
	FORGE_E2E=1 go test -run '^$$' -bench Session -benchtime 100x -timeout 30m ./test/bench/
	FORGE_E2E=1 go test -run '^$$' -bench RoundTrip -benchtime 200x ./sdk/jupyter/

## fuzz: fuzz the package-spec parser (FUZZTIME=1m by default)
fuzz:
	go test -run '^$$' -fuzz FuzzParseSpec -fuzztime $(or $(FUZZTIME),1m) ./core/packages/

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'); exit 1; }
	go vet ./... ./sdk/...

clean:
	rm -rf $(BIN)

## proto: regenerate sdk/internal/pb from sdk/proto (Debian protoc + Go plugins)
proto:
	@command -v protoc-gen-go >/dev/null || GOFLAGS= go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	@command -v protoc-gen-go-grpc >/dev/null || GOFLAGS= go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
	@mkdir -p sdk/internal/pb
	protoc -I sdk/proto --go_out=sdk/internal/pb --go_opt=paths=source_relative \
	  --go-grpc_out=sdk/internal/pb --go-grpc_opt=paths=source_relative \
	  sdk/proto/forge/plugin/v1/*.proto
	@mv sdk/internal/pb/forge/plugin/v1/*.go sdk/internal/pb/ && rm -rf sdk/internal/pb/forge

## proto-check: fail if the committed generated code is stale
proto-check: proto
	@git diff --exit-code -- sdk/internal/pb || { echo "generated code is stale: run make proto and commit"; exit 1; }
