#!/usr/bin/env bash
# bench/limiters.sh: throughput of every limiter command over 100k random
# keys next to CL.THROTTLE, and memory per key for each kind.
#
#   bench/limiters.sh              # ROUNDS=3 x REQUESTS=200000 per run, 50 clients, -P 1 and -P 16
#   QUICK=1 bench/limiters.sh      # 1 round of 20000 requests, smaller memory run
#
# Each figure is the median of ROUNDS runs; within a round the commands
# run one after the other (A B C ... A B C ...), so slow phases of a shared
# machine hit every command alike.
#
# It builds ./cmd/cellserver, starts one server per measurement on a free
# 127.0.0.1 port (pinned to CPU 0 when taskset and 2+ CPUs exist, the
# client on CPU 1), runs redis-benchmark (Debian redis-tools), and stops the
# server on exit. Memory: a fresh server per kind, VmRSS before and after
# KEYS distinct keys (bench/loadkeys), divided per key.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${REQUESTS:-200000}
KEYS=${KEYS:-500000}
ROUNDS=${ROUNDS:-3}
if [ -n "${QUICK:-}" ]; then REQUESTS=20000; KEYS=100000; ROUNDS=1; fi
tmp=$(mktemp -d /tmp/cellbench-lim.XXXXXX)
. bench/serverlib.sh # pids, cleanup, srvpin/clipin, freeport, start, stop, median
go build -o "$tmp/cellserver" ./cmd/cellserver
go build -o "$tmp/loadkeys" ./bench/loadkeys

declare -A cmds=(
  [CL.THROTTLE]="CL.THROTTLE k:__rand_int__ 15 30 60"
  [CL.FIXED]="CL.FIXED k:__rand_int__ 30 60"
  [CL.SLIDING]="CL.SLIDING k:__rand_int__ 30 60"
  [CL.SLIDINGLOG]="CL.SLIDINGLOG k:__rand_int__ 30 60"
  [CL.ACQUIRE]="CL.ACQUIRE k:__rand_int__ 30 60 tok"
  [CL.ACQUIRE/36]="CL.ACQUIRE k:__rand_int__ 30 60 f81d4fae-7dec-11d0-a765-00a0c91e6bf6"
  [CL.PEEK]="CL.PEEK k:__rand_int__ 15 30 60"
  [CL.ALL/1]="CL.ALL CL.THROTTLE g:__rand_int__ 15 30 60 1"
  [CL.ALL/2]="CL.ALL CL.THROTTLE g:__rand_int__ 15 30 60 1 CL.FIXED u:__rand_int__ 30 60 1"
)
order=(CL.THROTTLE CL.PEEK CL.FIXED CL.SLIDING CL.SLIDINGLOG CL.ACQUIRE CL.ACQUIRE/36 CL.ALL/1 CL.ALL/2)
declare -A rpsruns p99runs rpsround
for P in 1 16; do
  for r in $(seq "$ROUNDS"); do
    for c in "${order[@]}"; do
      start
      read -r -a argv <<<"${cmds[$c]}"
      out=$("${clipin[@]}" redis-benchmark -p "$port" -c 50 -n "$REQUESTS" -r 100000 -P "$P" --csv "${argv[@]}" 2>/dev/null | tail -1)
      stop
      echo "$r,$P,$c,$out" >>"$tmp/runs.csv"
      rps1=$(echo "$out" | awk -F'","' '{print $2}')
      rpsruns[$c/$P]+=" $rps1"
      rpsround[$c/$P/$r]=$rps1
      p99runs[$c/$P]+=" $(echo "$out" | awk -F'","' '{print $7}')"
    done
  done
done
printf '\nmedians of %d round(s) x %d requests, 50 clients, -r 100000 (CL.ALL/n: n checks per call;\n' "$ROUNDS" "$REQUESTS"
printf ' CL.ACQUIRE: a 3-byte token, packed in the entry; CL.ACQUIRE/36: a 36-byte token, kept in an object)\n'
printf '(vs thr: ratio of the medians; per round: median over rounds of the ratio to CL.THROTTLE in the same round,\n'
printf ' which a slow phase of a shared machine moves less)\n'
printf '%-14s %4s %12s %8s %10s %10s\n' command -P rps "vs thr" "per round" "p99 ms"
for P in 1 16; do
  base=$(echo "${rpsruns[CL.THROTTLE/$P]}" | median)
  for c in "${order[@]}"; do
    rps=$(echo "${rpsruns[$c/$P]}" | median)
    p99=$(echo "${p99runs[$c/$P]}" | median)
    ratios=""
    for r in $(seq "$ROUNDS"); do
      ratios+=" $(awk -v a="${rpsround[$c/$P/$r]}" -v b="${rpsround[CL.THROTTLE/$P/$r]}" 'BEGIN{printf "%.4f", (b > 0 ? a/b : 0)}')"
    done
    printf '%-14s %4s %12.0f %8.2f %10.2f %10s\n' "$c" "$P" "$rps" "$(awk -v a="$rps" -v b="$base" 'BEGIN{print a/b}')" "$(echo "$ratios" | median)" "$p99"
  done
done

printf '\nmemory per key (%d keys, RSS growth / keys)\n' "$KEYS"
declare -A margs=([CL.THROTTLE]="15 1 3600" [CL.FIXED]="30 1h" [CL.SLIDING]="30 1h" [CL.SLIDINGLOG]="30 1h" [CL.ACQUIRE]="30 1h tok"
  [CL.ACQUIRE/36]="30 1h f81d4fae-7dec-11d0-a765-00a0c91e6bf6")
for c in CL.THROTTLE CL.FIXED CL.SLIDING CL.SLIDINGLOG CL.ACQUIRE CL.ACQUIRE/36; do
  start
  before=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
  "$tmp/loadkeys" -addr "127.0.0.1:$port" -n "$KEYS" -cmd "${c%%/*}" -args "${margs[$c]}" >/dev/null
  sleep 2
  after=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
  printf '%-14s %8.1f bytes/key (RSS %d -> %d KiB)\n' "$c" "$(awk -v a="$after" -v b="$before" -v k="$KEYS" 'BEGIN{print (a-b)*1024/k}')" "$before" "$after"
  stop
done
echo "raw logs: $tmp"
