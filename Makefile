# Sluice — see README.md. Needs only Go (1.26+).
GO       ?= go
CONFIG   ?= examples/quickstart.yaml
BIN      := bin/sluice
DEV_BIN  := bin/sluice-dev
PKGS     := ./...
# vtprotobuf: go-control-plane's generated marshallers, which the gRPC
# codec (extproc.Codec) uses for every reply; without the tag the same
# bytes come from proto.Marshal, more slowly.
# grpcnotrace: grpc-go without golang.org/x/net/trace (its /debug/requests
# pages, which Sluice never enables), and so without html/template: the
# binary is 9 MB smaller and 2.4 MiB less of it is resident.
TAGS     ?= vtprotobuf,grpcnotrace
GOTAGS   := -tags=$(TAGS)

.PHONY: all build build-dev run test lint vet fmt-check servers jsclients bench bench-service fuzz fuzz-targets mutation clean check-go

all: build

check-go:
	@command -v $(GO) >/dev/null 2>&1 || { echo "make: Go is not installed (need Go 1.26 or newer: https://go.dev/dl/)"; exit 1; }

# go build -v names each package it compiles (a package already in the
# build cache is not named), and go itself says "go: downloading" for each
# module it fetches. PROGRESS passes go's own lines (downloads, errors)
# through and prints a count every 25 packages, so that a first build on a
# bare machine, minutes of downloading and compiling, is not silent. The
# recipe appends go's exit status as a last line ("go-build-exit N"),
# which PROGRESS exits with: a failed build still fails make.
PROGRESS = awk -v what="$@" '/^go-build-exit [0-9]+$$/ { code = $$2; next } /^[^ ]+$$/ { n++; if (n % 25 == 0) printf "  %s: %d packages compiled\n", what, n; fflush(); next } { print; fflush() } END { if (n % 25) printf "  %s: %d packages compiled\n", what, n; exit code }'
FIRST_BUILD = echo "$@: building $(1) (the first build downloads Go modules and compiles every package, which takes minutes; later builds take seconds)"

# bin/sluice is what production runs; bin/sluice-dev holds the Envoy
# emulator and the mock provider, which the production binary never ships.
build: check-go
	@$(call FIRST_BUILD,$(BIN))
	@{ CGO_ENABLED=0 $(GO) build -v $(GOTAGS) -o $(BIN) ./cmd/sluice 2>&1; echo "go-build-exit $$?"; } | $(PROGRESS)

build-dev: check-go
	@$(call FIRST_BUILD,$(DEV_BIN))
	@{ $(GO) build -v $(GOTAGS) -o $(DEV_BIN) ./cmd/sluice-dev 2>&1; echo "go-build-exit $$?"; } | $(PROGRESS)

# The quickstart on the embedded default: the mock provider, Sluice
# (SQLite next to the config; a demo key printed once on first run) and
# the Envoy emulator in front, all on loopback. See scripts/quickstart.sh.
run: build build-dev
	CONFIG=$(CONFIG) SLUICE_BIN=$(BIN) SLUICE_DEV_BIN=$(DEV_BIN) scripts/quickstart.sh

# Every test, with the race detector, plus the lint checks and one
# iteration of every benchmark (so benchmarks keep compiling and running).
# Tests the race detector breaks (multi-megabyte bodies against ext_proc's
# message timeout; stack sizes, which its instrumentation enlarges) skip
# under it and run here without it.
RACE_FREE_TESTS := ^(TestBodyLimitAtEverySize|TestOpenStreamsKeepSmallStacks)$$
# Allocation counts the race detector blurs (its sync.Pool drops items at
# random), checked once more without it.
ALLOC_TESTS := ^TestNoAllocationWhenNothingIsHeld$$
test: check-go lint jsclients servers
	SLUICE_REQUIRE_POSTGRES=1 SLUICE_REQUIRE_REDIS=1 $(GO) test $(GOTAGS) -race -count=1 $(PKGS)
	$(GO) test $(GOTAGS) -count=1 -run='$(RACE_FREE_TESTS)' ./e2e/
	$(GO) test $(GOTAGS) -count=1 -run='^TestHandlingFitsTheFirstStack$$' ./extproc/
	$(GO) test $(GOTAGS) -count=1 -run='$(ALLOC_TESTS)' ./internal/ssefilter/
	$(GO) test -count=1 -run='Codec' ./extproc/
	$(GO) test $(GOTAGS) -run='^$$' -bench=. -benchtime=1x $(PKGS)

lint: vet fmt-check

