#!/usr/bin/env bash
# bench/acl.sh: CL.THROTTLE throughput of an ACL user (confined to a key
# prefix, +@rate_limit) against the default user, side by side in one
# interleaved run on the same server: what the permission check costs.
#
#   bench/acl.sh                  # ROUNDS=15 x REQUESTS=500000, 50 clients, -P 16
#   QUICK=1 bench/acl.sh          # 2 rounds of 50000 requests
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
# each that creates the keys. The results are the medians over the rounds
# of the per-round ratios tenant/default of requests/s and of the server's
# CPU time per request (the run time of its threads, /proc/PID/task/*/
# schedstat; a machine shared with other work moves the CPU per request
# much less than the requests/s, since time the server waits for a CPU is
# not counted).
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${REQUESTS:-500000}
ROUNDS=${ROUNDS:-15}
P=${P:-16}
if [ -n "${QUICK:-}" ]; then REQUESTS=50000; ROUNDS=2; fi
# cpuns PID: the nanoseconds the process's threads have run on a CPU
# (/proc/PID/task/*/schedstat, exact; a thread that exited is no longer
# counted, and neither server ends threads under a steady load)
cpuns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'; }
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

run() { # run default|tenant REQUESTS: prints requests/s and the server's CPU us per request
  local auth=() prefix=d t0 rps
  if [ "$1" = tenant ]; then auth=(--user tenant -a pw); prefix=t; fi
  t0=$(cpuns "$pid")
  rps=$("${clipin[@]}" redis-benchmark -p "$port" "${auth[@]}" -c 50 -n "$2" -r 100000 -P "$P" --csv \
    "${workload[@]/__P__/$prefix}" 2>/dev/null | tail -1 | awk -F'","' '{print $2}')
  echo "$rps $(awk -v d="$(($(cpuns "$pid") - t0))" -v n="$2" 'BEGIN {printf "%.4f", d / 1e3 / n}')"
}
run default "$REQUESTS" >/dev/null
run tenant "$REQUESTS" >/dev/null
declare -A rps cpu
ratios="" cratios=""
printf '%5s %12s %12s %8s %14s %14s %8s\n' round default tenant ratio "default us/req" "tenant us/req" ratio
for r in $(seq "$ROUNDS"); do
  order=(default tenant)
  if [ $((r % 2)) -eq 0 ]; then order=(tenant default); fi
  declare -A got=() us=()
  for side in "${order[@]}"; do
    read -r got[$side] us[$side] <<<"$(run "$side" "$REQUESTS")"
    rps[$side]+=" ${got[$side]}"
    cpu[$side]+=" ${us[$side]}"
  done
  ratio=$(awk -v a="${got[tenant]}" -v b="${got[default]}" 'BEGIN {printf "%.3f", a/b}')
  cratio=$(awk -v a="${us[tenant]}" -v b="${us[default]}" 'BEGIN {printf "%.3f", (b > 0) ? a/b : 0}')
  ratios+=" $ratio" cratios+=" $cratio"
  printf '%5s %12s %12s %8s %14s %14s %8s\n' "$r" "${got[default]}" "${got[tenant]}" "$ratio" "${us[default]}" "${us[tenant]}" "$cratio"
done
md=$(echo "${rps[default]}" | median)
mt=$(echo "${rps[tenant]}" | median)
printf '\n%d rounds x %d requests, 50 clients, -P %s, -r 100000: %s\n' "$ROUNDS" "$REQUESTS" "$P" "${workload[*]/__P__/<d|t>}"
printf 'median requests/s: default %s, tenant %s (ratio of the medians %.3f)\n' "$md" "$mt" "$(awk -v a="$mt" -v b="$md" 'BEGIN {print a/b}')"
printf 'median per-round ratio tenant/default, requests/s: %s\n' "$(echo "$ratios" | median)"
printf 'median server CPU per request: default %s us, tenant %s us; median per-round ratio tenant/default: %s\n' \
  "$(echo "${cpu[default]}" | median)" "$(echo "${cpu[tenant]}" | median)" "$(echo "$cratios" | median)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
n=$(redis-cli -p "$port" ACL LOG | grep -c '^reason$' || true)
echo "ACL LOG entries after the run: $n (the tenant's refused CONFIG GET of redis-benchmark's start, at most)"
