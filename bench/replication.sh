#!/usr/bin/env bash
# bench/replication.sh — the cost of replication on a cellserver primary:
# CL.THROTTLE throughput with two replicas attached against a primary with
# none, the replication lag under that load, and the time a new replica
# takes to fully sync 1M keys.
#
# Usage:
#   bench/replication.sh               # 3 rounds x 2000000 requests per run, 1M keys synced
#   QUICK=1 bench/replication.sh       # smoke run: 1 round x 200000 requests, 100k keys synced
#
# Environment:
#   ROUNDS     rounds (default 3; QUICK=1: 1). Medians of the rounds are shown.
#   REQUESTS   requests per redis-benchmark run, -n (default 2000000; QUICK=1: 200000)
#   CLIENTS    parallel connections, -c (default 50)
#   PIPELINE   pipeline depth, -P (default 16)
#   KEYSPACE   random key range, -r (default 100000)
#   SYNC_KEYS  keys loaded before the full-sync measurement (default 1000000; QUICK=1: 100000)
#   SAMPLE_MS  lag sampling period in ms (default 100)
#   NOPIN=1    do not pin with taskset
#   REPLICA_PIN  where the replicas run when pinning: client (default: CPU 1,
#              with redis-benchmark), server (CPU 0, with the primaries) or
#              none (where the scheduler puts them)
#   RUN_TIMEOUT  seconds after which one redis-benchmark run is abandoned (default 300)
#   CELLSERVER a prebuilt cellserver binary to measure instead of building ./cmd/cellserver
#
# What it does: builds cellserver (go build ./cmd/cellserver) and
# bench/loadkeys into a temp dir, then starts on free 127.0.0.1 ports
#   primary   P  with two replicas R1, R2 (--replicaof "127.0.0.1 <P>")
#   primary   S  alone (no replica)
# and waits until R1 and R2 report master_link_status:up. For every round
# it runs redis-benchmark -c CLIENTS -n REQUESTS -P PIPELINE -r KEYSPACE
# --csv CL.THROTTLE tkey:__rand_int__ 15 30 60 against P, then against S
# (interleaved: P S P S ...). During the runs on P it samples every
# SAMPLE_MS ms the replicas' slave_repl_offset and then P's
# master_repl_offset: lag in bytes = master_repl_offset - slave_repl_offset
# (read in that order, so never negative; it overstates the lag by what P
# streams between the reads). Lag in seconds is estimated as bytes / P's
# stream rate over the run (master_repl_offset growth per second), and the
# catch-up time after each run is how long the replicas take to reach P's
# final offset once redis-benchmark has ended. Then, for the full sync: a
# fresh primary F gets SYNC_KEYS CL.THROTTLE keys (bench/loadkeys), a fresh
# node N is started, and the time from REPLICAOF <F> to
# master_link_status:up (polled every 10 ms) is the full-sync time; N's
# DBSIZE must then equal F's.
#
# Pinning (taskset, 2+ CPUs): P and S on CPU 0, redis-benchmark on CPU 1,
# R1 and R2 as REPLICA_PIN says. In production replicas run on other
# machines; on two CPUs they take time from either the client or the
# primary, so the rps ratio understates the primary's own cost. The
# primary's CPU time per request (with replicas / without) does not depend
# on where the replicas run: it is shown beside the rps ratio. F and N (full
# sync) are not pinned.
#
# Until replication exists (a build without --replicaof), it stops at once
# with "replication is not available in this build" and the server's error.
#
# Output: the exact redis-benchmark command, per-run lines, a table (median
# rps with two replicas, with none, ratio), lag figures, the full-sync time;
# raw CSVs, results.csv, lag samples and logs stay in the printed temp dir.
# Every server is stopped on exit, on error and on Ctrl-C.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

if [[ "${QUICK:-0}" == 1 ]]; then
	ROUNDS=${ROUNDS:-1}
	REQUESTS=${REQUESTS:-200000}
	SYNC_KEYS=${SYNC_KEYS:-100000}
fi
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-2000000}
CLIENTS=${CLIENTS:-50}
PIPELINE=${PIPELINE:-16}
KEYSPACE=${KEYSPACE:-100000}
SYNC_KEYS=${SYNC_KEYS:-1000000}
SAMPLE_MS=${SAMPLE_MS:-100}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}