# The JavaScript SDKs TestJSClients drives (the official OpenAI and
# Anthropic SDKs, the Vercel AI SDK), at the versions package-lock.json
# pins: npm ci when node_modules is missing or older than the lock file.
# Without Node.js the test skips, saying so.
# The servers the fleet tests start for themselves (internal/testenv/
# pgtest, internal/testenv/redistest): PostgreSQL, PgBouncer and Redis from Debian's packages. make test installs what is
# missing when it runs as root (CI does), and otherwise says what to
# install; the tests then fail rather than skip without them.
servers:
	@missing=""; \
	command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing="$$missing pgbouncer"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "servers: installing$$missing (apt-get install -y) for the fleet tests"; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null; }; \
		else \
			echo "servers: missing$$missing; the fleet tests need them: sudo apt-get install -y$$missing"; exit 1; \
		fi; \
	fi

jsclients:
	@if ! command -v npm >/dev/null 2>&1; then \
		echo "jsclients: no npm on PATH; TestJSClients will skip (install Node.js 20+ to run it)"; \
	elif [ ! -f e2e/jsclients/node_modules/.package-lock.json ] || [ e2e/jsclients/package-lock.json -nt e2e/jsclients/node_modules/.package-lock.json ]; then \
		echo "jsclients: npm ci in e2e/jsclients (the SDKs TestJSClients drives)"; \
		cd e2e/jsclients && npm ci --no-audit --no-fund --loglevel=error; \
	fi

vet: check-go
	$(GO) vet $(GOTAGS) $(PKGS)
	$(GO) vet $(PKGS)

fmt-check: check-go
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Benchmarks with allocations; compare runs with benchstat.
bench: check-go
	$(GO) test $(GOTAGS) -run='^$$' -bench=. -benchmem $(PKGS)

# The whole service over gRPC: sluice serve (SQLite store and ledger, a
# key, limits and budgets) and the do-nothing floor, each driven by
# bench/extprocload playing Envoy; one JSON line per scenario and server.
# DURATION=3s shortens every scenario. See bench/README.md.
bench-service: build
	$(GO) build -o bin/extprocload ./bench/extprocload
	SLUICE_BIN=$(BIN) DRIVER_BIN=bin/extprocload scripts/bench-service.sh

# Run each fuzz target for FUZZTIME (new interesting inputs land in the
# Go cache; copy regressions into the package's testdata/fuzz). The
# targets are found, not listed: every func FuzzX(f *testing.F) in a
# *_test.go file, as package:FuzzX. make fuzz-targets lists them;
# FUZZ_TARGETS="pkg:FuzzX …" on the command line runs only those.
FUZZTIME ?= 30s
FUZZ_TARGETS = $(shell grep -rEo --include='*_test.go' --exclude-dir=node_modules --exclude-dir=testdata --exclude-dir=.cache \
	'^func Fuzz[A-Za-z0-9_]*[(][A-Za-z0-9_]+ [*]testing[.]F[)]' . | \
	sed -E 's|^\./||; s|/?[^/:]*_test[.]go:func (Fuzz[A-Za-z0-9_]*).*$$|:\1|' | sort -u)
fuzz-targets:
	@for t in $(FUZZ_TARGETS); do echo "$$t"; done

fuzz: check-go
	@if [ -z "$(strip $(FUZZ_TARGETS))" ]; then echo "fuzz: no func Fuzz…(f *testing.F) found in any *_test.go"; exit 1; fi
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$fn$$" -fuzztime=$(FUZZTIME) ./$$pkg || exit 1; \
	done

# Mutation testing of the accounting packages with gremlins (fetched
# through the module proxy by go run; not part of make test: every mutant
# reruns its package's tests). scripts/mutation.sh prints one line per
# package with its efficacy (mutants killed / killed + lived) and fails
# below MUTATION_THRESHOLD. MUTATION_PKGS=internal/limits make mutation
# runs one. See docs/testing.md.
GREMLINS           ?= $(GO) run github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0
MUTATION_PKGS      ?= extproc policies internal/admission internal/ledger/spool internal/ledger/sqlite internal/limits internal/usage internal/payload
MUTATION_THRESHOLD ?= 90
MUTATION_WORKERS   ?= 1
mutation: check-go
	GREMLINS="$(GREMLINS)" scripts/mutation.sh $(MUTATION_THRESHOLD) $(MUTATION_WORKERS) $(MUTATION_PKGS)

# The quickstart's SQLite files, next to examples/quickstart.yaml: the key
# store (store.sqlite) and the spend ledger (ledger.sqlite, by default
# sluice-ledger.db), each with its -wal and -shm, and the ledger's -spool
# (and a damaged spool kept aside as -spool-damaged-*).
QUICKSTART_FILES := examples/quickstart.db examples/quickstart.db-* examples/sluice-ledger.db examples/sluice-ledger.db-*
clean:
	rm -rf bin $(QUICKSTART_FILES) e2e/jsclients/node_modules
