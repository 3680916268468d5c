# mediajobs: `make run` starts a dev stack, `make test` runs the whole suite.
# Both install what they need first: `make run` only the dev stack's needs
# (ffmpeg, curl, bubblewrap, Nomad with its UI), `make test` the test tools too.

GO        ?= go
BIN       := bin/mediajobs
# mediajobs_build_info{version} and the webhook User-Agent say this.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# A count, not a duration: a -fuzztime duration races Go's fuzz coordinator
# (golang/go#75804, unfixed before Go 1.27) and fails with a bare
# "context deadline exceeded" on a busy machine.
FUZZTIME  ?= 50000x
export MEDIAJOBS_HTTP_ADDR ?= 127.0.0.1:8080

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## what make run needs: ffmpeg, curl, bubblewrap (apt-get), Nomad v1.11.3 with its UI built into ~/.cache/mediajobs; MinIO only with MEDIAJOBS_STORAGE=s3
	@deploy/scripts/install-deps.sh dev

.PHONY: test-deps
test-deps: ## what make test needs besides: chromium, promtool (apt-get) and MinIO built into ~/.cache/mediajobs
	@deploy/scripts/install-deps.sh test

.PHONY: build
build: ## build bin/mediajobs
	@echo "==> build $(BIN) (first time: about 3 minutes)" >&2
	$(GO) build -ldflags "-X github.com/mediajobs/mediajobs.Version=$(VERSION)" -o $(BIN) ./cmd/mediajobs

.PHONY: docker
docker: ## start dockerd if needed (--bridge=none --iptables=false --ip-masq=false) and build the worker image
	@deploy/scripts/start-dockerd.sh
	@deploy/worker/build-local.sh

.PHONY: run
run: ## start Nomad (dev) and mediajobs dev; MEDIAJOBS_DRIVER=docker runs the cpu pool in containers
	@# Nomad's build (the longest step, once) in the background, deps and build side
	@# by side: mediajobs comes up before Nomad is built, and jobs wait for it.
	@deploy/scripts/nomad-background.sh start
	@MEDIAJOBS_NOMAD_BACKGROUND=1 $(MAKE) --no-print-directory -j2 deps build
	@if [ "$${MEDIAJOBS_DRIVER:-raw_exec}" = docker ]; then $(MAKE) --no-print-directory docker; fi
	@deploy/scripts/run-dev.sh

.PHONY: cluster
cluster: deps build ## a cluster on loopback: 3 etcd members, a Nomad server and 2 clients, MinIO, 2 gateways (MEDIAJOBS_HTTP_ADDR, MEDIAJOBS_HTTP_ADDR2) and 2 dispatchers
	$(GO) build -o bin/mediajobs-cluster ./cmd/mediajobs-cluster
	NOMAD_BIN=$$(deploy/scripts/install-nomad.sh) MINIO_BIN=$$(deploy/scripts/install-minio.sh) bin/mediajobs-cluster

.PHONY: check
check: ## gofmt, vet, and the one door into etcd: no code but store/'s and testenv/'s imports go.etcd.io (the rest use store/'s verbs; tests may)
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed on:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	@bad=$$($(GO) list -f '{{$$p := .ImportPath}}{{range .Imports}}{{$$p}} imports {{.}}{{"\n"}}{{end}}' ./... | grep ' imports go\.etcd\.io/' | grep -Ev '^github\.com/mediajobs/mediajobs/(store|testenv)(/| )'); \
	test -z "$$bad" || { echo "only store/ (and testenv/) talk to etcd; reach it through store/'s verbs instead:"; echo "$$bad"; exit 1; }

# TESTP: test binaries run side by side. Most of their time is waiting (etcd,
# Nomad, ffmpeg in real time, timeouts), and the end-to-end suite is three of
# them (e2e/devstack, e2e/cluster, e2e/warm), so more run at once than there
# are cores; go test's default (one per core) would queue them behind each other.
TESTP ?= 4
# The longest test binaries first (go test starts packages in the order named;
# ./... adds the rest, each once): the 2 cores stay busy to the end instead of
# waiting on one long binary that started last.
SLOWPKGS := ./e2e/cluster ./dispatcher ./e2e/devstack ./testenv/cluster ./e2e/warm ./chunked ./runner ./gateway ./jobspecs ./store

