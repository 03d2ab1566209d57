# MCP-Forge. Quick start on a fresh Debian machine:  make run  /  make test
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/go/bin
# The Podman bindings need these tags to build without cgo libraries.
export GOFLAGS := -tags=containers_image_openpgp,remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper
export CGO_ENABLED := 0

BIN       := bin
PLUGINS   := $(notdir $(patsubst %/main.go,%,$(wildcard plugins/*/main.go)))
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/mcp-forge/mcp-forge/core/version.Version=$(VERSION)


.PHONY: all help setup setup-user images-archive build agent-image plugins images run test test-unit test-hermetic test-e2e bench lint staticcheck fuzz hygiene race proto proto-check proto-lint buf proto-baseline clean doctor install kube-up kube-down test-kube test-gvisor bench-kube bench-cluster

## all: the same as build
all: build

## help: list the targets and what they do
help:
	@grep -E '^## [a-z0-9-]+:' $(MAKEFILE_LIST) | sed -E 's/^## ([a-z0-9-]+): */\1\t/' | awk -F'\t' '{printf "  %-12s %s\n", $$1, $$2}'

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
	go build -ldflags '$(LDFLAGS)' -o $(BIN)/mcp-forge-agent ./cmd/mcp-forge-agent

## agent-image: the image sandbox pods copy mcp-forge-agent from (FROM scratch, offline)
agent-image: build
	@images/agent/build.sh

## plugins: every plugin into bin/mcp-forge-plugin-<name>
plugins:
	@mkdir -p $(BIN)
	@for p in $(PLUGINS); do go build -ldflags '$(LDFLAGS)' -o $(BIN)/mcp-forge-plugin-$$p ./plugins/$$p || exit 1; done

## images: build the sandbox images offline (skips unchanged recipes)
images:
	@images/build.sh

## run: set up, build, and start the server on stdio with the built-in defaults
run: setup build
	@$(BIN)/mcp-forge serve

## kube-up: (root) a real single-node Kubernetes cluster on this host; prints FORGE_CONFIG=<its forge.toml> last
kube-up:
	@scripts/kube-up.sh

## test-gvisor: the end-to-end and security matrix with sandboxes under gVisor (security.isolation = "gvisor")
test-gvisor: setup build
	@scripts/test-gvisor.sh

## test-kube: the end-to-end matrix with sandboxes as pods on that cluster (up first, down after; FORGE_KUBE_KEEP=1 keeps it)
test-kube: setup build
	@scripts/test-kube.sh

## bench-kube: issue 23's table, the Kubernetes column beside the Podman one, measured in one run
bench-kube: setup build
	@cfg=$$(scripts/kube-up.sh | tail -n 1); FORGE_TEST_KUBE_CONFIG=$${cfg#FORGE_CONFIG=} $(BENCH) -bench '^BenchmarkKubernetesTable$$' -benchtime 20x | tee $(BIN)/bench-kube.txt

## bench-cluster: issue 27's per-call figures, two replicas of the core in that cluster: a session's call direct, forwarded, the ownership check
bench-cluster: setup build
	@FORGE_KUBE_KEEP=1 KUBE_BENCH='^BenchmarkReplicas$$' scripts/test-kube.sh | tee $(BIN)/bench-cluster.txt

## kube-down: (root) stop that cluster, unmount, remove its cgroups (scripts/kube-down.sh --purge also removes its state)
kube-down:
	@scripts/kube-down.sh

## doctor: build, then check this host (Podman, runtime, cgroups, images, plugins)
doctor: build
	@$(BIN)/mcp-forge doctor

## test: every test (setup and build first), unit and end-to-end against real Podman and a real Kubernetes cluster; prints the time of each leg
test:
	@scripts/test.sh

## test-unit: unit tests only (seed corpora of the fuzz targets included): no Podman, loop device or mount
test-unit:
	go test ./... ./sdk/...

## test-hermetic: the unit tier under strace, failing if it touched a loop device, a mount or Podman
test-hermetic:
	@scripts/check-hermetic.sh

## test-e2e: end-to-end tests against real Podman and real MCP clients
test-e2e: setup build
	FORGE_E2E=1 go test -count=1 -timeout 30m ./test/...

## bench: issue 13's table (figures, baselines measured in the same run, goals) into bin/bench.json
BENCH_OUT := $(BIN)/bench
BENCH     := FORGE_E2E=1 go test -run '^$$' -timeout 30m ./test/bench/
bench: setup build
	@rm -rf $(BENCH_OUT) && mkdir -p $(BENCH_OUT)
	$(BENCH) -bench '^BenchmarkStatelessWarm' -benchtime 200x | tee $(BENCH_OUT)/warm.txt
	$(BENCH) -bench '^BenchmarkStatelessPaced' -benchtime 20x | tee $(BENCH_OUT)/paced.txt
	$(BENCH) -bench '^BenchmarkStatelessColdPython$$' -benchtime 20x | tee $(BENCH_OUT)/cold.txt
	$(BENCH) -bench '^BenchmarkSession(Python|R)$$' -benchtime 200x | tee $(BENCH_OUT)/session.txt
	$(BENCH) -bench '^BenchmarkSessionChannelPython$$' -benchtime 300x | tee $(BENCH_OUT)/channel.txt
	$(BENCH) -bench '^Benchmark(SessionStartPython|ConcurrentLoad|IdleSessionMemory)$$' -benchtime 1x | tee $(BENCH_OUT)/start.txt
	$(BENCH) -bench '^BenchmarkUnderLoad$$' -benchtime 50x | tee $(BENCH_OUT)/load.txt
	$(BENCH) -bench '^BenchmarkStatelessColdDefault$$' -benchtime 20x | tee $(BENCH_OUT)/colddefault.txt
	@[ -d test/mcpservers/node_modules/@modelcontextprotocol/server-everything ] || (cd test/mcpservers && npm install --no-audit --no-fund --loglevel=error)
	FORGE_E2E=1 go test -run '^$$' -bench CallTool -benchtime 200x ./plugins/mcpbridge/ | tee $(BENCH_OUT)/bridge.txt
	$(BENCH) -bench '^BenchmarkBridge' -benchtime 200x | tee $(BENCH_OUT)/bridgecall.txt
	$(BENCH) -bench '^BenchmarkNetworkGet$$' -benchtime 200x | tee $(BENCH_OUT)/network.txt
	$(BENCH) -bench '^BenchmarkCredentialGet$$' -benchtime 200x | tee $(BENCH_OUT)/credential.txt
	$(BENCH) -bench '^BenchmarkIsolationTable$$' -benchtime 20x | tee $(BENCH_OUT)/isolation.txt
	$(BENCH) -bench '^BenchmarkSnapshot' -benchtime 3x | tee $(BENCH_OUT)/snapshot.txt
	$(BENCH) -bench '^BenchmarkIdleSessionsMemory$$' -benchtime 1x | tee $(BENCH_OUT)/suspend.txt
	$(BENCH) -bench '^BenchmarkResume100MB$$' -benchtime 10x | tee $(BENCH_OUT)/resume.txt
	FORGE_E2E=1 go test -run '^$$' -bench EnvBuild -benchtime 5x -timeout 30m ./test/environments/ | tee $(BENCH_OUT)/environments.txt
	@echo
	@go run ./test/bench/cmd/benchtable -json $(BIN)/bench.json $(BENCH_OUT)/*.txt
	@echo "(JSON: $(BIN)/bench.json; raw output: $(BENCH_OUT)/)"

## lint: gofmt, go vet and staticcheck (STATICCHECK=0 skips it)
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'); exit 1; }
	go vet ./... ./sdk/...
	@if [ "$(STATICCHECK)" = 1 ]; then $(MAKE) -s staticcheck; fi

# On by default: the tree is clean, and a new finding fails the build.
STATICCHECK         ?= 1
STATICCHECK_VERSION := v0.8.2
STATICCHECK_BIN     := $(HOME)/go/bin/staticcheck

## staticcheck: staticcheck (pinned, installed from the Go module proxy) over both modules
staticcheck:
	@$(STATICCHECK_BIN) -version 2>/dev/null | grep -qF '($(patsubst v%,%,$(STATICCHECK_VERSION)))' || \
	  GOFLAGS= GOBIN=$(dir $(STATICCHECK_BIN)) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(STATICCHECK_BIN) ./... ./sdk/...

FUZZTIME         ?= 10s
# Bounds the minimisation of each new input, so a short run mostly fuzzes.
FUZZMINIMIZETIME ?= 200x
# Only the targets whose name matches this (a regexp).
FUZZ             ?= .

## fuzz: run every fuzz target (func FuzzX in a _test.go) for FUZZTIME each; FUZZ=regexp picks some
fuzz:
	@FUZZTIME=$(FUZZTIME) FUZZMINIMIZETIME=$(FUZZMINIMIZETIME) FUZZ='$(FUZZ)' scripts/fuzz.sh

## hygiene: no binaries or big files tracked; both modules tidy and building without go.work
hygiene:
	@scripts/check-files.sh
	go mod tidy -diff
	cd sdk && go mod tidy -diff
	GOWORK=off go build ./...
	cd sdk && GOWORK=off go build ./...

# Packages with real concurrency (unit tests; a race build of the Podman
# bindings for the end-to-end tests would cost CI minutes cold).
RACE_PKGS := ./core/runtime/runtimetest/ ./core/audit/ ./core/policy/ ./core/engine/... ./core/plugins/ ./core/hostsvc/ ./core/sandbox/ ./sdk/jupyter/ ./sdk/kernel/ ./core/tenant/ ./core/metrics/ ./sdk/sdktest/ ./core/forge/... ./core/httpserver/ ./core/egress/ ./core/egress/proxy/ ./core/mcpserver/tasks/

## race: the race detector on the concurrent packages (needs gcc; cgo on for this run only)
race:
	CGO_ENABLED=1 go test -count=1 -race $(RACE_PKGS)

## clean: remove bin/
clean:
	rm -rf $(BIN)

## install: binary and plugins into $(PREFIX)/lib/mcp-forge (linked from $(PREFIX)/bin),
## systemd units, docs, and /etc/mcp-forge/forge.toml when none exists (DESTDIR for staging)
PREFIX  ?= /usr/local
DESTDIR ?=
install: build
	install -d -m 0755 $(DESTDIR)$(PREFIX)/lib/mcp-forge $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/doc/mcp-forge \
	  $(DESTDIR)/etc/systemd/system $(DESTDIR)/etc/systemd/user
	install -d -m 0700 $(DESTDIR)/etc/mcp-forge
	install -m 0755 $(BIN)/mcp-forge $(BIN)/mcp-forge-agent $(BIN)/mcp-forge-plugin-* $(DESTDIR)$(PREFIX)/lib/mcp-forge/
	ln -sfn ../lib/mcp-forge/mcp-forge $(DESTDIR)$(PREFIX)/bin/mcp-forge
	sed 's|@PREFIX@|$(PREFIX)|g' dist/systemd/mcp-forge.service > $(DESTDIR)/etc/systemd/system/mcp-forge.service
	sed 's|@PREFIX@|$(PREFIX)|g' dist/systemd/mcp-forge-user.service > $(DESTDIR)/etc/systemd/user/mcp-forge.service
	install -m 0644 forge.toml.example $(DESTDIR)/etc/mcp-forge/forge.toml.example
	test -e $(DESTDIR)/etc/mcp-forge/forge.toml || install -m 0600 dist/forge.http.toml $(DESTDIR)/etc/mcp-forge/forge.toml
	install -m 0644 README.md docs/operations.md docs/security.md $(DESTDIR)$(PREFIX)/share/doc/mcp-forge/
	@echo "installed; next: edit /etc/mcp-forge/forge.toml, then systemctl daemon-reload && systemctl enable --now mcp-forge"

## proto: regenerate sdk/internal/pb from sdk/proto (API v2 only; the core maps v1 onto it) with the pinned buf and Go plugins
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
PROTO_TOOLS := $(HOME)/.cache/mcp-forge/tools/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)
proto: buf
	@[ -x $(PROTO_TOOLS)/protoc-gen-go ] || GOFLAGS= CGO_ENABLED=0 GOBIN=$(PROTO_TOOLS) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@[ -x $(PROTO_TOOLS)/protoc-gen-go-grpc ] || GOFLAGS= CGO_ENABLED=0 GOBIN=$(PROTO_TOOLS) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@mkdir -p sdk/internal/pb
	@rm -f sdk/internal/pb/*.pb.go
	cd sdk/proto && PATH=$(PROTO_TOOLS):$$PATH $(BUF) generate --path forge/plugin/v2
	@mv sdk/internal/pb/forge/plugin/v2/*.go sdk/internal/pb/ && rm -rf sdk/internal/pb/forge

## proto-check: fail if the committed generated code is stale
proto-check: proto
	@git diff --exit-code -- sdk/internal/pb || { echo "generated code is stale: run make proto and commit"; exit 1; }

## proto-lint: buf lint, and buf breaking against the committed API v1 descriptor set
BUF_VERSION := 1.75.0
BUF := $(HOME)/go/bin/buf
buf:
	@$(BUF) --version 2>/dev/null | grep -qx '$(BUF_VERSION)' || GOFLAGS= CGO_ENABLED=0 go install github.com/bufbuild/buf/cmd/buf@v$(BUF_VERSION)

proto-lint: buf
	cd sdk/proto && $(BUF) lint && $(BUF) breaking --against api-v1.json && $(BUF) breaking --against api-v2.json

## proto-baseline: rewrite the API v2 descriptor set (only for additive changes that passed proto-lint; API v1's, api-v1.json, never changes)
proto-baseline: proto-lint
	cd sdk/proto && $(BUF) build --exclude-source-info --path forge/plugin/v2 -o api-v2.json && python3 -c "import json; d = json.load(open('api-v2.json')); f = open('api-v2.json', 'w'); json.dump(d, f, indent=1); f.write('\\n')"
