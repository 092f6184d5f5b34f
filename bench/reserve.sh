#!/usr/bin/env bash
# bench/reserve.sh: CL.RESERVE + CL.SETTLE pairs next to the two-CL.THROTTLE
# reserve-and-refund idiom, over the network (bench/reservepairs, go-redis).
#
#   bench/reserve.sh               # ROUNDS=3 x PAIRS=100000, 50 clients, 100000 random keys
#   QUICK=1 bench/reserve.sh       # 1 round of 20000 pairs
#   KEYS=1000 TTL=1s bench/reserve.sh
#
# One pair: CL.RESERVE k THROTTLE 15 30 60 10 $TTL then CL.SETTLE k id 4,
# or CL.THROTTLE k 15 30 60 10 then CL.THROTTLE k 15 30 60 -6; the second
# command only when the first admitted. Within a round the two run one
# after the other on a fresh server each (reserve throttle reserve ...),
# so slow phases of a shared machine hit both alike; each figure is the
# median over rounds. Settled reservations stay in their key until their
# ttl ends, or until the key holds 10000 and needs room.
#
# It builds ./cmd/cellserver and bench/reservepairs, starts each server on
# a free 127.0.0.1 port (pinned to CPU 0 when taskset and 2+ CPUs exist,
# the client on CPU 1) and stops it on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${PAIRS:-100000}
KEYS=${KEYS:-100000}
ROUNDS=${ROUNDS:-3}
TTL=${TTL:-30s}
if [ -n "${QUICK:-}" ]; then PAIRS=20000; ROUNDS=1; fi
tmp=$(mktemp -d /tmp/cellbench-res.XXXXXX)
. bench/serverlib.sh # pids, cleanup, srvpin/clipin, freeport, start, stop, median
go build -o "$tmp/cellserver" ./cmd/cellserver
go build -o "$tmp/reservepairs" ./bench/reservepairs
field() { tr ' ' '\n' | awk -F= -v k="$1" '$1 == k {print $2}'; }

declare -A pps p50 p99
for r in $(seq "$ROUNDS"); do
  for m in reserve throttle; do
    start
    out=$("${clipin[@]}" "$tmp/reservepairs" -addr "127.0.0.1:$port" -mode "$m" -pairs "$PAIRS" -keys "$KEYS" -ttl "$TTL")
    stop
    echo "round $r: $out" | tee -a "$tmp/runs.txt"
    pps[$m]+=" $(echo "$out" | field pairs_per_s)"
    p50[$m]+=" $(echo "$out" | field p50_us)"
    p99[$m]+=" $(echo "$out" | field p99_us)"
  done
done
printf '\nmedians of %d round(s) x %d pairs, 50 clients, %d keys, ttl %s\n' "$ROUNDS" "$PAIRS" "$KEYS" "$TTL"
printf '%-9s %10s %8s %8s %10s\n' pair "pairs/s" "p50 us" "p99 us" "vs thr"
base=$(echo "${pps[throttle]}" | median)
for m in reserve throttle; do
  v=$(echo "${pps[$m]}" | median)
  printf '%-9s %10.0f %8s %8s %10.2f\n' "$m" "$v" "$(echo "${p50[$m]}" | median)" "$(echo "${p99[$m]}" | median)" "$(awk -v a="$v" -v b="$base" 'BEGIN{print a/b}')"
done
echo "raw logs: $tmp"
