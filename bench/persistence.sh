#!/usr/bin/env bash
# bench/persistence.sh — what persistence costs: CL.THROTTLE throughput with
# persistence off and with --data-dir under --fsync no, everysec and always,
# and the startup load time of a data directory holding LOAD_KEYS keys.
#
# Usage:
#   bench/persistence.sh              # 3 rounds x 200000 requests per run, 1M keys loaded
#   QUICK=1 bench/persistence.sh      # smoke run: 1 round x 20000 requests, 100k keys
#   ROUNDS=5 REQUESTS=500000 bench/persistence.sh
#
# Environment:
#   ROUNDS     rounds (default 3; QUICK=1: 1). The table shows the median.
#   REQUESTS   requests per redis-benchmark run, -n (default 200000; QUICK=1: 20000)
#   CLIENTS    parallel connections, -c (default 50)
#   PIPELINES  pipeline depths, -P (default "1 16")
#   KEYSPACE   random key range, -r (default 100000)
#   MODES      persistence modes (default "off no everysec always")
#   LOAD_KEYS  keys for the startup load measurement (default 1000000; QUICK=1: 100000)
#   NOPIN=1    do not pin with taskset
#   RUN_TIMEOUT  seconds after which one redis-benchmark run is abandoned (default 300)
#   SERVER_ARGS  more flags for the persisting servers (e.g. "--checkpoint-bytes 16mb")
#   PROFILE=1  each throughput server writes a CPU profile (CELLSERVER_CPU_PROFILE)
#              to the raw dir as r<round>-<mode>.pprof: go tool pprof -top FILE
#
# Throughput: for every round, then every mode (interleaved: off no
# everysec always off no ...), a fresh cellserver (a fresh temp data
# directory except for "off") runs
#   redis-benchmark -c CLIENTS -n REQUESTS -P <p> -r KEYSPACE --csv \
#       CL.THROTTLE key:__rand_int__ 15 30 60
# for each pipeline depth, then is stopped with SIGTERM. With taskset and 2+
# CPUs the server runs on CPU 0 (GOMAXPROCS=1: request handling, the
# write-behind goroutine and pebble share one core) and redis-benchmark on
# CPU 1. Printed: median rps and p99 per mode and depth, and rps / rps of
# "off" at the same depth. Each run also checks that no error reply was
# counted and reports INFO persistence written_changes.
#
# Startup load: a fresh server (--fsync everysec) gets LOAD_KEYS distinct
# keys from bench/loadkeys (CL.THROTTLE load:key:<i> 15 1 3600, a
# one-hour TTL), is stopped with SIGTERM (clean shutdown), then restarted
# twice on the same directory; each restart's "loaded persisted state ...
# keys=N duration=D" log line, the time until it listens and the
# directory's size are printed. (The first restart replays the WAL, which
# holds what the last memtable held; pebble turns it into a table while
# opening, so the second restart reads tables only.)
#
# Everything runs on 127.0.0.1; servers are stopped on exit, error and
# Ctrl-C; logs and raw CSVs stay in the printed temp dir.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

if [[ "${QUICK:-0}" == 1 ]]; then
	ROUNDS=${ROUNDS:-1}
	REQUESTS=${REQUESTS:-20000}
	LOAD_KEYS=${LOAD_KEYS:-100000}
fi
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-200000}
CLIENTS=${CLIENTS:-50}
PIPELINES=${PIPELINES:-"1 16"}
KEYSPACE=${KEYSPACE:-100000}
MODES=${MODES:-"off no everysec always"}
LOAD_KEYS=${LOAD_KEYS:-1000000}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}

