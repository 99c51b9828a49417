# es-changefeed — build and test.
#
#   make test    install redis-server, PostgreSQL, a C compiler, docker-compose,
#                promtool, haproxy, a JDK 17 and Maven if missing, check compose/prometheus/ with promtool,
#                then go test -race ./... (the emulator; compose/*.yml
#                checked with docker-compose, the metric names of the
#                dashboard and alerts against a running relay and consumer;
#                tests/engines on a real
#                OpenSearch 2), then the real-cluster part of the suite on a
#                real OpenSearch 2 node (ESCF_TEST_ENGINE=opensearch-2)
#   make build   ./es-changefeed, stamped with the version (git describe)
#                and the commit that `es-changefeed version` prints
#   make examples
#                the pinned packages of the Python and Node example workers
#                (a venv in ~/.cache/escf-examples, examples/node/node_modules);
#                make test needs them
#   make test-engines
#                the real-cluster part of the suite on each engine line
#                of the engine table (internal/engine/versions.txt), then
#                docs/COMPATIBILITY.md and docs/SECURITY.md's privilege
#                tables from what ran
#   make security-tables
#                TestSecurity_LeastPrivileges on each engine with a security
#                plugin (secured real nodes: each role of docs/SECURITY.md,
#                whole and with each grant removed), then that document's
#                generated tables from what ran
#   make golden  re-record the real engines' answers the emulator is held to
#   make bench   the benchmarks reported in docs/PERFORMANCE.md
#   make reliability [RUNS=n]
#                the reliability suite (also part of make test) n times,
#                then its figures as the table of docs/RELIABILITY.md
#   make fuzz    every fuzz target for FUZZTIME (default 10s) each; plain
#                `go test` already runs their seed corpora as unit tests
#   make vet     go vet, staticcheck (pinned as a tool in go.mod, run as
#                `go tool staticcheck`; staticcheck.conf) and gofmt; make
#                test runs it first

GO ?= go
export GOFLAGS ?= -buildvcs=false

.PHONY: test test-engines security-tables golden bench vet redis-server postgresql cc docker-compose promtool haproxy rules java examples build fuzz reliability

# The binary at ./es-changefeed, stamped like the image: the version
# (git describe) and the commit (-buildvcs=false keeps Go from stamping
# it itself, so -X main.revision does).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X main.version=$(VERSION) -X main.revision=$(REVISION)" -o es-changefeed .
	$(GO) build ./...

redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server missing: installing it with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server >/dev/null; \
	}
	@redis-server --version

