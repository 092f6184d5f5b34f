#!/usr/bin/env bash
# bench/sync-replicas.sh: what acknowledged replication (--sync-replicas 1)
# costs against asynchronous replication (--sync-replicas 0), on one build,
# one primary with one replica on 127.0.0.1, interleaved in one run.
#
#   bench/sync-replicas.sh              # 5 rounds, about 2 minutes
#   QUICK=1 bench/sync-replicas.sh      # 1 round of small runs (smoke run)
#   ROUNDS=7 REQUESTS=1500000 bench/sync-replicas.sh
#
# Environment:
#   ROUNDS       rounds (default 5; QUICK=1: 1); each round runs every
#                workload once in each mode
#   REQUESTS     requests of a -P 16 run (default 1000000; QUICK=1: 100000)
#   CLIENTS      connections of a -P 16 run (default 50)
#   KEYSPACE     random keys, -r (default 100000)
#   P1           the -P 1 runs, "clients:requests ..." (default
#                "1:20000 50:200000"; QUICK=1: "1:2000 50:20000")
#   REPLICA_PIN  where the replica runs when pinning: client (default: CPU
#                1, with redis-benchmark), server (CPU 0, with the primary)
#                or none
#   NOPIN=1      pin nothing
#   SWITCH       config (default: CONFIG SET sync-replicas N on the running
#                primary) or restart (a new primary started with
#                --sync-replicas N for every run, the replica pointed at it)
#   RUN_TIMEOUT  seconds after which a redis-benchmark run is abandoned (300)
#   QUIET        the summary also gives the -P 16 ratios of the rounds where
#                other processes used less than this % of one CPU during
#                both runs (default 25)
#   CELLSERVER   a prebuilt binary instead of building ./cmd/cellserver
#
# Every run: the mode is set, the script waits until the replica has
# applied the primary's whole stream (and, in sync mode, until the primary
# is not fenced), then runs
#   redis-benchmark -c C -n N -P P -r KEYSPACE --csv CL.THROTTLE sync:__rand_int__ 9999 1 3600
# on CPU 1, the primary on CPU 0 (bench/serverlib.sh). That quota (a burst
# of 10000, one call an hour) is one no key exhausts and no key outlives
# during the run: every call is admitted and changes state (what sync mode
# holds; the stream bytes per request in the table show it), and no expiry
# mixes into the runs. An unmeasured async run of N requests first creates
# the keys. Within a round the mode that goes first alternates (async first
# in odd rounds). Per run it records requests/s, p50 and p99 (redis-benchmark's
# CSV), the CPU time (utime+stime, /proc/PID/stat) of the primary and of
# the replica divided by the requests, redis-benchmark's own CPU, the CPU
# that other processes used meanwhile (/proc/stat busy time minus these
# three), and the error replies the primary sent. The summary gives the
# medians of each mode and the median of the per-round ratios sync/async
# (and, on a shared machine, the ratios of the quiet rounds apart).
#
# A build without --sync-replicas runs both columns asynchronously and says
# so (the "sync" column is then a second async sample: a noise estimate).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then sed -n 2,50p "$0"; exit 0; fi
invocation="$(for v in ROUNDS REQUESTS CLIENTS KEYSPACE P1 REPLICA_PIN NOPIN SWITCH QUICK RUN_TIMEOUT QUIET CELLSERVER; do
	if [[ -n "${!v:-}" ]]; then printf '%s=%q ' "$v" "${!v}"; fi; done)bench/sync-replicas.sh"
if [[ -n "${QUICK:-}" ]]; then
	ROUNDS=${ROUNDS:-1} REQUESTS=${REQUESTS:-100000} P1=${P1:-"1:2000 50:20000"}