for tool in go redis-benchmark redis-cli timeout awk; do
	command -v "$tool" >/dev/null || { echo "replication.sh: $tool not found (apt-get install redis-tools)" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cellrepl.XXXXXX")
raw="$tmp/raw"
mkdir -p "$raw"
pids=()
bench_pid=
sampler_pid=

cleanup() {
	local pid
	for pid in $bench_pid $sampler_pid; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
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

die() {
	echo "replication.sh: $*" >&2
	exit 1
}

# free_port prints a TCP port on 127.0.0.1 that nothing listens on and that
# this script has not handed out yet.
used_ports=" "
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 30000))
		[[ "$used_ports" == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			used_ports+="$p "
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

# start NAME PORT PIN... -- ARGS...: starts cellserver on PORT in the
# background (log in $tmp/NAME.log); sets started_pid.
start() {
	local name=$1 port=$2
	shift 2
	local pin=()
	while [[ $1 != -- ]]; do pin+=("$1"); shift; done
	shift
	"${pin[@]}" "$tmp/cellserver" --addr "127.0.0.1:$port" "$@" >"$tmp/$name.log" 2>&1 &
	started_pid=$!
	pids+=("$started_pid")
}

# wait_ready NAME PORT PID: until the server answers PING (20 s at most).
wait_ready() {
	for _ in $(seq 200); do
		if ! kill -0 "$3" 2>/dev/null; then
			if grep -q -- 'not defined: -replicaof\|not defined: -repl' "$tmp/$1.log"; then
				die "replication is not available in this build: $1 refused its options: $(grep -m1 'not defined' "$tmp/$1.log")"
			fi
			echo "replication.sh: $1 (port $2) exited; its log:" >&2
			cat "$tmp/$1.log" >&2
			exit 1
		fi
		if [[ "$(timeout 2 redis-cli -p "$2" PING 2>/dev/null)" == PONG ]]; then return 0; fi
		sleep 0.1
	done
	die "$1 (port $2) not ready after 20 s"
}

# field PORT SECTION NAME: one INFO field ("" if absent).
field() {
	timeout 5 redis-cli -p "$1" INFO "$2" 2>/dev/null | tr -d '\r' | sed -n "s/^$3://p"
}

# wait_link NAME PORT SECONDS: until master_link_status:up.
wait_link() {
	local deadline=$(($(date +%s) + $3)) st
	while :; do
		st=$(field "$2" replication master_link_status)
		[[ "$st" == up ]] && return 0
		if (($(date +%s) >= deadline)); then
			die "replication is not working: $1 (port $2) reports master_link_status:'${st}' after $3 s (INFO replication: $(timeout 5 redis-cli -p "$2" INFO replication 2>&1 | tr -d '\r' | tr '\n' ' '))"
		fi
		sleep 0.01
	done
}

srv_pin=() cli_pin=() rep_pin=() pin_note="not pinned"
if [[ "${NOPIN:-0}" != 1 ]] && command -v taskset >/dev/null && (($(nproc) >= 2)); then
	srv_pin=(taskset -c 0)
	cli_pin=(taskset -c 1)
	case "${REPLICA_PIN:-client}" in
	client) rep_pin=(taskset -c 1) ;;
	server) rep_pin=(taskset -c 0) ;;
	none) rep_pin=() ;;
	*) die "REPLICA_PIN must be client, server or none" ;;
	esac
	pin_note="pinned with taskset: primaries P and S on CPU 0, redis-benchmark on CPU 1, replicas R1, R2: ${REPLICA_PIN:-client} (${rep_pin[*]:-unpinned})"
fi

echo "== building cellserver and loadkeys"
if [[ -n "${CELLSERVER:-}" ]]; then
	cp "$CELLSERVER" "$tmp/cellserver"
else
	(cd "$repo" && go build -o "$tmp/cellserver" ./cmd/cellserver)
fi
(cd "$repo" && go build -o "$tmp/loadkeys" ./bench/loadkeys)

pport=$(free_port) sport=$(free_port) r1port=$(free_port) r2port=$(free_port)
start primary "$pport" "${srv_pin[@]}" --
ppid=$started_pid
start alone "$sport" "${srv_pin[@]}" --
spid=$started_pid
wait_ready primary "$pport" "$ppid"
wait_ready alone "$sport" "$spid"
start replica1 "$r1port" "${rep_pin[@]}" -- --replicaof "127.0.0.1 $pport"
r1pid=$started_pid
start replica2 "$r2port" "${rep_pin[@]}" -- --replicaof "127.0.0.1 $pport"
r2pid=$started_pid
wait_ready replica1 "$r1port" "$r1pid"
wait_ready replica2 "$r2port" "$r2pid"
wait_link replica1 "$r1port" 30
wait_link replica2 "$r2port" 30
[[ "$(field "$pport" replication connected_slaves)" == 2 ]] ||
	die "primary reports connected_slaves:$(field "$pport" replication connected_slaves), want 2"