# Debian's postgresql: tests/pgtest runs initdb and postgres from
# /usr/lib/postgresql/<version>/bin (the postgres sink's tests).
postgresql:
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { \
		echo "postgresql missing: installing it with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null; \
	}
	@ls -d /usr/lib/postgresql/*/bin/postgres | tail -1

# A C compiler builds the slow-fsync LD_PRELOAD shim of tests/redistest
# (appendfsync everysec losing acknowledged commits on every kill).
cc:
	@command -v cc >/dev/null 2>&1 || { \
		echo "a C compiler is missing: installing gcc with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null; \
	}
	@cc --version | head -1

# Debian's docker-compose (v1.29) checks compose/*.yml with `config -q`;
# that needs no Docker engine (hence no recommended packages).
docker-compose:
	@command -v docker-compose >/dev/null 2>&1 || { \
		echo "docker-compose missing: installing it with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends docker-compose >/dev/null; \
	}
	@docker-compose version --short

# Debian's prometheus package provides promtool, which checks the alert
# rules of compose/prometheus/ (no recommended packages: only the binaries).
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
		echo "promtool missing: installing prometheus with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	}
	@promtool --version 2>&1 | head -1

# Debian's haproxy: the TLS proxy in front of a secured Elasticsearch 7
# (tests/engines/tlsproxy.go; x-pack-security is not on Maven Central for
# 7.17), and tests/engines' TestTLSProxy. In /usr/sbin, which a user's PATH
# may lack: the package looks there too.
haproxy:
	@{ command -v haproxy >/dev/null 2>&1 || test -x /usr/sbin/haproxy; } || { \
		echo "haproxy missing: installing it with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends haproxy >/dev/null; \
	}
	@{ command -v haproxy >/dev/null 2>&1 && haproxy -v || /usr/sbin/haproxy -v; } | head -1

# The alert rules, their unit tests and the scrape configuration of
# compose/prometheus/ (the metric names the rules and the Grafana dashboard
# query are checked against a running relay and consumer by
# compose/monitoring_test.go, part of go test).
rules: promtool
	promtool check rules compose/prometheus/alerts.yml
	promtool test rules compose/prometheus/alerts_test.yml
	promtool check config compose/prometheus/prometheus.yml

# tests/engines runs real nodes from Maven Central's jars: Maven, and a
# JDK 17 (OpenSearch 2, Elasticsearch 7 and 8). OpenSearch 3 and
# Elasticsearch 9 need Java 21+: a JDK under /usr/lib/jvm or ESCF_JAVA_HOME.
java:
	@{ command -v mvn >/dev/null 2>&1 && command -v javac >/dev/null 2>&1; } || { \
		echo "Maven or a JDK missing: installing openjdk-17-jdk-headless and maven with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends openjdk-17-jdk-headless maven >/dev/null; \
	}
	@mvn -v 2>/dev/null | head -1

# examples/ (Python and Node workers, run by tests/e2e/examples_test.go):
# redis-py into a venv under ~/.cache, ioredis into examples/node with
# npm ci, both pinned; python3-venv and Node from apt-get when missing.
export ESCF_EXAMPLES_VENV ?= $(HOME)/.cache/escf-examples/venv
examples:
	@{ command -v python3 >/dev/null 2>&1 && python3 -c 'import venv, ensurepip' 2>/dev/null && command -v npm >/dev/null 2>&1; } || { \
		echo "python3-venv or Node missing: installing python3-venv, nodejs and npm with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends python3-venv nodejs npm >/dev/null; \
	}
	@test -x $(ESCF_EXAMPLES_VENV)/bin/python || python3 -m venv $(ESCF_EXAMPLES_VENV)
	@$(ESCF_EXAMPLES_VENV)/bin/python -m pip install -q --disable-pip-version-check -r examples/python/requirements.txt
	@cd examples/node && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --silent --no-audit --no-fund; }
	@echo "examples: $$($(ESCF_EXAMPLES_VENV)/bin/python -c 'import redis; print("redis-py", redis.__version__)'), ioredis $$(node -p 'require("./examples/node/node_modules/ioredis/package.json").version')"

# go vet, staticcheck (a go.mod tool: `go tool` builds the pinned
# version; staticcheck.conf says which check is off and why), gofmt.
vet:
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

# The real-cluster part of the e2e suite: with ESCF_TEST_ENGINE set, the
# tests that need only a cluster run on a real node of that engine, the
# node-kill and failover tests start real clusters of their own, and the
# tests that need the emulator's controls skip. Each engine's go test -json
# output and figures go to $(ENGINE_RESULTS); tests/figures prints the
# counts and the failed tests' output, and writes docs/COMPATIBILITY.md.
ENGINE_TESTS = ./tests/engines/ ./tests/e2e/
# The engine lines, read from the engine table (the first field of each
# line that is not a comment); DEFAULT_ENGINE is the one make test runs the
# suite on (tests/engines.DefaultEngine), OTHER_ENGINES the rest (.ci/run).
ALL_ENGINES := $(shell awk '$$1 ~ /^[a-z]+-[0-9]+$$/ {print $$1}' internal/engine/versions.txt)
DEFAULT_ENGINE = opensearch-2
OTHER_ENGINES = $(filter-out $(DEFAULT_ENGINE),$(ALL_ENGINES))
ENGINES ?= $(ALL_ENGINES)
ENGINE_RESULTS ?= /tmp/escf-engines
# Engines run at once by make test-engines (their JVMs mostly wait).
ENGINE_JOBS ?= 1
# A go test -skip pattern for make test-engines (none by default).
ENGINE_SKIP ?=

test: redis-server postgresql cc docker-compose promtool haproxy java examples vet rules
	ESCF_REQUIRE_COMPOSE=1 $(GO) test -race -count=1 -timeout 15m $$($(GO) list ./... | grep -v '/tests/engines$$')
	@$(MAKE) --no-print-directory engine-$(DEFAULT_ENGINE) RACE=-race

engine-%:
	@mkdir -p $(ENGINE_RESULTS) && rm -f $(ENGINE_RESULTS)/$*.json $(ENGINE_RESULTS)/$*.figures.jsonl
	@echo "== the real-cluster suite on $* (ESCF_TEST_ENGINE=$* go test $(RACE) $(ENGINE_TESTS))"
	@start=$$(date +%s); st=0; \
	ESCF_TEST_ENGINE=$* ESCF_FIGURES=$(ENGINE_RESULTS)/$*.figures.jsonl \
		$(GO) test $(RACE) $(if $(ENGINE_SKIP),-skip '$(ENGINE_SKIP)') -json -count=1 -timeout 30m $(ENGINE_TESTS) > $(ENGINE_RESULTS)/$*.json || st=1; \
	echo "== $*: $$(( $$(date +%s) - start )) s"; \
	$(GO) run ./tests/figures summary $(ENGINE_RESULTS)/$*.json "[$*] " || st=1; \
	exit $$st

test-engines: redis-server cc haproxy java
	@status=0; $(MAKE) --no-print-directory -k -j$(ENGINE_JOBS) $(addprefix engine-,$(ENGINES)) || status=1; \
	$(GO) run ./tests/figures compat $(ENGINE_RESULTS) docs/COMPATIBILITY.md && echo "docs/COMPATIBILITY.md written from $(ENGINE_RESULTS)"; \
	$(GO) run ./tests/figures privileges $(ENGINE_RESULTS) docs/SECURITY.md && echo "docs/SECURITY.md's privilege tables written from $(ENGINE_RESULTS)"; \
	exit $$status

# The least-privilege proof alone, per engine (the test skips on engines
# without a security plugin); its results go to $(SECURITY_RESULTS).
SECURITY_RESULTS ?= /tmp/escf-security
security-tables: redis-server cc haproxy java
	@mkdir -p $(SECURITY_RESULTS); status=0; \
	for e in $(ENGINES); do \
		echo "== TestSecurity_LeastPrivileges on $$e"; \
		ESCF_TEST_ENGINE=$$e $(GO) test -json -count=1 -timeout 20m -run '^TestSecurity_LeastPrivileges$$' ./tests/e2e/ > $(SECURITY_RESULTS)/$$e.json || status=1; \
		$(GO) run ./tests/figures summary $(SECURITY_RESULTS)/$$e.json "[$$e] " || status=1; \
	done; \
	$(GO) run ./tests/figures privileges $(SECURITY_RESULTS) docs/SECURITY.md && echo "docs/SECURITY.md's privilege tables written from $(SECURITY_RESULTS)"; \
	exit $$status

# Records the answers of the five real engines to the calls the relay,
# resync, status and the sinks make into internal/esemu/testdata/golden/
# (TestGolden holds the emulator to them).
golden: java
	$(GO) run ./tests/golden/cmd/golden --engine all

bench: redis-server
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./internal/esemu/ | tee /tmp/esemu-bench.txt

# Every fuzz target (found by its func Fuzz… line) for FUZZTIME each; one
# instrumented test binary per package (tests/fuzz/run.sh).
FUZZTIME ?= 10s

fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) tests/fuzz/run.sh

RUNS ?= 1
FIGURES ?= /tmp/escf-figures.jsonl

reliability: redis-server postgresql cc
	@rm -f $(FIGURES)
	ESCF_FIGURES=$(FIGURES) $(GO) test -count=$(RUNS) -timeout 60m -run 'TestReliability|TestAudit' ./tests/e2e/
	$(GO) run ./tests/figures $(FIGURES)
