#!/usr/bin/env bash
# bench/compare.sh — throughput and p99 latency of cellserver against a local
# redis-server, both driven by redis-benchmark on 127.0.0.1.
#
# Usage:
#   bench/compare.sh                  # 3 rounds x 200000 requests per run
#   QUICK=1 bench/compare.sh          # smoke run: 1 round x 20000 requests
#   ROUNDS=5 REQUESTS=500000 bench/compare.sh
#
# Environment:
#   ROUNDS    rounds (default 3; QUICK=1: 1). The median of the rounds is shown.
#   REQUESTS  requests per redis-benchmark run, -n (default 200000; QUICK=1: 20000)
#   CLIENTS   parallel connections, -c (default 50)
#   PIPELINES pipeline depths, -P (default "1 16")
#   KEYSPACE  random key range, -r (default 100000)
#   NOPIN=1   do not pin with taskset
#   RUN_TIMEOUT  seconds after which one redis-benchmark run is abandoned (default 300)
#
# What it does: builds cellserver (go build ./cmd/cellserver) into a temp dir,
# starts it and a redis-server (--save '' --appendonly no: no persistence,
# bound to 127.0.0.1) on free ports, loads bench/gcra.lua into Redis with
# SCRIPT LOAD, then for every round, pipeline depth and workload runs
# redis-benchmark against Redis and then cellserver (A B A B ...). Workloads
# (each row compares the same operation on both servers):
#   ping         PING, the floor of the request path
#   set-rand     SET key:__rand_int__ x, -r KEYSPACE (plain Redis write)
#   throttle-rand  redis: EVALSHA gcra.lua 1 key:__rand_int__ 15 30 60
#                  cellserver: CL.THROTTLE key:__rand_int__ 15 30 60, -r KEYSPACE
#   throttle-hot   the same on one key (after 16 requests: the limited path)
#
# With taskset and at least 2 CPUs, both servers run on CPU 0 and
# redis-benchmark on CPU 1, so the client never steals the server's core.
# Go sizes GOMAXPROCS from the affinity mask, so cellserver then runs with
# GOMAXPROCS=1, like single-threaded Redis. (The servers run one at a time;
# the idle one only sleeps.)
#
# Output: a table (workload, pipeline, median rps of each server, ratio
# cellserver/redis, median p99 in ms of each), in plain text and markdown.
# Raw redis-benchmark CSV outputs and results.csv are kept under a temp dir
# (printed at the end; not in the repository). Both servers are stopped on
# exit, on error and on Ctrl-C.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

if [[ "${QUICK:-0}" == 1 ]]; then
	ROUNDS=${ROUNDS:-1}
	REQUESTS=${REQUESTS:-20000}
fi
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-200000}
CLIENTS=${CLIENTS:-50}
PIPELINES=${PIPELINES:-"1 16"}
KEYSPACE=${KEYSPACE:-100000}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}

