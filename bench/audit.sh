#!/usr/bin/env bash
# bench/audit.sh: what an audit stream costs CL.APPLY (issue #31): the
# throughput of CL.APPLY on three policies alike but for audit: off,
# limited and all, with 10% of the calls refused, side by side in one
# interleaved run on the same server; then the memory of one audit entry.
#
#   bench/audit.sh                # ROUNDS=9 x REQUESTS=500000, 50 clients, -P 16
#   QUICK=1 bench/audit.sh        # 2 rounds of 50000 requests
#   CONTROL=1 bench/audit.sh      # the bench's own bias: lim with audit: off
#
# One server (pinned to CPU 0, redis-benchmark on CPU 1: bench/serverlib.sh)
# loads the policies
#   - {name: <name>, algorithm: fixed, limit: 1000000000, period: 1h, audit: <mode>,
#      overrides: [{match: "*0", limit: 1}]}
# for the names off, lim and all, of audit modes off, limited and all: a
# key ending in 0 (a tenth of the keys) admits one call an hour, the
# others are never refused. Every round runs
#   redis-benchmark -c 50 -P 16 -r 100000 -n REQUESTS CL.APPLY <n>:__rand_int__ <name>
# for the three policies, in an order that rotates from round to round,
# after a warm-up of ten passes over the three, REQUESTS/10 requests each
# (which creates the keys, the three policies' alike over time, and spends
# the tenth's one call). The results are the medians over the rounds of
# the per-round ratios limited/off and all/off of requests/s and of the
# server's CPU time per request (the run time of its threads,
# /proc/PID/task/*/schedstat). The refused fraction is read from INFO
# policies.
#
# The policies differ in their audit mode alone: their names (and so the
# requests and keys) have the same length, and their keys are created
# together. With CONTROL=1, lim audits nothing, and limited/off reads the
# bench's own bias (1.00 if none); docs/performance.md has what an
# earlier form of this bench charged the audit that was not the audit's.
#
# Memory: on a second server, started afresh, N=100000 calls of CL.APPLY on one key
# (13 bytes) with audit: all and audit_maxlen 1000000000 (no trimming);
# bytes per entry = MEMORY USAGE of the audit stream / N, and the growth
# of keyspace_memory (what maxmemory counts) and of used_memory (the live
# Go heap, after MEMORY PURGE's garbage collection) / N.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${REQUESTS:-500000}
ROUNDS=${ROUNDS:-9}
P=${P:-16}
N=${N:-100000}
if [ -n "${QUICK:-}" ]; then REQUESTS=50000; ROUNDS=2; N=20000; fi
cpuns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'; }
tmp=$(mktemp -d /tmp/cellbench-audit.XXXXXX)
. bench/serverlib.sh # pids, cleanup, srvpin/clipin, freeport, start, stop, median
cat >"$tmp/policies.yaml" <<EOF
policies:
  - {name: off, algorithm: fixed, limit: 1000000000, period: 1h, audit: off, overrides: [{match: "*0", limit: 1}]}
  - {name: lim, algorithm: fixed, limit: 1000000000, period: 1h, audit: $([ -n "${CONTROL:-}" ] && echo off || echo limited), overrides: [{match: "*0", limit: 1}]}
  - {name: all, algorithm: fixed, limit: 1000000000, period: 1h, audit: all, overrides: [{match: "*0", limit: 1}]}
  - {name: mem, algorithm: fixed, limit: 1000000000, period: 1h, audit: all, audit_maxlen: 1000000000}
EOF
go build -o "$tmp/cellserver" ./cmd/cellserver
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
start --policies "$tmp/policies.yaml"