bench_cmd=(redis-benchmark -h 127.0.0.1 -p PORT -c "$CLIENTS" -n "$REQUESTS" -P "$PIPELINE" -r "$KEYSPACE" --csv
	CL.THROTTLE 'tkey:__rand_int__' 15 30 60)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
	echo "date:      $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "machine:   $(nproc) CPUs, ${cpu:-unknown CPU}, $(uname -sr)"
	echo "tree:      $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
	echo "versions:  $(go version | cut -d' ' -f3), $(redis-benchmark --version)"
	echo "command:   ${bench_cmd[*]}"
	echo "load:      rounds=$ROUNDS requests=$REQUESTS clients=$CLIENTS pipeline=$PIPELINE keyspace=$KEYSPACE sync_keys=$SYNC_KEYS sample=${SAMPLE_MS}ms"
	echo "pinning:   $pin_note"
	echo "nodes:     P 127.0.0.1:$pport (pid $ppid) with R1 :$r1port (pid $r1pid), R2 :$r2port (pid $r2pid); S 127.0.0.1:$sport (pid $spid), no replica"
	echo "loadavg:   $(cut -d' ' -f1-3 /proc/loadavg) at start"
	echo "raw:       $tmp"
} | tee "$tmp/header.txt"

clk_tck=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
now_ms() { date +%s%3N; }

# sampler OUT: every SAMPLE_MS ms, one line "ms r1_lag r2_lag master_offset"
# until killed.
sampler() {
	local out=$1 o1 o2 om
	while :; do
		o1=$(field "$r1port" replication slave_repl_offset)
		o2=$(field "$r2port" replication slave_repl_offset)
		om=$(field "$pport" replication master_repl_offset)
		if [[ -n "$o1" && -n "$o2" && -n "$om" ]]; then
			echo "$(now_ms) $((om - o1)) $((om - o2)) $om" >>"$out"
		fi
		sleep "$(awk -v ms="$SAMPLE_MS" 'BEGIN { printf "%.3f", ms / 1000 }')"
	done
}

# caught_up_ms: ms until both replicas reach P's master_repl_offset (60 s max).
caught_up_ms() {
	local t0 om
	t0=$(now_ms)
	while :; do
		om=$(field "$pport" replication master_repl_offset)
		if [[ "$(field "$r1port" replication slave_repl_offset)" == "$om" &&
			"$(field "$r2port" replication slave_repl_offset)" == "$om" &&
			"$(field "$pport" replication master_repl_offset)" == "$om" ]]; then
			echo $(($(now_ms) - t0))
			return
		fi
		(($(now_ms) - t0 < 60000)) || die "replicas did not reach the primary's offset within 60 s"
		sleep 0.01
	done
}

