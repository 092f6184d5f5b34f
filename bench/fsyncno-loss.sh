#!/usr/bin/env bash
# bench/fsyncno-loss.sh — how much acknowledged state `--fsync no` (or
# another policy) loses when the process is killed with SIGKILL.
#
# Usage:
#   bench/fsyncno-loss.sh                   # 20 rounds, one command at a time, then pipelines of 256
#   ROUNDS=50 PIPELINES="1 16 256" bench/fsyncno-loss.sh
#   MODE=everysec bench/fsyncno-loss.sh
#
# Environment:
#   ROUNDS     kill -9 rounds per pipeline depth (default 20)
#   PIPELINES  commands per round trip of each client (default "1 256")
#   MODE       --fsync policy (default no)
#
# Each round (tests/durability/fsyncno_loss_test.go, TestFsyncNoLossWindow)
# starts the cellserver binary on 127.0.0.1:0 with a fresh temp data
# directory, lets 8 clients SET their own counter as fast as they can,
# kills the process with SIGKILL after 0.5-1.5 s, restarts it and reads the
# counters back. Per client: the time between the reply of the last write
# that survived and the reply of its last acknowledged write, and the count
# of acknowledged writes lost. Printed: every round, then median, p90 and
# max over all clients and rounds. Bounded: a round lasts at most ~2 s plus
# two starts; every process is killed when the test ends. Talks only to
# 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-20}
PIPELINES=${PIPELINES:-"1 256"}
MODE=${MODE:-no}
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(go version | cut -d' ' -f3) $(nproc) CPUs; fsync $MODE, $ROUNDS rounds"
for p in $PIPELINES; do
	CELLSERVER_FSYNCNO_LOSS=$ROUNDS CELLSERVER_FSYNCNO_PIPELINE=$p CELLSERVER_FSYNCNO_MODE=$MODE \
		go test -count=1 -timeout 20m -run '^TestFsyncNoLossWindow$' -v ./tests/durability |
		grep -E 'fsyncno_loss_test|^(ok|FAIL)' | sed -E 's/^ +fsyncno_loss_test.go:[0-9]+: //'
done
