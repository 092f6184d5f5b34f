# cellserver build and test entry points. `make test` is the README's test
# command; .ci/run calls it.
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build run test test-client-oldest vet race fuzz bench

# The repository's Go modules: the server (.) and, each with its own
# go.mod, the client side (docs/client.md). go test ./... at the root
# does not enter the nested ones, so every target runs in each.
MODULES = . gcra limiter client

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/cellserver ./cmd/cellserver

run:
	$(GO) run ./cmd/cellserver

# The full suite, with the race detector, as CI runs it. Installs redis-tools
# first when missing (the redis-cli tests need it).
test:
	./scripts/ensure-tools.sh
	@set -e; for m in $(MODULES); do echo "== go test ($$m)"; $(GO) -C $$m test -race -count=1 ./...; done
	$(MAKE) test-client-oldest

# The client module requires the oldest go-redis it works with
# (client/go.mod), while the root module, which holds the client's tests
# against an in-process server (tests/client/), pins a newer one. This runs
# those tests again with the client's version, from a copy of go.mod
# (-modfile; the module proxy must be reachable for that version).
test-client-oldest:
	@set -e; v=$$(cd client && $(GO) list -m -f '{{.Version}}' github.com/redis/go-redis/v9); \
	d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; cp go.mod go.sum "$$d"/; \
	$(GO) mod edit -modfile="$$d/go.mod" -require=github.com/redis/go-redis/v9@$$v; \
	got=$$($(GO) list -modfile="$$d/go.mod" -mod=mod -m -f '{{.Version}}' github.com/redis/go-redis/v9); \
	if [ "$$got" != "$$v" ]; then echo "test-client-oldest: go-redis $$got selected, not $$v"; exit 1; fi; \
	echo "== go test ./tests/client/... with go-redis $$v"; \
	$(GO) test -modfile="$$d/go.mod" -mod=mod -race -count=1 ./tests/client/...

vet:
	@set -e; for m in $(MODULES); do echo "== go vet ($$m)"; $(GO) -C $$m vet ./...; done

# Every fuzz target (one package at a time: go test -fuzz takes one target
# per run). Each target has an execution budget sized to roughly ten seconds
# on a 2-core machine; FUZZTIME=30s (or 1000x) overrides it for all targets.
# CI uses the counts: a wall-clock -fuzztime can end with a spurious
# "context deadline exceeded" when a worker is mid-call at the deadline on a
# loaded machine (a race in Go's fuzz coordinator), while a count cannot.
FUZZTIME ?=
FUZZ_TARGETS = \
	gcra:FuzzDecide:300000 gcra:FuzzSettle:200000 \
	resp:FuzzReader:100000 \
	commands:FuzzThrottleArgs:4000 commands:FuzzReservations:10000 \
	limiter:FuzzFixed:400000 limiter:FuzzSliding:300000 limiter:FuzzLog:300000 limiter:FuzzReservations:100000 \
	persistence:FuzzDecodeValue:100000 \
	stream:FuzzDecode:100000 stream:FuzzApplyDelta:60000 \
	envoyrls:FuzzParse:30000 \
	tests/hostile:FuzzCommands:3000 tests/hostile:FuzzAll:20000

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget=$${rest##*:}x; \
		if [ -n "$(FUZZTIME)" ]; then budget="$(FUZZTIME)"; fi; \
		if grep -qs "^func $$name(" ./$$pkg/*_test.go; then \
			echo "== fuzz $$pkg $$name ($$budget)"; \
			$(GO) -C $$pkg test -run '^$$' -fuzz "^$$name$$" -fuzztime $$budget -timeout 10m .; \
		else echo "== fuzz $$pkg $$name: no such target"; exit 1; fi; \
	done

bench:
	$(GO) -C gcra test -run '^$$' -bench . -benchmem .
	$(GO) test -run '^$$' -bench . -benchmem ./resp ./commands
