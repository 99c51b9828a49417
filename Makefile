# es-changefeed — build and test.
#
#   make test    install redis-server and docker-compose if missing, then
#                go test -race ./... (compose/*.yml checked with docker-compose)
#   make bench   the benchmarks reported in docs/PERFORMANCE.md
#   make reliability [RUNS=n]
#                the reliability suite (also part of make test) n times,
#                then its figures as the table of docs/RELIABILITY.md
#   make fuzz    every fuzz target for FUZZTIME (default 10s) each; plain
#                `go test` already runs their seed corpora as unit tests

GO ?= go
export GOFLAGS ?= -buildvcs=false

.PHONY: test bench vet redis-server docker-compose build fuzz reliability

build:
	$(GO) build ./...

redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server missing: installing it with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server >/dev/null; \
	}
	@redis-server --version

# Debian's docker-compose (v1.29) checks compose/*.yml with `config -q`;
# that needs no Docker engine (hence no recommended packages).
docker-compose:
	@command -v docker-compose >/dev/null 2>&1 || { \
		echo "docker-compose missing: installing it with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends docker-compose >/dev/null; \
	}
	@docker-compose version --short

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

test: redis-server docker-compose vet
	ESCF_REQUIRE_COMPOSE=1 $(GO) test -race -count=1 -timeout 15m ./...

bench: redis-server
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./tests/esemu/ | tee /tmp/esemu-bench.txt

# Every fuzz target (found by its func Fuzz… line) for FUZZTIME each; one
# instrumented test binary per package (tests/fuzz/run.sh).
FUZZTIME ?= 10s

fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) tests/fuzz/run.sh

RUNS ?= 1
FIGURES ?= /tmp/escf-figures.jsonl

reliability: redis-server
	@rm -f $(FIGURES)
	ESCF_FIGURES=$(FIGURES) $(GO) test -count=$(RUNS) -timeout 60m -run 'TestReliability|TestAudit' ./tests/e2e/
	$(GO) run ./tests/figures $(FIGURES)