.PHONY: test
test: test-deps docker check ## the whole suite against real etcd, Nomad, Docker and ffmpeg, plus check (gofmt, vet, import rules) and short fuzz runs
	NOMAD_BIN=$$(deploy/scripts/install-nomad.sh) CI=$${CI:-true} $(GO) test -count=1 -p $(TESTP) -timeout=20m $(SLOWPKGS) ./...
	$(GO) test -run='^$$' -fuzz=FuzzPrepare -fuzztime=$(FUZZTIME) ./command/
	$(GO) test -run='^$$' -fuzz=FuzzCreateRequest -fuzztime=$(FUZZTIME) ./gateway/
	$(GO) test -run='^$$' -fuzz=FuzzPipelinePlan -fuzztime=$(FUZZTIME) ./gateway/

# The quick loop: installs nothing; under -short a missing component skips, CI or
# not (testenv). -p 8: the packages mostly wait (etcd, timeouts, retries), so more
# of them run at once than there are cores; the longest first, as in test.
.PHONY: test-short
test-short: ## the tests that need Go alone (and ffmpeg when installed), in about 2 minutes; no Nomad, Docker, MinIO, Chromium or bubblewrap
	$(GO) test -short -count=1 -p 8 ./chunked ./runner ./gateway ./store ./dispatcher ./...

.PHONY: fmt
fmt: ## gofmt the tree
	gofmt -w .

.PHONY: clean
clean: ## remove bin/ and the dev data in .data/
	rm -rf bin .data

BENCHTIME  ?= 2s
BENCHCOUNT ?= 5
E2ECOUNT   ?= 3
SCALECOUNT ?= 3
# The soak (make soak, and once at the end of make bench; 0 skips it there), and
# go test's limit for it: the duration plus the stack's start and the checks after.
SOAK_DURATION ?= 15m
SOAK_TIMEOUT  ?= 45m
SOAK = MEDIAJOBS_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -run '^$$' -bench '^BenchmarkSoak$$' -benchtime=1x -count=1 -timeout=$(SOAK_TIMEOUT) ./bench/e2e/ -e2e.soak 2>&1

.PHONY: bench
bench: ## gateway create/GET beside raw etcd and bare fiber, 200 MB transfers beside MinIO's client; the dispatcher at 10,000 jobs beside its old path, fair share, the pass at 100,000 queued, warm done-apply, the janitor at 100,000 held; chunked encoding beside one encode (720p: 2 minutes of x264, 60 s of x265; BENCH_LONG=1 for 2 minutes of both); on Nomad: job latency and throughput beside raw Nomad, warm pools, webhooks; then the soak (SOAK_DURATION=0 skips it) (docs/benchmarks.md)
	$(GO) build -o bin/bench-report ./bench/report
	{ for i in $$(seq $(BENCHCOUNT)); do $(GO) test -run '^$$' -bench . -benchtime=$(BENCHTIME) -count=1 ./bench/ 2>&1; done; \
	  for i in $$(seq $(SCALECOUNT)); do $(GO) test -run '^$$' -bench Dispatcher -benchtime=1x -count=1 -timeout=30m ./dispatcher/ 2>&1; \
	    $(GO) test -run '^$$' -bench Janitor -benchtime=1x -count=1 -timeout=30m ./store/ 2>&1; done; \
	  $(GO) test -run '^$$' -bench Chunked -benchtime=1x -count=1 -timeout=60m ./chunked/ 2>&1; \
	  if [ $(E2ECOUNT) -gt 0 ] || [ "$(SOAK_DURATION)" != 0 ]; then NOMAD_BIN=$$(deploy/scripts/install-nomad.sh); export NOMAD_BIN; fi; \
	  for i in $$(seq $(E2ECOUNT)); do $(GO) test -run '^$$' -bench . -benchtime=1x -count=1 -timeout=30m ./bench/e2e/ 2>&1; done; \
	  if [ "$(SOAK_DURATION)" != 0 ]; then $(SOAK); fi; } | bin/bench-report

.PHONY: soak
soak: ## SOAK_DURATION (15m) of mixed load on Nomad: two accounts, good, failing and cancelled jobs, webhooks, warm and dispatched; every job terminal, every webhook once, gateway and dispatcher memory flat (docs/benchmarks.md)
	$(GO) build -o bin/bench-report ./bench/report
	NOMAD_BIN=$$(deploy/scripts/install-nomad.sh); export NOMAD_BIN; $(SOAK) | bin/bench-report