for tool in go redis-server redis-benchmark redis-cli timeout; do
	command -v "$tool" >/dev/null || { echo "compare.sh: $tool not found (apt-get install redis-server redis-tools)" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cellbench.XXXXXX")
raw="$tmp/raw"
mkdir -p "$raw"
pids=()

bench_pid=
cleanup() {
	local pid
	if [[ -n "$bench_pid" ]]; then
		kill "$bench_pid" 2>/dev/null || true # timeout passes it on to redis-benchmark
		wait "$bench_pid" 2>/dev/null || true
	fi
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		# wait reaps our own children; give each up to 5 s, then KILL.
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	pids=()
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_port prints a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "compare.sh: no free port found" >&2
	return 1
}

# wait_ready PORT PID: until the server answers PING (10 s at most).
wait_ready() {
	for _ in $(seq 100); do
		if ! kill -0 "$2" 2>/dev/null; then
			echo "compare.sh: server on port $1 exited; log:" >&2
			cat "$tmp"/*.log >&2
			return 1
		fi
		if [[ "$(timeout 2 redis-cli -p "$1" PING 2>/dev/null)" == PONG ]]; then return 0; fi
		sleep 0.1
	done
	echo "compare.sh: server on port $1 not ready after 10 s" >&2
	return 1
}

# cpu_pressure prints the share of the last 60 s in which some runnable task
# waited for a CPU (Linux PSI): near 0 on an idle machine.
cpu_pressure() {
	local v
	v=$(sed -n 's/^some .*avg60=\([0-9.]*\).*/\1/p' /proc/pressure/cpu 2>/dev/null || true)
	echo "CPU pressure ${v:-n/a}% (PSI some avg60)"
}

srv_pin=() cli_pin=() pin_note="not pinned"
if [[ "${NOPIN:-0}" != 1 ]] && command -v taskset >/dev/null && (($(nproc) >= 2)); then
	srv_pin=(taskset -c 0)
	cli_pin=(taskset -c 1)
	pin_note="pinned with taskset: servers on CPU 0, redis-benchmark on CPU 1 (cellserver GOMAXPROCS=1)"
fi

echo "== building cellserver"
(cd "$repo" && go build -o "$tmp/cellserver" ./cmd/cellserver)

cport=$(free_port)
rport=$(free_port)
while [[ "$rport" == "$cport" ]]; do rport=$(free_port); done

"${srv_pin[@]}" "$tmp/cellserver" --addr "127.0.0.1:$cport" >"$tmp/cellserver.log" 2>&1 &
cpid=$!
pids+=("$cpid")
"${srv_pin[@]}" redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
	--daemonize no --logfile "$tmp/redis.log" >/dev/null 2>&1 &
rpid=$!
pids+=("$rpid")
wait_ready "$cport" "$cpid"
wait_ready "$rport" "$rpid"

sha=$(redis-cli -p "$rport" SCRIPT LOAD "$(cat "$here/gcra.lua")")
[[ "$sha" =~ ^[0-9a-f]{40}$ ]] || { echo "compare.sh: SCRIPT LOAD failed: $sha" >&2; exit 1; }
# Sanity: both answer the same first reply on a fresh key.
a=$(redis-cli -p "$cport" CL.THROTTLE bench:check 15 30 60 | tr '\n' ' ')
b=$(redis-cli -p "$rport" EVALSHA "$sha" 1 bench:check 15 30 60 | tr '\n' ' ')
if [[ "$a" != "$b" ]]; then
	echo "compare.sh: replies differ: cellserver [$a] redis [$b]" >&2
	exit 1
fi

redis_ver=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
	echo "date:      $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "machine:   $(nproc) CPUs, ${cpu:-unknown CPU}, $(uname -sr)"
	echo "tree:      $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
	echo "versions:  $(go version | cut -d' ' -f3), redis-server $redis_ver, $(redis-benchmark --version)"
	echo "load:      rounds=$ROUNDS requests=$REQUESTS clients=$CLIENTS pipelines=[$PIPELINES] keyspace=$KEYSPACE"
	echo "pinning:   $pin_note"
	echo "loadavg:   $(cut -d' ' -f1-3 /proc/loadavg) at start, $(cpu_pressure) (other processes on the machine add noise)"
	echo "ports:     cellserver 127.0.0.1:$cport (pid $cpid), redis 127.0.0.1:$rport (pid $rpid)"
	echo "raw:       $tmp"
} | tee "$tmp/header.txt"

# workload NAME: sets rargs (redis) and cargs (cellserver) and rflag (-r or none).
workload() {
	case "$1" in
	ping) rargs=(PING) cargs=(PING) rflag=() ;;
	set-rand) rargs=(SET 'key:__rand_int__' x) cargs=(SET 'key:__rand_int__' x) rflag=(-r "$KEYSPACE") ;;
	throttle-rand)
		rargs=(EVALSHA "$sha" 1 'tkey:__rand_int__' 15 30 60)
		cargs=(CL.THROTTLE 'tkey:__rand_int__' 15 30 60)
		rflag=(-r "$KEYSPACE")
		;;
	throttle-hot)
		rargs=(EVALSHA "$sha" 1 hotkey 15 30 60)
		cargs=(CL.THROTTLE hotkey 15 30 60)
		rflag=()
		;;
	esac
}
workloads=(ping set-rand throttle-rand throttle-hot)

# CPU time in clock ticks: ticks PID (the process's user+system time),
# child_ticks (this shell's reaped children: redis-benchmark, via timeout).
clk_tck=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
child_ticks() { awk '{print $16 + $17}' "/proc/$$/stat"; }
now_ms() { date +%s%3N; }

