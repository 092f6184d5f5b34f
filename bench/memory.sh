#!/usr/bin/env bash
# bench/memory.sh — memory per rate-limit key: cellserver with CL.THROTTLE
# against redis-server with the Lua GCRA (bench/gcra.lua), on 127.0.0.1.
#
# Usage:
#   bench/memory.sh                 # 1,000,000 keys on each server
#   KEYS=200000 bench/memory.sh     # fewer keys, for a quick look
#
# For each server: start it fresh (Redis with --save '' --appendonly no),
# read VmRSS from /proc/PID/status, create KEYS distinct keys with
# bench/loadkeys (go-redis pipelines of 1000, 4 connections; arguments
# "15 1 3600", so every key lives an hour and none expires during the run),
# check DBSIZE, wait SETTLE seconds, read VmRSS again, and print
# (after - before) / keys. Also printed: the growth of used_memory from
# INFO memory (Redis: its allocator's count; cellserver: the Go heap in
# use, which excludes GC headroom and runtime overhead) and VmHWM, the peak
# RSS. The RSS figure is what a machine has to provision. For Go, RSS
# includes the garbage collector's headroom (GOGC=100: up to twice the
# live heap between collections), so it moves with GC timing; the
# used_memory figure is the steadier one.
#
# Servers are stopped on exit (trap); everything is under a temp dir.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
KEYS=${KEYS:-1000000}
SETTLE=${SETTLE:-3}
TTL_ARGS="15 1 3600"

for tool in go redis-server redis-cli timeout; do
	command -v "$tool" >/dev/null || { echo "memory.sh: $tool not found" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cellmem.XXXXXX")
pids=()
load_pid=
cleanup() {
	local pid
	if [[ -n "$load_pid" ]]; then
		kill "$load_pid" 2>/dev/null || true
		wait "$load_pid" 2>/dev/null || true
		load_pid=
	fi
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	pids=()
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "memory.sh: no free port found" >&2
	return 1
}

wait_ready() {
	for _ in $(seq 100); do
		kill -0 "$2" 2>/dev/null || { echo "memory.sh: server on port $1 exited" >&2; cat "$tmp"/*.log >&2; return 1; }
		[[ "$(timeout 2 redis-cli -p "$1" PING 2>/dev/null)" == PONG ]] && return 0
		sleep 0.1
	done
	echo "memory.sh: server on port $1 not ready after 10 s" >&2
	return 1
}

status_kb() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }
info_mem() { redis-cli -p "$1" INFO memory | tr -d '\r' | sed -n 's/^used_memory://p'; }

echo "== building cellserver and bench/loadkeys"
(cd "$repo" && go build -o "$tmp/cellserver" ./cmd/cellserver && go build -o "$tmp/loadkeys" ./bench/loadkeys)

# measure NAME PORT PID [loadkeys flags...]: prints one result line.
measure() {
	local name=$1 port=$2 pid=$3
	shift 3
	local rss0 mem0 rss1 mem1 hwm dbsize
	rss0=$(status_kb "$pid" VmRSS)
	mem0=$(info_mem "$port")
	timeout 600 "$tmp/loadkeys" -addr "127.0.0.1:$port" -n "$KEYS" -args "$TTL_ARGS" "$@" >"$tmp/loadkeys-$name.log" 2>&1 &
	load_pid=$!
	if ! wait "$load_pid"; then
		load_pid=
		echo "memory.sh: loadkeys failed against $name:" >&2
		cat "$tmp/loadkeys-$name.log" >&2
		exit 1
	fi
	load_pid=
	sed "s/^/  $name: /" "$tmp/loadkeys-$name.log"
	dbsize=$(redis-cli -p "$port" DBSIZE)
	sleep "$SETTLE"
	rss1=$(status_kb "$pid" VmRSS)
	mem1=$(info_mem "$port")
	hwm=$(status_kb "$pid" VmHWM)
	echo "$name $KEYS $dbsize $rss0 $rss1 $hwm $mem0 $mem1" >>"$tmp/results.txt"
}

: >"$tmp/results.txt"

port=$(free_port)
"$tmp/cellserver" --addr "127.0.0.1:$port" >"$tmp/cellserver.log" 2>&1 &
pid=$!
pids+=("$pid")
wait_ready "$port" "$pid"
echo "== cellserver (pid $pid): $KEYS x CL.THROTTLE <key> $TTL_ARGS"
redis-cli -p "$port" CL.THROTTLE mem:warm $TTL_ARGS >/dev/null
measure cellserver "$port" "$pid"
cleanup

port=$(free_port)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
	--logfile "$tmp/redis.log" >/dev/null 2>&1 &
pid=$!
pids+=("$pid")
wait_ready "$port" "$pid"
sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$here/gcra.lua")")
[[ "$sha" =~ ^[0-9a-f]{40}$ ]] || { echo "memory.sh: SCRIPT LOAD failed: $sha" >&2; exit 1; }
echo "== redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') (pid $pid): $KEYS x EVALSHA gcra.lua 1 <key> $TTL_ARGS"
redis-cli -p "$port" EVALSHA "$sha" 1 mem:warm $TTL_ARGS >/dev/null
measure redis "$port" "$pid" -evalsha "$sha"
cleanup

echo
echo "== memory per key ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), tree $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes'))"
# The keys are mem:key:0 .. mem:key:<KEYS-1>: their mean length, which
# the issue's target (bytes per key beyond the key's own bytes) excludes.
keylen=$(awk -v n="$KEYS" 'BEGIN { d = 1; lo = 0; hi = 10; t = 0
	while (lo < n) { t += ((hi < n ? hi : n) - lo) * d; lo = hi; hi *= 10; d++ }
	printf "%.2f", 8 + t / n }')
echo "mean key length: $keylen bytes (mem:key:<i>)"
awk -v keylen="$keylen" '
BEGIN { fmt = "%-11s %9s %9s %10s %10s %10s %10s %18s %18s\n"
	printf fmt, "server", "keys", "DBSIZE", "RSS before", "RSS after", "peak RSS", "RSS B/key", "RSS B/key - key", "used_memory B/key" }
{
	keys = $3 - 1   # DBSIZE counts the warm-up key too
	rss = ($5 - $4) * 1024 / keys
	printf fmt, $1, $2, $3, sprintf("%.1f MiB", $4 / 1024), sprintf("%.1f MiB", $5 / 1024), sprintf("%.1f MiB", $6 / 1024),
		sprintf("%.1f", rss), sprintf("%.1f", rss - keylen), sprintf("%.1f", ($8 - $7) / keys)
}' "$tmp/results.txt"
echo "raw: $tmp/results.txt (name keys dbsize rss0_kB rss1_kB hwm_kB used0_B used1_B)"
