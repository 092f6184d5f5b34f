#!/usr/bin/env bash
# bench/expiry.sh — idle keys expire and their memory is given back for
# reuse: on one cellserver, on 127.0.0.1,
#
#   1. KEYS distinct CL.THROTTLE keys with a TTL of about 8 s
#      (CL.THROTTLE <key> 4 1 8: one request per 8 s), then VmRSS;
#   2. wait (at most WAIT seconds) until DBSIZE is 0: the active expiry
#      removes them, nobody reads them again;
#   3. KEYS other keys (another prefix) with a TTL of an hour, then VmRSS.
#
# After each load it runs MEMORY PURGE (a collection, then the heap's
# free pages back to the system) so that RSS shows what is kept, not the
# garbage collector's headroom (GOGC=100 lets the heap reach twice the live
# data between collections, whatever the timing of a run). Expired keys'
# memory is reusable if RSS falls back near where it started once they are
# gone, and the second load ends where the first one did.
#
# Usage: bench/expiry.sh   (KEYS=1000000, WAIT=120)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
KEYS=${KEYS:-1000000}
WAIT=${WAIT:-120}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cellexp.XXXXXX")
pid=
cleanup() { [[ -n "$pid" ]] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

(cd "$repo" && go build -o "$tmp/cellserver" ./cmd/cellserver && go build -o "$tmp/loadkeys" ./bench/loadkeys)
port=$((20000 + RANDOM % 30000))
"$tmp/cellserver" --addr "127.0.0.1:$port" >"$tmp/cellserver.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [[ "$(redis-cli -p "$port" PING 2>/dev/null)" == PONG ]] && break; sleep 0.1; done

rss() { awk '$1 == "VmRSS:" {print $2}' "/proc/$pid/status"; }
purged_rss() { redis-cli -p "$port" MEMORY PURGE >/dev/null; rss; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }

rss0=$(purged_rss)
"$tmp/loadkeys" -addr "127.0.0.1:$port" -n "$KEYS" -prefix "exp:a:" -args "4 1 8" >"$tmp/load1.log"
raw1=$(rss)
rss1=$(purged_rss)
echo "loaded $KEYS keys with a ~8 s TTL: RSS $(mib "$rss0") -> $(mib "$raw1"), $(mib "$rss1") after MEMORY PURGE"

start=$(date +%s)
while :; do
	n=$(redis-cli -p "$port" DBSIZE)
	[[ "$n" == 0 ]] && break
	if (($(date +%s) - start > WAIT)); then
		echo "expiry.sh: $n keys still there after $WAIT s" >&2
		exit 1
	fi
	sleep 1
done
rss2=$(purged_rss)
echo "all expired after $(($(date +%s) - start)) s (DBSIZE 0, expired_keys $(redis-cli -p "$port" INFO stats | tr -d '\r' | sed -n 's/^expired_keys://p')): RSS $(mib "$rss2")"

"$tmp/loadkeys" -addr "127.0.0.1:$port" -n "$KEYS" -prefix "exp:b:" -args "15 1 3600" >"$tmp/load2.log"
raw3=$(rss)
rss3=$(purged_rss)
echo "loaded $KEYS other keys with a 1 h TTL: RSS $(mib "$raw3"), $(mib "$rss3") after MEMORY PURGE"
awk -v a="$rss0" -v b="$rss1" -v c="$rss2" -v d="$rss3" -v k="$KEYS" 'BEGIN {
	printf "the keys took %.1f MiB (%.1f B/key); %.1f MiB of it stayed after they expired; the second load ended at %.0f %% of the first one\n",
		(b - a) / 1024, (b - a) * 1024 / k, (c - a) / 1024, 100 * d / b }'