run() { # run MODE REQUESTS: prints requests/s and the server's CPU us per request
  local t0 rps
  t0=$(cpuns "$pid")
  rps=$("${clipin[@]}" redis-benchmark -p "$port" -c 50 -n "$2" -r 100000 -P "$P" --csv \
    CL.APPLY "${1:0:1}:__rand_int__" "$1" 2>/dev/null | tail -1 | awk -F'","' '{print $2}')
  echo "$rps $(awk -v d="$(($(cpuns "$pid") - t0))" -v n="$2" 'BEGIN {printf "%.4f", d / 1e3 / n}')"
}
modes=(off lim all)
for w in $(seq 10); do for m in "${modes[@]}"; do run "$m" $((REQUESTS / 10)) >/dev/null; done; done
declare -A rps cpu rat crat
printf '%5s %10s %10s %10s %8s %8s %9s %9s %9s %8s %8s\n' round off limited all lim/off all/off "off us" "lim us" "all us" lim/off all/off
for r in $(seq "$ROUNDS"); do
  s=$((r % 3))
  order=("${modes[@]:$s}" "${modes[@]:0:$s}")
  declare -A got=() us=()
  for m in "${order[@]}"; do
    read -r got[$m] us[$m] <<<"$(run "$m" "$REQUESTS")"
    rps[$m]+=" ${got[$m]}"
    cpu[$m]+=" ${us[$m]}"
  done
  for m in lim all; do
    rat[$m]+=" $(awk -v a="${got[$m]}" -v b="${got[off]}" 'BEGIN {printf "%.3f", a/b}')"
    crat[$m]+=" $(awk -v a="${us[$m]}" -v b="${us[off]}" 'BEGIN {printf "%.3f", (b > 0) ? a/b : 0}')"
  done
  printf '%5s %10s %10s %10s %8s %8s %9s %9s %9s %8s %8s\n' "$r" "${got[off]}" "${got[lim]}" "${got[all]}" \
    "$(echo "${rat[lim]}" | awk '{print $NF}')" "$(echo "${rat[all]}" | awk '{print $NF}')" \
    "${us[off]}" "${us[lim]}" "${us[all]}" \
    "$(echo "${crat[lim]}" | awk '{print $NF}')" "$(echo "${crat[all]}" | awk '{print $NF}')"
done
printf '\n%d rounds x %d requests, 50 clients, -P %s, -r 100000: CL.APPLY <n>:__rand_int__ <off|lim|all>%s\n' "$ROUNDS" "$REQUESTS" "$P" "$([ -n "${CONTROL:-}" ] && echo ' (CONTROL: lim audits nothing)')"
printf 'median requests/s: off %s, limited %s, all %s\n' "$(echo "${rps[off]}" | median)" "$(echo "${rps[lim]}" | median)" "$(echo "${rps[all]}" | median)"
printf 'median per-round ratio of requests/s: limited/off %s, all/off %s\n' "$(echo "${rat[lim]}" | median)" "$(echo "${rat[all]}" | median)"
printf 'median server CPU per request: off %s us, limited %s us, all %s us; ratios limited/off %s, all/off %s\n' \
  "$(echo "${cpu[off]}" | median)" "$(echo "${cpu[lim]}" | median)" "$(echo "${cpu[all]}" | median)" \
  "$(echo "${crat[lim]}" | median)" "$(echo "${crat[all]}" | median)"
redis-cli -p "$port" INFO policies | grep -E '^policy_(audit_)?(off|lim|all):' | tr -d '\r' | sed 's/^/  /'
redis-cli -p "$port" INFO policies | tr -d '\r' | awk -F'[:,=]' '$1 == "policy_lim" {printf "refused fraction (policy lim): %.3f\n", $5 / ($3 + $5)}'
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"

# Memory per entry, on a fresh server.
stop
start --policies "$tmp/policies.yaml"
# used FIELD: an INFO memory field after a garbage collection (MEMORY
# PURGE), so that used_memory is the live heap
used() { redis-cli -p "$port" MEMORY PURGE >/dev/null; redis-cli -p "$port" INFO memory | tr -d '\r' | awk -F: -v f="$1" '$1 == f {print $2}'; }
u0=$(used used_memory) k0=$(used keyspace_memory)
key=mem:key:00000
echo "memory: redis-benchmark -c 50 -n $N -P $P CL.APPLY $key mem"
"${clipin[@]}" redis-benchmark -p "$port" -c 50 -n "$N" -P "$P" CL.APPLY "$key" mem >/dev/null 2>&1
u1=$(used used_memory) k1=$(used keyspace_memory)
mu=$(redis-cli -p "$port" MEMORY USAGE audit:mem)
appended=$(redis-cli -p "$port" INFO policies | tr -d '\r' | awk -F'[:,=]' '$1 == "policy_audit_mem" {print $6}')
printf '%d entries (key field %d bytes, client field an address 127.0.0.1:port, 15 bytes)\n' "$appended" "${#key}"
printf 'MEMORY USAGE audit:mem = %d bytes: %.1f bytes per entry\n' "$mu" "$(awk -v a="$mu" -v n="$appended" 'BEGIN {print a/n}')"
printf 'keyspace_memory (what maxmemory counts) grew by %d bytes: %.1f bytes per entry\n' "$((k1 - k0))" "$(awk -v a="$((k1 - k0))" -v n="$appended" 'BEGIN {print a/n}')"
printf 'used_memory (the live Go heap after MEMORY PURGE) grew by %d bytes: %.1f bytes per entry\n' "$((u1 - u0))" "$(awk -v a="$((u1 - u0))" -v n="$appended" 'BEGIN {print a/n}')"