# run_one SERVER PORT ROUND PIPELINE WORKLOAD CMD...: one redis-benchmark run,
# appended to results.csv as round,pipeline,workload,server,rps,p50,p99,
# server CPU %, client CPU % (of one core, over the run's wall time: a
# figure near 100 means that process was the bottleneck), server CPU
# microseconds per request.
run_one() {
	local server=$1 port=$2 round=$3 pl=$4 wl=$5
	shift 5
	local out="$raw/r${round}-P${pl}-${wl}-${server}.csv"
	local spid=$cpid
	[[ $server == redis ]] && spid=$rpid
	local s0 c0 t0
	s0=$(ticks "$spid") c0=$(child_ticks) t0=$(now_ms)
	# In the background and waited for, so that a signal stops the run at
	# once (cleanup kills it) instead of after it ends.
	timeout "$RUN_TIMEOUT" "${cli_pin[@]}" redis-benchmark -h 127.0.0.1 -p "$port" \
		-c "$CLIENTS" -n "$REQUESTS" -P "$pl" "${rflag[@]}" --csv "$@" >"$out" 2>"$out.err" &
	bench_pid=$!
	if ! wait "$bench_pid"; then
		bench_pid=
		echo "compare.sh: redis-benchmark failed or timed out ($server $wl -P $pl); see $out.err" >&2
		exit 1
	fi
	bench_pid=
	local s1 c1 t1
	s1=$(ticks "$spid") c1=$(child_ticks) t1=$(now_ms)
	local cpus
	cpus=$(awk -v s="$((s1 - s0))" -v c="$((c1 - c0))" -v ms="$((t1 - t0))" -v hz="$clk_tck" \
		'BEGIN { w = (ms > 0 ? ms : 1) / 1000; printf "%.0f,%.0f", 100 * s / hz / w, 100 * c / hz / w }')
	# CSV: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	local line
	line=$(awk -F'"' 'NR==2 {print $4 "," $10 "," $14}' "$out")
	[[ -n "$line" ]] || { echo "compare.sh: no result in $out" >&2; cat "$out" "$out.err" >&2; exit 1; }
	# Server CPU time per request, in microseconds: what the server would
	# need per request if the client were not the bottleneck.
	local us
	us=$(awk -v rps="${line%%,*}" -v s="${cpus%%,*}" 'BEGIN { printf "%.2f", (rps > 0 ? s / 100 / rps * 1e6 : 0) }')
	echo "$round,$pl,$wl,$server,$line,$cpus,$us" >>"$raw/results.csv"
	printf '  round %d  -P %-2s  %-14s %-10s %12s rps  p99 %s ms  cpu server/client %s %%\n' "$round" "$pl" "$wl" "$server" \
		"${line%%,*}" "${line##*,}" "${cpus/,//}"
}

# steal_ticks: CPU time the hypervisor gave to others (/proc/stat "steal"),
# in clock ticks over both CPUs: on a VM, the noise this run suffered.
steal_ticks() { awk '/^cpu / {print $9}' /proc/stat; }
steal0=$(steal_ticks)
echo "== running ($((ROUNDS * ${#workloads[@]} * 2 * $(wc -w <<<"$PIPELINES"))) redis-benchmark runs)"
: >"$raw/results.csv"
for round in $(seq "$ROUNDS"); do
	for pl in $PIPELINES; do
		for wl in "${workloads[@]}"; do
			workload "$wl"
			run_one redis "$rport" "$round" "$pl" "$wl" "${rargs[@]}"
			run_one cellserver "$cport" "$round" "$pl" "$wl" "${cargs[@]}"
		done
	done
done

# Errors returned by the servers would be counted as requests by
# redis-benchmark: check none were.
cerr=$(redis-cli -p "$cport" INFO stats | tr -d '\r' | sed -n 's/^total_error_replies://p')
rerr=$(redis-cli -p "$rport" INFO stats | tr -d '\r' | sed -n 's/^total_error_replies://p')
echo "error replies: cellserver ${cerr:-?}, redis ${rerr:-?}" | tee -a "$tmp/header.txt"
echo "loadavg:   $(cut -d' ' -f1-3 /proc/loadavg) at end, $(cpu_pressure)" | tee -a "$tmp/header.txt"
echo "steal:     $(($(steal_ticks) - steal0)) ticks (1/$clk_tck s) of CPU taken by the hypervisor during the runs" | tee -a "$tmp/header.txt"

# The table: medians over rounds (for an even count, the lower middle).
awk -F, -v wls="${workloads[*]}" -v pls="$PIPELINES" '
function median(list,   n, a, i, j, t) {
	n = split(list, a, " ")
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
	return a[int((n + 1) / 2)]
}
{ rps[$3, $2, $4] = rps[$3, $2, $4] " " $5; p99[$3, $2, $4] = p99[$3, $2, $4] " " $7
  scpu[$3, $2, $4] = scpu[$3, $2, $4] " " $8; ccpu[$3, $2, $4] = ccpu[$3, $2, $4] " " $9
  us[$3, $2, $4] = us[$3, $2, $4] " " $10 }
