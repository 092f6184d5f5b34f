#!/usr/bin/env bash
# bench/acl.sh: CL.THROTTLE throughput of an ACL user (confined to a key
# prefix, +@rate_limit) against the default user, side by side in one
# interleaved run on the same server: what the permission check costs.
#
#   bench/acl.sh                  # ROUNDS=7 x REQUESTS=300000, 50 clients, -P 16
#   QUICK=1 bench/acl.sh          # 2 rounds of 30000 requests
#   REFERENCE=redis bench/acl.sh  # the same run on redis-server with SET
#                                 # (Redis has no CL.THROTTLE): what ACL costs Redis
#
# One server (pinned to CPU 0, redis-benchmark on CPU 1: bench/serverlib.sh)
# holds the user
#   tenant: on >pw ~t:* &t:* +@rate_limit +@read +@write +@connection -@dangerous
# (the rules tests/acl gives each tenant). Every round runs, on that server,
#   redis-benchmark -c 50 -P 16 -r 100000 -n REQUESTS CL.THROTTLE d:__rand_int__ 15 30 60
# as the default user and the same with --user tenant on t:__rand_int__
# (keys of the same length, 100k of each), in the order default, tenant in
# odd rounds and tenant, default in even ones, after one warm-up run of
# each that creates the keys. The result is the median over the rounds of
# the per-round ratio tenant/default (a slow phase of a shared machine
# moves it less than the ratio of the medians, printed too).
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${REQUESTS:-300000}
ROUNDS=${ROUNDS:-7}
P=${P:-16}
if [ -n "${QUICK:-}" ]; then REQUESTS=30000; ROUNDS=2; fi
tmp=$(mktemp -d /tmp/cellbench-acl.XXXXXX)
. bench/serverlib.sh # pids, cleanup, srvpin/clipin, freeport, start, stop, median
rules=(on '>pw' '~t:*' '&t:*' +@rate_limit +@read +@write +@connection -@dangerous)
if [ "${REFERENCE:-}" = redis ]; then
  port=$(freeport)
  "${srvpin[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
  pids+=($!); pid=$!
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  rules=(on '>pw' '~t:*' '&t:*' +@read +@write +@connection -@dangerous) # no @rate_limit in Redis
  workload=(SET __P__:__rand_int__ x)
  echo "reference: redis-server $(redis-server --version | awk '{print $3}'), SET"
else
  go build -o "$tmp/cellserver" ./cmd/cellserver
  start
  workload=(CL.THROTTLE __P__:__rand_int__ 15 30 60)
fi
redis-cli -p "$port" ACL SETUSER tenant reset "${rules[@]}" >/dev/null
redis-cli -p "$port" --user tenant --pass pw --no-auth-warning "${workload[@]/__P__/t}" | grep -qv NOPERM ||
  { echo "the tenant is refused ${workload[*]}" >&2; exit 1; }

run() { # run default|tenant REQUESTS: prints requests/s
  local auth=() prefix=d
  if [ "$1" = tenant ]; then auth=(--user tenant -a pw); prefix=t; fi
  "${clipin[@]}" redis-benchmark -p "$port" "${auth[@]}" -c 50 -n "$2" -r 100000 -P "$P" --csv \
    "${workload[@]/__P__/$prefix}" 2>/dev/null | tail -1 | awk -F'","' '{print $2}'
}
run default "$REQUESTS" >/dev/null
run tenant "$REQUESTS" >/dev/null
declare -A rps
ratios=""
printf '%5s %12s %12s %8s\n' round default tenant ratio
for r in $(seq "$ROUNDS"); do
  order=(default tenant)
  if [ $((r % 2)) -eq 0 ]; then order=(tenant default); fi
  declare -A got=()
  for side in "${order[@]}"; do
    got[$side]=$(run "$side" "$REQUESTS")
    rps[$side]+=" ${got[$side]}"
  done
  ratio=$(awk -v a="${got[tenant]}" -v b="${got[default]}" 'BEGIN {printf "%.3f", a/b}')
  ratios+=" $ratio"
  printf '%5s %12s %12s %8s\n' "$r" "${got[default]}" "${got[tenant]}" "$ratio"
done
md=$(echo "${rps[default]}" | median)
mt=$(echo "${rps[tenant]}" | median)
printf '\n%d rounds x %d requests, 50 clients, -P %s, -r 100000: %s\n' "$ROUNDS" "$REQUESTS" "$P" "${workload[*]/__P__/<d|t>}"
printf 'median requests/s: default %s, tenant %s (ratio of the medians %.3f)\n' "$md" "$mt" "$(awk -v a="$mt" -v b="$md" 'BEGIN {print a/b}')"
printf 'median per-round ratio tenant/default: %s\n' "$(echo "$ratios" | median)"
n=$(redis-cli -p "$port" ACL LOG | grep -c '^reason$' || true)
echo "ACL LOG entries after the run: $n (the tenant's refused CONFIG GET of redis-benchmark's start, at most)"
