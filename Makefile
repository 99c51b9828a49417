# es-changefeed — build and test.
#
#   make test    install redis-server if missing, then go test -race ./...
#   make bench   the benchmarks reported in docs/PERFORMANCE.md
#   make reliability [RUNS=n]
#                the reliability suite (also part of make test) n times,
#                then its figures as the table of docs/RELIABILITY.md

GO ?= go
export GOFLAGS ?= -buildvcs=false

.PHONY: test bench vet redis-server build reliability

build:
	$(GO) build ./...

redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server missing: installing it with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server >/dev/null; \
	}
	@redis-server --version

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

test: redis-server vet
	$(GO) test -race -count=1 -timeout 15m ./...

bench: redis-server
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./tests/esemu/ | tee /tmp/esemu-bench.txt

RUNS ?= 1
FIGURES ?= /tmp/escf-figures.jsonl

reliability: redis-server
	@rm -f $(FIGURES)
	ESCF_FIGURES=$(FIGURES) $(GO) test -count=$(RUNS) -timeout 60m -run 'TestReliability|TestAudit' ./tests/e2e/
	$(GO) run ./tests/figures $(FIGURES)