# run_one NAME PORT PID ROUND: one redis-benchmark run, appended to
# results.csv as round,server,rps,p50,p99,server CPU %,server us/request.
run_one() {
	local name=$1 port=$2 pid=$3 round=$4
	local out="$raw/r${round}-${name}.csv"
	local lagf="$raw/r${round}-lag.txt" off0=
	if [[ $name == replicas ]]; then
		: >"$lagf"
		off0=$(field "$pport" replication master_repl_offset)
		sampler "$lagf" &
		sampler_pid=$!
	fi
	local s0 t0
	s0=$(ticks "$pid") t0=$(now_ms)
	timeout "$RUN_TIMEOUT" "${cli_pin[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$REQUESTS" \
		-P "$PIPELINE" -r "$KEYSPACE" --csv CL.THROTTLE 'tkey:__rand_int__' 15 30 60 >"$out" 2>"$out.err" &
	bench_pid=$!
	wait "$bench_pid" || { bench_pid=; die "redis-benchmark failed or timed out ($name); see $out.err"; }
	bench_pid=
	local s1 t1
	s1=$(ticks "$pid") t1=$(now_ms)
	local extra=""
	if [[ $name == replicas ]]; then
		kill "$sampler_pid" 2>/dev/null || true
		wait "$sampler_pid" 2>/dev/null || true
		sampler_pid=
		local catch off1
		catch=$(caught_up_ms)
		off1=$(field "$pport" replication master_repl_offset)
		# stream rate (bytes/s) over the run; lag samples taken during it
		awk -v r="$round" -v b="$((off1 - off0))" -v ms="$((t1 - t0))" -v c="$catch" '
			{ for (i = 2; i <= 3; i++) { n++; l[n] = $i; if ($i > mx) mx = $i; s += $i } }
			END {
				rate = b / ((ms > 0 ? ms : 1) / 1000)
				if (n == 0) { printf "%s,%d,0,0,0,0,0,0,%d\n", r, rate, c; exit }
				for (i = 2; i <= n; i++) { t = l[i]; for (j = i - 1; j >= 1 && l[j] > t; j--) l[j + 1] = l[j]; l[j + 1] = t }
				med = l[int((n + 1) / 2)]; p99 = l[int(n * 0.99 + 0.999)] ; if (p99 == "") p99 = mx
				printf "%s,%d,%d,%d,%d,%d,%.4f,%.4f,%.4f,%d\n", r, rate, n, med, p99, mx, (rate > 0 ? med / rate : 0), (rate > 0 ? p99 / rate : 0), (rate > 0 ? mx / rate : 0), c
			}' "$lagf" >>"$raw/lag.csv"
		extra=$(tail -1 "$raw/lag.csv" | awk -F, '{ printf "  lag bytes median %s p99 %s max %s (%s samples), stream %.1f MB/s, caught up %s ms after the run", $4, $5, $6, $3, $2 / 1e6, $10 }')
	fi
	local line
	line=$(awk -F'"' 'NR==2 {print $4 "," $10 "," $14}' "$out")
	[[ -n "$line" ]] || { cat "$out" "$out.err" >&2; die "no result in $out"; }
	local cpuinfo
	cpuinfo=$(awk -v s="$((s1 - s0))" -v ms="$((t1 - t0))" -v hz="$clk_tck" -v rps="${line%%,*}" \
		'BEGIN { w = (ms > 0 ? ms : 1) / 1000; c = 100 * s / hz / w; printf "%.0f,%.2f", c, (rps > 0 ? c / 100 / rps * 1e6 : 0) }')
	echo "$round,$name,$line,$cpuinfo" >>"$raw/results.csv"
	printf '  round %d  %-9s %12s rps  p99 %s ms  primary cpu %s%%%s\n' "$round" "$name" "${line%%,*}" "${line##*,}" "${cpuinfo%%,*}" "$extra"
}

: >"$raw/results.csv"
: >"$raw/lag.csv"
echo "== throughput: $ROUNDS round(s), P with two replicas then S with none"
for round in $(seq "$ROUNDS"); do
	run_one replicas "$pport" "$ppid" "$round"
	run_one none "$sport" "$spid" "$round"
done

# The replicas hold what the primary holds.
caught_up_ms >/dev/null
pk=$(timeout 10 redis-cli -p "$pport" DBSIZE) k1=$(timeout 10 redis-cli -p "$r1port" DBSIZE) k2=$(timeout 10 redis-cli -p "$r2port" DBSIZE)
echo "DBSIZE: primary $pk, R1 $k1, R2 $k2" | tee -a "$tmp/header.txt"
[[ "$pk" == "$k1" && "$pk" == "$k2" ]] || die "the replicas' DBSIZE differs from the primary's"
perr=$(field "$pport" stats total_error_replies) serr=$(field "$sport" stats total_error_replies)
echo "error replies: P ${perr:-?}, S ${serr:-?}" | tee -a "$tmp/header.txt"

median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
rps_with=$(awk -F, '$2 == "replicas" { printf "%s ", $3 }' "$raw/results.csv" | median)
rps_none=$(awk -F, '$2 == "none" { printf "%s ", $3 }' "$raw/results.csv" | median)
p99_with=$(awk -F, '$2 == "replicas" { printf "%s ", $5 }' "$raw/results.csv" | median)
p99_none=$(awk -F, '$2 == "none" { printf "%s ", $5 }' "$raw/results.csv" | median)
us_with=$(awk -F, '$2 == "replicas" { printf "%s ", $7 }' "$raw/results.csv" | median)
us_none=$(awk -F, '$2 == "none" { printf "%s ", $7 }' "$raw/results.csv" | median)
lag_med=$(awk -F, '{ printf "%s ", $4 }' "$raw/lag.csv" | median)
lag_p99=$(awk -F, '{ printf "%s ", $5 }' "$raw/lag.csv" | median)
lag_max=$(awk -F, '{ print $6 }' "$raw/lag.csv" | sort -g | tail -1)
lag_s_med=$(awk -F, '{ printf "%s ", $7 }' "$raw/lag.csv" | median)
lag_s_p99=$(awk -F, '{ printf "%s ", $8 }' "$raw/lag.csv" | median)
catch=$(awk -F, '{ printf "%s ", $10 }' "$raw/lag.csv" | median)
rate=$(awk -F, '{ printf "%s ", $2 }' "$raw/lag.csv" | median)