END {
	nw = split(wls, w, " "); np = split(pls, p, " ")
	label["ping"] = "PING"
	label["set-rand"] = "SET key:rand (100k keys)"
	label["throttle-rand"] = "GCRA, 100k random keys"
	label["throttle-hot"] = "GCRA, one hot key"
	fmt = "%-26s %3s %12s %12s %7s %10s %10s %16s %16s %9s %9s %9s\n"
	printf fmt, "workload", "-P", "redis rps", "cell rps", "ratio", "redis p99", "cell p99", "cpu% redis/cli", "cpu% cell/cli", "redis us", "cell us", "us ratio"
	md = "| workload | -P | redis rps | cellserver rps | ratio cell/redis | redis p99 ms | cellserver p99 ms | CPU % redis / client | CPU % cellserver / client | redis CPU µs/req | cellserver CPU µs/req | CPU ratio redis/cell |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
	for (i = 1; i <= nw; i++) for (k = 1; k <= np; k++) {
		key = w[i] SUBSEP p[k]
		rr = median(rps[w[i], p[k], "redis"]); cr = median(rps[w[i], p[k], "cellserver"])
		rp = median(p99[w[i], p[k], "redis"]); cp = median(p99[w[i], p[k], "cellserver"])
		ratio = (rr > 0) ? sprintf("%.2f", cr / rr) : "-"
		rc = median(scpu[w[i], p[k], "redis"]) "/" median(ccpu[w[i], p[k], "redis"])
		cc = median(scpu[w[i], p[k], "cellserver"]) "/" median(ccpu[w[i], p[k], "cellserver"])
		ru = median(us[w[i], p[k], "redis"]); cu = median(us[w[i], p[k], "cellserver"])
		uratio = (cu > 0) ? sprintf("%.2f", ru / cu) : "-"
		printf fmt, label[w[i]], p[k], sprintf("%.0f", rr), sprintf("%.0f", cr), ratio, rp, cp, rc, cc, ru, cu, uratio
		md = md sprintf("| %s | %s | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n", label[w[i]], p[k], rr, cr, ratio, rp, cp, rc, cc, ru, cu, uratio)
	}
	printf "\n%s", md > "/dev/stderr"

	# The targets of the performance issue: CL.THROTTLE against Redis SET
	# and against the Lua GCRA, the hot key against random keys.
	printf "\n%-52s %3s %10s %10s %7s %10s %10s\n", "target", "-P", "baseline", "cell rps", "ratio", "base p99", "cell p99"
	for (k = 1; k <= np; k++) {
		ct = median(rps["throttle-rand", p[k], "cellserver"]); cp = median(p99["throttle-rand", p[k], "cellserver"])
		rs = median(rps["set-rand", p[k], "redis"]); rsp = median(p99["set-rand", p[k], "redis"])
		rl = median(rps["throttle-rand", p[k], "redis"]); rlp = median(p99["throttle-rand", p[k], "redis"])
		ch = median(rps["throttle-hot", p[k], "cellserver"]); chp = median(p99["throttle-hot", p[k], "cellserver"])
		tfmt = "%-52s %3s %10.0f %10.0f %7.2f %10s %10s\n"
		if (rs > 0) printf tfmt, "CL.THROTTLE random keys / Redis SET random keys", p[k], rs, ct, ct / rs, rsp, cp
		if (rl > 0) printf tfmt, "CL.THROTTLE random keys / Redis Lua GCRA random keys", p[k], rl, ct, ct / rl, rlp, cp
		if (ct > 0) printf tfmt, "CL.THROTTLE hot key / CL.THROTTLE random keys", p[k], ct, ch, ch / ct, cp, chp
	}
}' "$raw/results.csv" >"$tmp/table.txt" 2>"$tmp/table.md"

echo
echo "== medians of $ROUNDS round(s), $REQUESTS requests per run, $CLIENTS clients"
echo "   GCRA rows: redis = EVALSHA bench/gcra.lua 1 key 15 30 60; cellserver = CL.THROTTLE key 15 30 60"
echo "   us = server CPU microseconds per request (user+system time / requests); us ratio = redis us / cellserver us,"
echo "   the throughput ratio the servers would show if redis-benchmark (one thread) were not the bottleneck"
cat "$tmp/table.txt"
cat "$tmp/table.md"
echo
echo "raw results: $tmp (results.csv, one redis-benchmark CSV per run, server logs)"