fi
ROUNDS=${ROUNDS:-5}
REQUESTS=${REQUESTS:-1000000}
CLIENTS=${CLIENTS:-50}
KEYSPACE=${KEYSPACE:-100000}
P1=${P1:-"1:20000 50:200000"}
SWITCH=${SWITCH:-config}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
QUIET=${QUIET:-25}
for tool in go redis-benchmark redis-cli timeout awk python3; do
	command -v "$tool" >/dev/null || { echo "sync-replicas.sh: $tool not found" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cellsync.XXXXXX")
. bench/serverlib.sh # pids, cleanup, srvpin/clipin, freeport, start, stop, median
die() { echo "sync-replicas.sh: $*" >&2; exit 1; }
reppin=()
if [[ -n "${NOPIN:-}" ]]; then
	srvpin=() clipin=()
elif ((${#srvpin[@]})); then
	case "${REPLICA_PIN:-client}" in
	client) reppin=(taskset -c 1) ;;
	server) reppin=(taskset -c 0) ;;
	none) ;;
	*) die "REPLICA_PIN must be client, server or none" ;;
	esac
fi

if [[ -n "${CELLSERVER:-}" ]]; then cp "$CELLSERVER" "$tmp/cellserver"; else go build -o "$tmp/cellserver" ./cmd/cellserver; fi
supported=0
help=$("$tmp/cellserver" --help 2>&1 || true)
[[ "$help" == *"--sync-replicas "* ]] && supported=1

rcli() { timeout 5 redis-cli -p "$1" "${@:2}" 2>&1 | tr -d '\r'; }
field() { rcli "$1" INFO "$2" | sed -n "s/^$3://p"; }
now_ms() { date +%s%3N; }
# until CMD... succeeds, every 10 ms, for at most $1 s
waitfor() {
	local deadline=$(($(now_ms) + $1 * 1000))
	shift
	until "$@"; do (($(now_ms) < deadline)) || return 1; sleep 0.01; done
}
linked() { [[ "$(field "$rport" replication master_link_status)" == up ]]; }
caught_up() {
	local m
	m=$(field "$pport" replication master_repl_offset)
	[[ -n "$m" && "$(field "$rport" replication slave_repl_offset)" == "$m" ]]
}
unfenced() { [[ "$(field "$pport" replication sync_fenced)" != 1 ]]; }

# primary_up [ARGS...]: a primary on CPU 0 (pport, ppid)
primary_up() { start "$@"; pport=$port ppid=$pid; }
# replica_up: the replica of pport, pinned as REPLICA_PIN says (rport, rpid)
replica_up() {
	local keep=("${srvpin[@]}")
	srvpin=("${reppin[@]}")
	start --replicaof "127.0.0.1 $pport"
	srvpin=("${keep[@]}")
	rport=$port rpid=$pid
	waitfor 30 linked || die "the replica's link did not come up: $(rcli "$rport" INFO replication | tr '\n' ' ')"
}

primary_up
replica_up
switch=none
if ((supported)); then
	if [[ "$SWITCH" == config && "$(rcli "$pport" CONFIG SET sync-replicas 0)" == OK ]]; then
		switch=config
	else
		switch=restart
	fi
fi
mode=async
# set_mode async|sync: makes the primary run in that mode
set_mode() {
	local n=0
	[[ $1 == sync ]] && n=1
	case $switch in
	none) ;;
	config)
		[[ "$(rcli "$pport" CONFIG SET sync-replicas "$n")" == OK ]] || die "CONFIG SET sync-replicas $n failed"
		;;
	restart)
		if [[ $1 != "$mode" ]]; then
			kill "$ppid"
			wait "$ppid" 2>/dev/null || true
			primary_up --sync-replicas "$n"
			[[ "$(rcli "$rport" REPLICAOF 127.0.0.1 "$pport")" == OK ]] || die "REPLICAOF failed"
			waitfor 30 linked || die "the replica did not link to the new primary"
			warmup >/dev/null
		fi
		;;
	esac
	mode=$1
	if ((supported)); then
		[[ "$(field "$pport" replication sync_replicas)" == "$n" ]] ||
			die "INFO replication says sync_replicas:$(field "$pport" replication sync_replicas), want $n"
	fi
}
set_mode async

hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }                          # utime+stime
childticks() { awk '{print $16 + $17}' "/proc/$$/stat"; }                    # reaped children
busyticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8; exit}' /proc/stat; } # all CPUs, not idle/iowait/steal
stealticks() { awk '/^cpu / {print $9; exit}' /proc/stat; }