for tool in go redis-benchmark redis-cli timeout awk; do
	command -v "$tool" >/dev/null || { echo "persistence.sh: $tool not found (apt-get install redis-tools)" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cellpersist.XXXXXX")
raw="$tmp/raw"
mkdir -p "$raw"
spid="" # the running server, if any

kill_server() {
	[[ -n "$spid" ]] || return 0
	kill "$spid" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
	spid=""
}
trap kill_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

srv_pin=() cli_pin=() pin_note="not pinned"
if [[ "${NOPIN:-0}" != 1 ]] && command -v taskset >/dev/null && (($(nproc) >= 2)); then
	srv_pin=(taskset -c 0)
	cli_pin=(taskset -c 1)
	pin_note="pinned with taskset: cellserver on CPU 0 (GOMAXPROCS=1), clients on CPU 1"
fi

now() { date +%s.%N; }

# start_server LOG ARGS...: starts cellserver on a free port (--addr
# 127.0.0.1:0), waits for its startup line (60 s at most) and sets spid and
# port. Sets ready_s to the seconds from exec to the startup line.
start_server() {
	local log=$1
	shift
	local t0
	t0=$(now)
	"${srv_pin[@]}" "$tmp/cellserver" --addr 127.0.0.1:0 "$@" >"$log" 2>&1 &
	spid=$!
	port=""
	for _ in $(seq 600); do
		if ! kill -0 "$spid" 2>/dev/null; then
			echo "persistence.sh: cellserver $* exited; log:" >&2
			cat "$log" >&2
			spid=""
			return 1
		fi
		port=$(sed -n 's/.*cellserver started.* addr=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
		[[ -n "$port" ]] && break
		sleep 0.05
	done
	[[ -n "$port" ]] || { echo "persistence.sh: cellserver $* did not start within 60 s" >&2; cat "$log" >&2; return 1; }
	ready_s=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
}

# stop_server: SIGTERM, and the process must exit 0 within 60 s. Sets
# stop_s to the seconds it took.
stop_server() {
	local t0 rc=0
	t0=$(now)
	kill -TERM "$spid"
	for _ in $(seq 600); do kill -0 "$spid" 2>/dev/null || break; sleep 0.05; done
	if kill -0 "$spid" 2>/dev/null; then
		echo "persistence.sh: cellserver did not stop within 60 s of SIGTERM" >&2
		return 1
	fi
	wait "$spid" || rc=$?
	spid=""
	stop_s=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
	((rc == 0)) || { echo "persistence.sh: cellserver exited $rc after SIGTERM" >&2; return 1; }
}

info() { redis-cli -p "$port" INFO "$1" | tr -d '\r' | sed -n "s/^$2://p"; }

echo "== building cellserver and bench/loadkeys"
(cd "$repo" && go build -o "$tmp/cellserver" ./cmd/cellserver && go build -o "$tmp/loadkeys" ./bench/loadkeys)

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
	echo "date:      $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "machine:   $(nproc) CPUs, ${cpu:-unknown CPU}, $(uname -sr), data dirs on $(df -P "$tmp" | awk 'NR==2 {print $1}') ($(stat -f -c %T "$tmp"))"
	echo "versions:  $(go version | cut -d' ' -f3), $(redis-benchmark --version)"
	echo "load:      rounds=$ROUNDS requests=$REQUESTS clients=$CLIENTS pipelines=[$PIPELINES] keyspace=$KEYSPACE modes=[$MODES] load_keys=$LOAD_KEYS"
	echo "command:   redis-benchmark -c $CLIENTS -n $REQUESTS -P <p> -r $KEYSPACE --csv CL.THROTTLE key:__rand_int__ 15 30 60"
	echo "pinning:   $pin_note"
	echo "loadavg:   $(cut -d' ' -f1-3 /proc/loadavg) at start"
	echo "raw:       $tmp"
} | tee "$tmp/header.txt"

echo "== throughput ($((ROUNDS * $(wc -w <<<"$MODES") * $(wc -w <<<"$PIPELINES"))) redis-benchmark runs)"
: >"$raw/results.csv"
for round in $(seq "$ROUNDS"); do
	for mode in $MODES; do
		args=()
		if [[ "$mode" != off ]]; then
			rm -rf "$tmp/data-$mode"
			args=(--data-dir "$tmp/data-$mode" --fsync "$mode" ${SERVER_ARGS:-})
		fi
		if [[ "${PROFILE:-0}" == 1 ]]; then
			export CELLSERVER_CPU_PROFILE="$raw/r$round-$mode.pprof"
		fi
		start_server "$raw/r$round-$mode.log" "${args[@]}"
		for pl in $PIPELINES; do
			out="$raw/r$round-$mode-P$pl.csv"
			errs0=$(info stats total_error_replies)
			written0=$(info persistence written_changes)
			ck0=$(info persistence checkpoints)
			if ! timeout "$RUN_TIMEOUT" "${cli_pin[@]}" redis-benchmark -h 127.0.0.1 -p "$port" \
				-c "$CLIENTS" -n "$REQUESTS" -P "$pl" -r "$KEYSPACE" --csv \
				CL.THROTTLE 'key:__rand_int__' 15 30 60 >"$out" 2>"$out.err"; then
				echo "persistence.sh: redis-benchmark failed or timed out ($mode -P $pl); see $out.err" >&2
				exit 1
			fi
			errs1=$(info stats total_error_replies)
			written1=$(info persistence written_changes)
			ck1=$(info persistence checkpoints)
			if [[ "${errs1:-0}" != "${errs0:-0}" ]]; then
				echo "persistence.sh: $mode -P $pl: $((errs1 - errs0)) error replies" >&2
				exit 1
			fi
			written=- cks=-
			[[ -n "$written1" ]] && written=$((written1 - ${written0:-0}))
			[[ -n "$ck1" ]] && cks=$((ck1 - ${ck0:-0}))
			# CSV: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
			line=$(awk -F'"' 'NR==2 {print $4 "," $10 "," $14}' "$out")
			[[ -n "$line" ]] || { echo "persistence.sh: no result in $out" >&2; cat "$out" "$out.err" >&2; exit 1; }
			echo "$round,$mode,$pl,$line,$written" >>"$raw/results.csv"
			printf '  round %d  %-8s -P %-2s %12s rps  p99 %6s ms  written_changes %s  checkpoints %s\n' \
				"$round" "$mode" "$pl" "${line%%,*}" "$(cut -d, -f3 <<<"$line")" "$written" "$cks"
		done
		stop_server
	done
done

# Medians over rounds (for an even count, the lower middle), ratio vs off.
awk -F, -v modes="$MODES" -v pls="$PIPELINES" '
function median(list,   n, a, i, j, t) {
	n = split(list, a, " ")
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
	return a[int((n + 1) / 2)]
}
{ rps[$2, $3] = rps[$2, $3] " " $4; p99[$2, $3] = p99[$2, $3] " " $6 }
END {
	nm = split(modes, m, " "); np = split(pls, p, " ")
	fmt = "%-10s %3s %12s %10s %9s\n"
	printf fmt, "fsync", "-P", "rps", "vs off", "p99 ms"
	md = "| persistence | -P | rps | ratio vs off | p99 ms |\n|---|---:|---:|---:|---:|\n"
	for (k = 1; k <= np; k++) for (i = 1; i <= nm; i++) {
		r = median(rps[m[i], p[k]]); off = median(rps["off", p[k]])
		ratio = (off > 0) ? sprintf("%.2f", r / off) : "-"
		name = (m[i] == "off") ? "off" : "--fsync " m[i]
		printf fmt, name, p[k], sprintf("%.0f", r), ratio, median(p99[m[i], p[k]])
		md = md sprintf("| %s | %s | %.0f | %s | %s |\n", name, p[k], r, ratio, median(p99[m[i], p[k]]))
	}
	printf "\n%s", md > "/dev/stderr"
}' "$raw/results.csv" >"$tmp/table.txt" 2>"$tmp/table.md"

echo
echo "== throughput: medians of $ROUNDS round(s), $REQUESTS requests per run, $CLIENTS clients"
cat "$tmp/table.txt"
cat "$tmp/table.md"

echo
echo "== startup load time of $LOAD_KEYS keys"
unset CELLSERVER_CPU_PROFILE
dir="$tmp/data-load"
rm -rf "$dir"
start_server "$raw/load-fill.log" --data-dir "$dir" --fsync everysec
"${cli_pin[@]}" "$tmp/loadkeys" -addr "127.0.0.1:$port" -n "$LOAD_KEYS" -prefix load:key: | tee "$raw/load-fill.txt"
echo "  before stop: $(redis-cli -p "$port" INFO persistence | tr -d '\r' | grep -E '^(pending_changes|written_changes|disk_usage_bytes):' | tr '\n' ' ')"
stop_server
echo "  clean shutdown (SIGTERM) took ${stop_s}s; data dir $(du -sb "$dir" | cut -f1) bytes allocated (du -sb), $(du -sb --apparent-size "$dir" | cut -f1) apparent"
for restart in 1 2; do
	start_server "$raw/load-restart$restart.log" --data-dir "$dir" --fsync everysec
	loaded=$(grep -m1 'loaded persisted state' "$raw/load-restart$restart.log" || true)
	keys=$(sed -n 's/.* keys=\([0-9]*\).*/\1/p' <<<"$loaded")
	dur=$(sed -n 's/.* duration=\([^ ]*\).*/\1/p' <<<"$loaded")
	dbsize=$(redis-cli -p "$port" DBSIZE | tr -d '\r')
	files=$(ls "$dir" | grep -cE '\.(sst|log)$' || true)
	printf '  restart %d: loaded keys=%s duration=%s; listening %.2fs after exec; DBSIZE %s; %s .sst/.log files\n' \
		"$restart" "${keys:-?}" "${dur:-?}" "$ready_s" "$dbsize" "$files"
	echo "    $loaded"
	if [[ "$keys" != "$LOAD_KEYS" || "$dbsize" != "$LOAD_KEYS" ]]; then
		echo "persistence.sh: restart $restart loaded ${keys:-?} keys (DBSIZE $dbsize), want $LOAD_KEYS" >&2
		exit 1
	fi
	stop_server
done
echo "loadavg:   $(cut -d' ' -f1-3 /proc/loadavg) at end"
echo "raw results: $tmp (results.csv, one redis-benchmark CSV per run, server logs)"
