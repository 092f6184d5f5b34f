#!/usr/bin/env bash
# bench/soak.sh — soak test of cellserver: a mixed workload from many
# clients against the real binary on 127.0.0.1, with invariants checked
# throughout.
#
# Usage:
#   bench/soak.sh                    # 60 s, 32 clients
#   DURATION=10m bench/soak.sh       # longer (a Go duration, or seconds)
#   CLIENTS=64 SEED=7 bench/soak.sh
#
# Environment:
#   DURATION  how long the workload runs (default 60s)
#   CLIENTS   concurrent clients, one connection each (default 32)
#   SEED      seed of the clients' random choices (default 1)
#   RACE=1    run the test's clients under the race detector (the server
#             binary is built without it either way)
#
# It runs the Go test TestSoak in ./tests/hostile with SOAK=1 (see
# tests/hostile/soak_test.go for the workload and the invariants): the test
# builds ./cmd/cellserver, starts it on 127.0.0.1:0 with the real clock,
# and runs CLIENTS clients, each looping over every limiter command
# (CL.THROTTLE, CL.PEEK, CL.FIXED, CL.SLIDING, CL.SLIDINGLOG,
# CL.ACQUIRE/CL.RELEASE, CL.ALL, CL.INFO) and GET/SET/DEL/EXPIRE/TTL/
# EXISTS/TYPE/SCAN/INFO/DBSIZE/MULTI-EXEC, until DURATION has passed.
# Every 2 s and at the end it checks:
#   - no over-admission: per CL.FIXED / CL.SLIDING key and aligned window,
#     per CL.SLIDINGLOG key and period-long interval, per CL.THROTTLE key
#     (burst + rate), and never more than limit CL.ACQUIRE leases held;
#   - no error but the expected ones (WRONGTYPE on keys mixed on purpose,
#     exact errors of deliberately bad commands), read-your-writes on each
#     client's own key, complete MULTI/EXEC replies, SCAN terminating;
#   - the server alive; at the end it must stop on SIGTERM with exit 0.
# It prints a summary (operations, admissions per key, leases, RSS) and
# exits non-zero on any problem. Only loopback traffic; the run is bounded
# by DURATION (plus a 5-minute margin for go test's -timeout).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
DURATION=${DURATION:-60s}
CLIENTS=${CLIENTS:-32}
SEED=${SEED:-1}

command -v go >/dev/null || { echo "soak.sh: go not found" >&2; exit 1; }

# go test's -timeout: the duration in whole seconds (plain seconds or
# h/m/s/ms parts, as in 90, 90s, 1m30s, 2h) plus 5 minutes.
secs=0
if [[ "$DURATION" =~ ^[0-9]+$ ]]; then
	secs=$DURATION
else
	rest=$DURATION
	while [[ -n "$rest" ]]; do
		if [[ "$rest" =~ ^([0-9]+)(ms|h|m|s)(.*)$ ]]; then
			n=${BASH_REMATCH[1]}
			case ${BASH_REMATCH[2]} in
			h) secs=$((secs + n * 3600)) ;;
			m) secs=$((secs + n * 60)) ;;
			s) secs=$((secs + n)) ;;
			ms) secs=$((secs + (n + 999) / 1000)) ;;
			esac
			rest=${BASH_REMATCH[3]}
		else
			echo "soak.sh: DURATION=$DURATION is not a duration (e.g. 90, 90s, 1m30s, 2h)" >&2
			exit 2
		fi
	done
fi
timeout=$((secs + 300))s

race=()
if [[ "${RACE:-0}" == 1 ]]; then
	race=(-race)
fi

cd "$repo"
echo "soak: DURATION=$DURATION CLIENTS=$CLIENTS SEED=$SEED (go test -timeout $timeout)" >&2
SOAK=1 SOAK_DURATION="$DURATION" SOAK_CLIENTS="$CLIENTS" SOAK_SEED="$SEED" \
	go test "${race[@]}" -count=1 -run '^TestSoak$' -v -timeout "$timeout" ./tests/hostile