echo
echo "== medians of $ROUNDS round(s), $REQUESTS requests per run"
printf '%-40s %14s %14s %7s %12s %12s %14s %14s\n' workload "2 replicas rps" "no replica rps" ratio "p99 ms 2r" "p99 ms 0r" "CPU us/req 2r" "CPU us/req 0r"
printf '%-40s %14.0f %14.0f %7.2f %12s %12s %14s %14s\n' "CL.THROTTLE, $KEYSPACE random keys, -P $PIPELINE" "$rps_with" "$rps_none" \
	"$(awk -v a="$rps_with" -v b="$rps_none" 'BEGIN { print (b > 0 ? a / b : 0) }')" "$p99_with" "$p99_none" "$us_with" "$us_none"
echo
echo "| workload | 2 replicas rps | no replica rps | ratio | p99 ms (2 replicas / none) | primary CPU µs/req (2 replicas / none) |"
echo "|---|---:|---:|---:|---:|---:|"
printf '| CL.THROTTLE, %s random keys, -P %s -c %s | %.0f | %.0f | %.2f | %s / %s | %s / %s |\n' "$KEYSPACE" "$PIPELINE" "$CLIENTS" "$rps_with" "$rps_none" \
	"$(awk -v a="$rps_with" -v b="$rps_none" 'BEGIN { print (b > 0 ? a / b : 0) }')" "$p99_with" "$p99_none" "$us_with" "$us_none"
echo "primary CPU per request, no replica / 2 replicas: $(awk -v a="$us_none" -v b="$us_with" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }') (the rps ratio a primary-bound deployment, replicas on other machines, would see)"
echo
echo "replication lag under that load (samples every ${SAMPLE_MS} ms of both replicas, medians over rounds):"
echo "  bytes:   median $lag_med, p99 $lag_p99, max $lag_max (master_repl_offset - slave_repl_offset)"
echo "  seconds: median $lag_s_med, p99 $lag_s_p99 (bytes / the primary's stream rate of $(awk -v r="$rate" 'BEGIN { printf "%.1f", r / 1e6 }') MB/s)"
echo "  caught up ${catch} ms after redis-benchmark ended"

# Full sync of SYNC_KEYS keys to a new replica.
echo
echo "== full sync: $SYNC_KEYS keys"
fport=$(free_port) nport=$(free_port)
start fullprimary "$fport" --
fpid=$started_pid
start newreplica "$nport" --
npid=$started_pid
wait_ready fullprimary "$fport" "$fpid"
wait_ready newreplica "$nport" "$npid"
"$tmp/loadkeys" -addr "127.0.0.1:$fport" -n "$SYNC_KEYS" -prefix sync:key: -args "15 1 3600" | tee -a "$tmp/header.txt"
t0=$(now_ms)
reply=$(timeout 10 redis-cli -p "$nport" REPLICAOF 127.0.0.1 "$fport" 2>&1)
[[ "$reply" == OK ]] || die "replication is not available: REPLICAOF answered '$reply'"
wait_link newreplica "$nport" 600
t1=$(now_ms)
fk=$(timeout 10 redis-cli -p "$fport" DBSIZE) nk=$(timeout 10 redis-cli -p "$nport" DBSIZE)
echo "full sync of $SYNC_KEYS keys: $(awk -v ms="$((t1 - t0))" 'BEGIN { printf "%.2f", ms / 1000 }') s from REPLICAOF to master_link_status:up; DBSIZE primary $fk, replica $nk" | tee -a "$tmp/header.txt"
[[ "$fk" == "$nk" ]] || die "after the full sync the replica has $nk keys, the primary $fk"
echo
echo "raw results: $tmp (results.csv: round,server,rps,p50,p99,primary CPU %,primary CPU µs/req; lag.csv: round,stream B/s,samples,lag median,p99,max B,median s,p99 s,max s,catch-up ms; lag samples; logs)"
