#!/usr/bin/env bash
# bench/changelog.sh — PROTOTYPE measurement for issue 17: CL.THROTTLE
# throughput with persistence off, with today's pebble write path, and with
# the change log + checkpoints (CELLSERVER_CHANGELOG=1; "log3s-": a
# checkpoint every 3 s instead of 1 s), under --fsync everysec and always,
# interleaved per round. Prints one CSV line per run; the raw server logs
# stay in the printed temp dir.
#
# Usage: ROUNDS=3 REQUESTS=500000 PIPELINES="16 1" bench/changelog.sh
# Server: taskset -c 0, GOMAXPROCS=1; redis-benchmark: taskset -c 1.
# server_cpu_us_per_req is the server's user+system CPU time during the
# run (/proc/PID/stat) per request: on a shared machine, where other
# processes take turns on CPU 0, it is steadier than rps (the server is
# CPU-bound, so rps ~ 1 / CPU per request when it has the core alone).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-500000}
CLIENTS=${CLIENTS:-50}
PIPELINES=${PIPELINES:-"16 1"}
KEYSPACE=${KEYSPACE:-100000}
CONFIGS=${CONFIGS:-"off pebble-everysec log-everysec pebble-always log-always"}
PORT=${PORT:-7399}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cellchangelog.XXXXXX")
bin="$tmp/cellserver"
(cd "$repo" && go build -o "$bin" ./cmd/cellserver)
spid=""
stop() { [[ -n "$spid" ]] || return 0; kill "$spid" 2>/dev/null || true; for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done; kill -9 "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true; spid=""; }
trap stop EXIT
echo "raw: $tmp"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # server utime+stime, clock ticks
hz=$(getconf CLK_TCK)
echo "round,config,P,rps,p99_ms,server_cpu_us_per_req"
for r in $(seq "$ROUNDS"); do
	for c in $CONFIGS; do
		args=(--addr 127.0.0.1:$PORT)
		env=()
		case $c in
		off) ;;
		pebble-*) args+=(--data-dir "$tmp/d-$r-$c" --fsync "${c#pebble-}") ;;
		log-*) args+=(--data-dir "$tmp/d-$r-$c" --fsync "${c#log-}"); env=(CELLSERVER_CHANGELOG=1) ;;
		log3s-*) args+=(--data-dir "$tmp/d-$r-$c" --fsync "${c#log3s-}"); env=(CELLSERVER_CHANGELOG=1 CELLSERVER_CHANGELOG_INTERVAL=3s) ;;
		esac
		env "${env[@]}" GOMAXPROCS=1 taskset -c 0 "$bin" "${args[@]}" >"$tmp/log-$r-$c" 2>&1 &
		spid=$!
		for _ in $(seq 100); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.05; done
		for p in $PIPELINES; do
			c0=$(cpu "$spid")
			out=$(taskset -c 1 redis-benchmark -p $PORT -c "$CLIENTS" -n "$REQUESTS" -P "$p" -r "$KEYSPACE" --csv CL.THROTTLE key:__rand_int__ 15 30 60 | tail -1)
			rps=$(echo "$out" | awk -F'","' '{print $2}')
			p99=$(echo "$out" | awk -F'","' '{print $7}')
			c1=$(cpu "$spid")
			us=$(awk -v a="$c0" -v b="$c1" -v hz="$hz" -v n="$REQUESTS" 'BEGIN{printf "%.3f", (b-a)/hz*1e6/n}')
			echo "$r,$c,$p,$rps,$p99,$us"
		done
		stop
		rm -rf "$tmp/d-$r-$c"
	done
done
