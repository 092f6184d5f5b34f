# cellserver build and test entry points. `make test` is the README's test
# command; .ci/run calls it.
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build run test race fuzz bench

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/cellserver ./cmd/cellserver

run:
	$(GO) run ./cmd/cellserver

# The full suite, with the race detector, as CI runs it. Installs redis-tools
# first when missing (the redis-cli tests need it).
test:
	./scripts/ensure-tools.sh
	$(GO) test -race -count=1 ./...

# Every fuzz target (one package at a time: go test -fuzz takes one target
# per run). Each target has an execution budget sized to roughly ten seconds
# on a 2-core machine; FUZZTIME=30s (or 1000x) overrides it for all targets.
# CI uses the counts: a wall-clock -fuzztime can end with a spurious
# "context deadline exceeded" when a worker is mid-call at the deadline on a
# loaded machine (a race in Go's fuzz coordinator), while a count cannot.
FUZZTIME ?=
FUZZ_TARGETS = \
	gcra:FuzzDecide:300000 \
	resp:FuzzReader:100000 \
	commands:FuzzThrottleArgs:4000 \
	limiter:FuzzFixed:400000 limiter:FuzzSliding:300000 limiter:FuzzLog:300000 \
	persistence:FuzzDecodeValue:100000 \
	hostile_test:FuzzCommands:3000 hostile_test:FuzzAll:20000

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget=$${rest##*:}x; \
		if [ -n "$(FUZZTIME)" ]; then budget="$(FUZZTIME)"; fi; \
		if grep -qs "^func $$name(" ./$$pkg/*_test.go; then \
			echo "== fuzz $$pkg $$name ($$budget)"; \
			$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $$budget -timeout 10m ./$$pkg; \
		else echo "== fuzz $$pkg $$name: no such target"; exit 1; fi; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./gcra ./resp ./commands
