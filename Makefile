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

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecide$$' -fuzztime $(FUZZTIME) ./gcra
	$(GO) test -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $(FUZZTIME) ./resp
	$(GO) test -run '^$$' -fuzz '^FuzzThrottleArgs$$' -fuzztime $(FUZZTIME) ./commands

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./gcra ./resp ./commands
