# cellserver build and test entry points. `make test` is the README's test
# command; .ci/run calls it.
GO ?= go
FUZZTIME ?= 30s
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

# Every fuzz target, each for FUZZTIME (one package at a time: go test
# -fuzz takes one target per run).
FUZZ_TARGETS = \
	gcra:FuzzDecide \
	resp:FuzzReader \
	commands:FuzzThrottleArgs \
	limiter:FuzzFixed limiter:FuzzSliding limiter:FuzzLog \
	persistence:FuzzDecodeValue \
	hostile_test:FuzzCommands hostile_test:FuzzAll

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		if grep -qs "^func $$name(" ./$$pkg/*_test.go; then \
			echo "== fuzz $$pkg $$name ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) ./$$pkg; \
		else echo "== fuzz $$pkg $$name: no such target"; exit 1; fi; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./gcra ./resp ./commands
