#!/usr/bin/env bash
# bench/revs.sh: CL.THROTTLE (and PING, SET) throughput of cellserver built
# from two git revisions, side by side in one interleaved run: for a
# change that must not cost speed (a refactoring), before against after.
#
#   bench/revs.sh BEFORE [AFTER]     # AFTER defaults to the work tree
#   QUICK=1 bench/revs.sh HEAD~3     # 1 round of 20000 requests
#   ROUNDS=5 REQUESTS=500000 bench/revs.sh v1.2.0 HEAD
#
# Each revision is built from a clean export (git archive) into a temp
# dir. Every round runs each workload and pipeline depth on a fresh
# server of each build in turn (A B A B ...), pinned to CPU 0 with
# redis-benchmark on CPU 1 (bench/serverlib.sh); the figures are the
# medians over the rounds and the median of the per-round ratios
# after/before, which a slow phase of a shared machine moves less.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,15p "$0"; exit 2; }
REQUESTS=${REQUESTS:-200000}
ROUNDS=${ROUNDS:-3}
if [ -n "${QUICK:-}" ]; then REQUESTS=20000; ROUNDS=1; fi
root=$(mktemp -d /tmp/cellbench-revs.XXXXXX)
tmp=$root
. bench/serverlib.sh # pids, cleanup, srvpin/clipin, freeport, start, stop, median

build() { # build REV|"" DIR: "" is the work tree
  mkdir -p "$2"
  if [ -z "$1" ]; then
    go build -o "$2/cellserver" ./cmd/cellserver
  else
    mkdir -p "$2/src"
    git archive "$1" | tar -x -C "$2/src"
    (cd "$2/src" && go build -o "$2/cellserver" ./cmd/cellserver)
  fi
}
build "$1" "$root/before"
build "${2:-}" "$root/after"
echo "before: $1 ($(git rev-parse --short "$1"))   after: ${2:-work tree}"

declare -A cmds=(
  [ping]="PING"
  [set-rand]="SET k:__rand_int__ x"
  [throttle-rand]="CL.THROTTLE k:__rand_int__ 15 30 60"
  [throttle-hot]="CL.THROTTLE hot 15 30 60"
)
order=(ping set-rand throttle-rand throttle-hot)
declare -A rps ratios
for r in $(seq "$ROUNDS"); do
  for P in 1 16; do
    for w in "${order[@]}"; do
      read -r -a argv <<<"${cmds[$w]}"
      declare -A got=()
      for side in before after; do
        tmp=$root/$side
        start
        out=$("${clipin[@]}" redis-benchmark -p "$port" -c 50 -n "$REQUESTS" -r 100000 -P "$P" --csv "${argv[@]}" 2>/dev/null | tail -1)
        stop
        got[$side]=$(echo "$out" | awk -F'","' '{print $2}')
        rps[$w/$P/$side]+=" ${got[$side]}"
      done
      ratios[$w/$P]+=" $(awk -v a="${got[after]}" -v b="${got[before]}" 'BEGIN {printf "%.3f", a/b}')"
    done
  done
done
printf '\nmedians of %d round(s) x %d requests, 50 clients, -r 100000\n' "$ROUNDS" "$REQUESTS"
printf '%-14s %4s %12s %12s %14s\n' workload -P before after after/before
for P in 1 16; do
  for w in "${order[@]}"; do
    printf '%-14s %4s %12s %12s %14s\n' "$w" "$P" "$(echo "${rps[$w/$P/before]}" | median)" \
      "$(echo "${rps[$w/$P/after]}" | median)" "$(echo "${ratios[$w/$P]}" | median)"
  done
done
