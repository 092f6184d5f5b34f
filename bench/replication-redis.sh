#!/usr/bin/env bash
# bench/replication-redis.sh — the reference for bench/replication.sh: what
# two replicas cost a real Redis (Debian redis-server) on this machine, with
# the same placement (primaries on CPU 0, the replicas and redis-benchmark
# on CPU 1): SET over 100000 random keys, -P 16 -c 50, 2000000 requests,
# three interleaved rounds of a primary with two replicas and one without.
# Ports 7701-7704 on 127.0.0.1 must be free. Usage: bench/replication-redis.sh
set -euo pipefail
for p in 7701 7704; do taskset -c 0 redis-server --port $p --save "" --appendonly no --daemonize yes --pidfile /tmp/r$p.pid --dir /tmp >/dev/null; done
for p in 7702 7703; do taskset -c 1 redis-server --port $p --save "" --appendonly no --daemonize yes --replicaof 127.0.0.1 7701 --pidfile /tmp/r$p.pid --dir /tmp >/dev/null; done
sleep 2
for round in 1 2 3; do for p in 7701 7704; do echo "round $round port $p ($( [ $p = 7701 ] && echo 2 replicas || echo none)): $(taskset -c 1 redis-benchmark -p $p -n 2000000 -c 50 -P 16 -r 100000 -t set --csv 2>&1 | tail -1)"; done; done
for p in 7701 7702 7703 7704; do kill $(cat /tmp/r$p.pid); done