# warmup: an unmeasured run that creates the keys
warmup() {
	# shellcheck disable=SC2046
	echo "$(timeout "$RUN_TIMEOUT" "${clipin[@]}" $(benchcmd 16 "$CLIENTS" "$REQUESTS" | tr -d "'") |
		awk -F'"' 'NR == 2 {printf "%.0f requests/s", $4}'), $(rcli "$pport" DBSIZE) keys"
}
benchcmd() { # benchcmd P CLIENTS REQUESTS
	echo redis-benchmark -h 127.0.0.1 -p "$pport" -c "$2" -n "$3" -P "$1" -r "$KEYSPACE" --csv CL.THROTTLE 'sync:__rand_int__' 9999 1 3600
}
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
case $switch in
none) modenote="this build does not know --sync-replicas: BOTH COLUMNS RUN ASYNC (the sync column is a second async sample)" ;;
config) modenote="--sync-replicas known; each run sets the mode with CONFIG SET sync-replicas 0|1 on the same primary" ;;
restart) modenote="--sync-replicas known; each change of mode restarts the primary with --sync-replicas 0|1 (then re-creates the keys unmeasured)$([[ $SWITCH == restart ]] || echo ': CONFIG SET does not take it')" ;;
esac
{
	echo "command:   $invocation"
	echo "runs:      $(benchcmd 16 "$CLIENTS" "$REQUESTS")"
	for w in $P1; do echo "           $(benchcmd 1 "${w%%:*}" "${w##*:}")"; done
	echo "servers:   $tmp/cellserver --addr 127.0.0.1:$pport (primary, pid $ppid); --addr 127.0.0.1:$rport --replicaof \"127.0.0.1 $pport\" (replica, pid $rpid)"
	echo "modes:     $modenote"
	echo "date:      $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "machine:   $(nproc) CPUs, ${cpu:-unknown CPU}, $(uname -sr)"
	echo "tree:      $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')${CELLSERVER:+ (binary: $CELLSERVER)}"
	echo "versions:  $(go version | cut -d' ' -f3), $(redis-benchmark --version)"
	if ((${#srvpin[@]})); then
		echo "pinning:   primary on CPU 0, redis-benchmark on CPU 1, replica: ${REPLICA_PIN:-client} (${reppin[*]:-unpinned})"
	else
		echo "pinning:   none"
	fi
	echo "load:      loadavg $(cut -d' ' -f1-3 /proc/loadavg) at start; per run, 'others' is the CPU other processes used (% of one CPU)"
	echo "raw:       $tmp"
} | tee "$tmp/header.txt"

results=$tmp/results.csv
echo "round,mode,P,clients,requests,rps,p50_ms,p99_ms,primary_us_req,replica_us_req,bench_cpu_pct,others_cpu_pct,stream_B_req,errors,seconds" >"$results"
steal0=$(stealticks)
# run ROUND P CLIENTS REQUESTS: one redis-benchmark run in the current mode
run() {
	local round=$1 P=$2 c=$3 n=$4 out
	out=$tmp/r$1-$mode-P$2-c$3.csv
	waitfor 60 caught_up || die "the replica did not reach the primary's offset within 60 s"
	if [[ $mode == sync ]] && ((supported)); then waitfor 10 unfenced || die "the primary stays fenced in sync mode"; fi
	local p0 r0 c0 b0 o0 e0 t0 p1 r1 c1 b1 o1 e1 t1
	o0=$(field "$pport" replication master_repl_offset) e0=$(field "$pport" stats total_error_replies)
	p0=$(ticks "$ppid") r0=$(ticks "$rpid") c0=$(childticks) b0=$(busyticks) t0=$(now_ms)
	# shellcheck disable=SC2046
	timeout "$RUN_TIMEOUT" "${clipin[@]}" $(benchcmd "$P" "$c" "$n" | tr -d "'") >"$out" 2>"$out.err" ||
		die "redis-benchmark failed or timed out; see $out.err"
	p1=$(ticks "$ppid") r1=$(ticks "$rpid") c1=$(childticks) b1=$(busyticks) t1=$(now_ms)
	o1=$(field "$pport" replication master_repl_offset) e1=$(field "$pport" stats total_error_replies)
	local line
	line=$(awk -F'"' 'NR == 2 {print $4 "," $10 "," $14}' "$out")
	[[ -n "$line" ]] || { cat "$out" "$out.err" >&2; die "no result in $out"; }
	awk -v r="$round" -v m="$mode" -v P="$P" -v c="$c" -v n="$n" -v line="$line" -v hz="$hz" -v ms="$((t1 - t0))" \
		-v dp="$((p1 - p0))" -v dr="$((r1 - r0))" -v dc="$((c1 - c0))" -v db="$((b1 - b0))" -v bytes="$((o1 - o0))" -v err="$((${e1:-0} - ${e0:-0}))" '
		BEGIN {
			s = ms / 1000
			others = 100 * (db - dp - dr - dc) / hz / s
			if (others < 0) others = 0
			printf "%s,%s,%s,%s,%s,%s,%.3f,%.3f,%.1f,%.1f,%d,%d,%.2f\n", r, m, P, c, n, line,
				1e6 * dp / hz / n, 1e6 * dr / hz / n, 100 * dc / hz / s, others, bytes / n, err, s
		}' >>"$results"
	tail -1 "$results" | awk -F, '{printf "%5s  %-5s %3s %4s %9.0f %7.3f %7.3f %9.3f %9.3f %6.0f %7.0f %6d %4d %6.2f\n",
		$1, $2, $3, $4, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15}'
}

workloads=("16:$CLIENTS:$REQUESTS")
calls=$((REQUESTS * (2 * ROUNDS + 1)))
for w in $P1; do workloads+=("1:$w"); calls=$((calls + 2 * ROUNDS * ${w##*:})); done
# keys are drawn at random: stay well below the burst of 10000 calls a key
((calls / KEYSPACE <= 4000)) || die "$calls calls over $KEYSPACE keys would exhaust some keys' quota: fewer ROUNDS or REQUESTS, or more KEYSPACE"
echo
echo "warm-up (async, not measured): $(warmup)"
echo
echo "per run: requests/s, latency (ms), CPU time per request (us) of the primary and of the replica, CPU of"
echo "redis-benchmark and of other processes (% of one CPU), replication stream bytes per request, error replies, seconds"
printf '%5s  %-5s %3s %4s %9s %7s %7s %9s %9s %6s %7s %6s %4s %6s\n' round mode -P -c rps p50 p99 "primary" "replica" bench others "B/req" err s
for round in $(seq "$ROUNDS"); do
	order=(async sync)
	((round % 2)) || order=(sync async)
	for w in "${workloads[@]}"; do
		IFS=: read -r P c n <<<"$w"
		for m in "${order[@]}"; do
			set_mode "$m"
			run "$round" "$P" "$c" "$n"
		done
	done
done
steal1=$(stealticks)

# column COL MODE P CLIENTS: that column's values over the rounds
column() { awk -F, -v col="$1" -v m="$2" -v P="$3" -v c="$4" 'NR > 1 && $2 == m && $3 == P && $4 == c {printf "%s ", $col}' "$results"; }
# ratios COL P CLIENTS: per-round sync/async of a column
# (with QUIETONLY=1, only the rounds where other processes used less than
# QUIET % of a CPU during both runs)
ratios() {
	awk -F, -v col="$1" -v P="$2" -v c="$3" -v q="${QUIETONLY:+$QUIET}" 'NR > 1 && $3 == P && $4 == c {v[$1 "," $2] = $col; o[$1 "," $2] = $12; r[$1] = 1}
		END {
			for (k = 1; k in r; k++)
				if (v[k ",async"] > 0 && (q == "" || (o[k ",async"] < q && o[k ",sync"] < q)))
					printf "%.3f ", v[k ",sync"] / v[k ",async"]
		}' "$results"
}
med() { column "$@" | median | awk -v col="$1" '{printf (col == 6 ? "%.0f" : col == 12 ? "%.1f" : "%.3f"), $1}'; }
medratio() { ratios "$@" | median | awk '{printf "%.3f", $1}'; }
pr() { printf '%-26s %12s %12s %12s   %s\n' "$@"; }
echo
echo "== summary: medians of $ROUNDS round(s); ratio = median of the per-round ratios sync/async"
((supported)) || echo "   (this build has no --sync-replicas: both columns ran async)"
echo
echo "-P 16, -c $CLIENTS, $REQUESTS requests, CL.THROTTLE over $KEYSPACE random keys"
pr "" async sync "sync/async" "per round, rounds 1.."
for spec in "6:requests/s" "8:p99 ms" "9:primary CPU us/request" "10:replica CPU us/request" "12:others' CPU %"; do
	col=${spec%%:*} name=${spec#*:}
	if ((col == 12)); then # a load figure: the ratio means nothing
		pr "$name" "$(med "$col" async 16 "$CLIENTS")" "$(med "$col" sync 16 "$CLIENTS")" "" ""
		continue
	fi
	pr "$name" "$(med "$col" async 16 "$CLIENTS")" "$(med "$col" sync 16 "$CLIENTS")" \
		"$(medratio "$col" 16 "$CLIENTS")" "$(ratios "$col" 16 "$CLIENTS")"
done
rps_r=$(medratio 6 16 "$CLIENTS") p99_r=$(medratio 8 16 "$CLIENTS") cpu_r=$(medratio 9 16 "$CLIENTS")
awk -v a="$rps_r" -v b="$p99_r" -v c="$cpu_r" 'BEGIN {
	printf "aims (issue 28): throughput >= 0.8x: %s (%.2f); p99 <= 2x: %s (%.2f); primary CPU/request <= 1.2x: %s (%.2f)\n",
		(a >= 0.8 ? "met" : "MISSED"), a, (b <= 2 ? "met" : "MISSED"), b, (c <= 1.2 ? "met" : "MISSED"), c }'
quiet=$(QUIETONLY=1 ratios 6 16 "$CLIENTS" | wc -w)
if ((quiet)); then
	echo "the $quiet round(s) where other processes used < $QUIET% of a CPU during both runs: sync/async requests/s" \
		"$(QUIETONLY=1 ratios 6 16 "$CLIENTS")(median $(QUIETONLY=1 medratio 6 16 "$CLIENTS")), p99 $(QUIETONLY=1 medratio 8 16 "$CLIENTS")," \
		"primary CPU/request $(QUIETONLY=1 medratio 9 16 "$CLIENTS")"
else
	echo "no round where other processes used < $QUIET% of a CPU during both runs"
fi
for w in $P1; do
	c=${w%%:*}
	echo
	echo "-P 1, -c $c, ${w##*:} requests: the latency sync adds"
	pr "" async sync "sync-async" ""
	for spec in "7:p50 ms" "8:p99 ms" "6:requests/s" "9:primary CPU us/request"; do
		col=${spec%%:*} name=${spec#*:}
		a=$(med "$col" async 1 "$c") s=$(med "$col" sync 1 "$c")
		pr "$name" "$a" "$s" "$(awk -v a="$a" -v s="$s" -v col="$col" 'BEGIN {printf (col == 6 ? "%+.0f" : "%+.3f"), s - a}')" "ratio $(medratio "$col" 1 "$c")"
	done
done
errs=$(awk -F, 'NR > 1 {e += $14} END {print e + 0}' "$results")
echo
echo "error replies from the primary over all runs: $errs$( ((supported)) && echo ", sync_refused: $(field "$pport" replication sync_refused)")"
echo "load: loadavg $(cut -d' ' -f1-3 /proc/loadavg) at the end; others' CPU per run (% of one CPU, of $(($(nproc) * 100))): median $(awk -F, 'NR > 1 {printf "%s ", $12}' "$results" | median), max $(awk -F, 'NR > 1 && $12 > m {m = $12} END {print m + 0}' "$results"); stolen by the hypervisor: $(awk -v t="$((steal1 - steal0))" -v hz="$hz" 'BEGIN {printf "%.2f", t / hz}') s"
echo "raw: $results (and each run's CSV, the server logs) in $tmp"
((errs == 0)) || die "the primary sent $errs error replies"
