#!/usr/bin/env bash
# scripts/cluster-reconfig.sh — Redis Sentinel client-reconfig-script for a
# cellserver cluster in which every shard is a primary and its replicas
# (REPLICAOF), each shard monitored by Sentinel as its own master name.
#
# Sentinel runs it on every sentinel after each failover (leader first, as
# soon as the promoted replica reports role:master; then each observer at
# its +switch-master):
#
#   cluster-reconfig.sh <master-name> <role> <state> <from-ip> <from-port> <to-ip> <to-port>
#
# and an operator may run it by hand (after restarting a node whose cluster
# config file is stale, or to check what would be pushed):
#
#   cluster-reconfig.sh --sync [<ip> <port>]
#
# What it does, every time, from scratch (so it is idempotent and any run
# repairs what an earlier one missed):
#
#  1. Reads the cluster's layout (slot ranges, and each shard's nodes with
#     their ids and addresses) from CLUSTER NODES on the first node that
#     answers: the promoted node <to-ip>:<to-port> (alive by definition),
#     then CELLSERVER_SEEDS, then <from-ip>:<from-port>. A failover changes
#     who is master in a shard, never the slots or the nodes.
#  2. Asks its sentinel (CELLSERVER_SENTINEL) for the address of every
#     master it monitors (SENTINEL MASTERS). In each shard, the node at one
#     of these addresses is the shard's master. The shard holding
#     <to-ip>:<to-port> gets that node as master whatever the sentinel says
#     (the leader runs the script before its own +switch-master). A shard
#     with no node among the sentinel's masters keeps its current master.
#     Every other node of a shard is listed as its replica.
#  3. Pushes the resulting topology (Dragonfly DFLYCLUSTER CONFIG JSON)
#     with CELLCLUSTER CONFIG to every node it lists, masters and replicas.
#     A node that does not accept connections (the dead primary) is
#     skipped: push to it again with --sync once it is back.
#
# Because the masters come from Sentinel rather than from the topology a
# node holds, two shards failing over at the same time cannot undo each
# other: whichever run pushes last computed both switches. Runs on one host
# are serialized with flock(1) when it is installed.
#
# Exit status (what Sentinel does with it): 0 every node that answered took
# the topology; 1 no node answered, or a node that answered failed (Sentinel
# retries, up to 10 times, after 30 s, 60 s, ...); 2 bad arguments, or a
# node rejected the topology as invalid (no retry: Sentinel logs
# -script-error).
#
# Environment (Sentinel passes its own environment to the script):
#   CELLSERVER_SENTINEL        host:port of this sentinel (default 127.0.0.1:26379)
#   CELLSERVER_SENTINEL_AUTH   its password, if it has one
#   CELLSERVER_SEEDS           space-separated host:port of cluster nodes to read
#                              the layout from if the promoted node does not answer
#   REDISCLI_AUTH              the cellserver nodes' password (redis-cli reads it)
#   CELLSERVER_RECONFIG_LOG    append one line per run and per node to this file
#                              (default: standard error only)
#   CELLSERVER_RECONFIG_DRYRUN=1  print the topology JSON, push nothing
#   CELLSERVER_RECONFIG_TIMEOUT   seconds per redis-cli call (default 5)
#
# Needs bash, redis-cli (redis-tools), awk and timeout (coreutils).
set -uo pipefail

sentinel=${CELLSERVER_SENTINEL:-127.0.0.1:26379}
call_timeout=${CELLSERVER_RECONFIG_TIMEOUT:-5}
me="cluster-reconfig[$$]"

log() {
	local line
	line="$(date -u '+%Y-%m-%dT%H:%M:%SZ') $me: $*"
	echo "$line" >&2
	if [[ -n "${CELLSERVER_RECONFIG_LOG:-}" ]]; then
		echo "$line" >>"$CELLSERVER_RECONFIG_LOG" 2>/dev/null || true
	fi
}

usage() {
	echo "usage: $0 <master-name> <role> <state> <from-ip> <from-port> <to-ip> <to-port>" >&2
	echo "       $0 --sync [<ip> <port>]" >&2
	exit 2
}

# split_addr HOST:PORT -> "HOST PORT" (the port is after the last colon).
split_addr() { echo "${1%:*} ${1##*:}"; }

# cli HOST PORT ARGS...: one redis-cli call with a deadline, raw output.
cli() {
	local h=$1 p=$2
	shift 2
	timeout "$call_timeout" redis-cli --raw -h "$h" -p "$p" "$@"
}

master_name= role= to_addr= from_addr= read_from= mode=failover
if [[ "${1:-}" == --sync ]]; then
	mode=sync
	if [[ $# -eq 3 ]]; then
		read_from="$2:$3"
	elif [[ $# -ne 1 ]]; then
		usage
	fi
else
	[[ $# -eq 7 ]] || usage
	master_name=$1
	role=$2
	from_addr="$4:$5"
	to_addr="$6:$7"
	[[ "$5" =~ ^[0-9]+$ && "$7" =~ ^[0-9]+$ ]] || usage
fi

for tool in redis-cli awk timeout; do
	command -v "$tool" >/dev/null || { log "$tool not found"; exit 2; }
done

# One run at a time on this host: a later run reads a newer Sentinel view.
lock="${TMPDIR:-/tmp}/cellserver-cluster-reconfig.lock"
if command -v flock >/dev/null && { exec 9>>"$lock"; } 2>/dev/null; then
	flock -w 30 9 || log "lock not taken after 30 s; going on"
fi

log "start: mode=$mode master-name=${master_name:--} role=${role:--} from=${from_addr:--} to=${to_addr:--} sentinel=$sentinel"

# 1. The layout, from CLUSTER NODES of the first node that answers.
nodes_txt= layout_from=
for a in $to_addr $read_from ${CELLSERVER_SEEDS:-} $from_addr; do
	read -r h p <<<"$(split_addr "$a")"
	if out=$(cli "$h" "$p" CLUSTER NODES 2>/dev/null) && [[ "$out" == *" connected"* ]]; then
		nodes_txt=$out layout_from=$a
		break
	fi
done
if [[ -z "$nodes_txt" ]]; then
	log "no cluster node answered CLUSTER NODES (tried: $to_addr $read_from ${CELLSERVER_SEEDS:-} $from_addr)"
	exit 1
fi

# 2. The masters this sentinel monitors (SENTINEL MASTERS: per master a flat
# list of field, value lines; keep ip:port).
read -r sh sp <<<"$(split_addr "$sentinel")"
sentinel_cli() {
	if [[ -n "${CELLSERVER_SENTINEL_AUTH:-}" ]]; then
		REDISCLI_AUTH=$CELLSERVER_SENTINEL_AUTH cli "$@"
	else
		(unset REDISCLI_AUTH && cli "$@")
	fi
}
if masters_txt=$(sentinel_cli "$sh" "$sp" SENTINEL MASTERS 2>/dev/null) &&
	[[ -z "$masters_txt" || "$masters_txt" == name$'\n'* ]]; then
	sentinel_masters=$(awk 'NR % 2 == 1 { k = $0; next } k == "ip" { ip = $0 } k == "port" { print ip ":" $0 }' <<<"$masters_txt" | tr '\n' ' ')
else
	log "sentinel $sentinel did not answer SENTINEL MASTERS (${masters_txt//$'\n'/ }); using the cluster's masters"
	sentinel_masters=
fi

# 3. The new topology. CLUSTER NODES lines:
#   <id> <ip:port@cport[,hostname]> <flags> <master-id|-> <ping> <pong> <epoch> <link> [<slot ranges>...]
topology=$(awk -v to="$to_addr" -v smasters="$sentinel_masters" '
function addr_of(f,   a) { a = f; sub(/@.*/, "", a); return a }
function ipof(a) { return substr(a, 1, match(a, /:[0-9]+$/) - 1) }
function portof(a) { return substr(a, match(a, /:[0-9]+$/) + 1) }
function jstr(v) { gsub(/\\/, "\\\\", v); gsub(/"/, "\\\"", v); return v }
function node_json(i) { return sprintf("{\"id\":\"%s\",\"ip\":\"%s\",\"port\":%d}", jstr(id[i]), jstr(ipof(addr[i])), portof(addr[i])) }
BEGIN { n = split(smasters, sm, " "); for (i = 1; i <= n; i++) is_sm[sm[i]] = 1 }
NF >= 8 && $2 ~ /:[0-9]+@/ && $8 == "connected" {
	k++
	id[k] = $1; addr[k] = addr_of($2); master_of[k] = $4
	if ($3 ~ /(^|,)master(,|$)/) {
		s = ++nshards; shard_master[s] = k; shard_of_id[$1] = s; ranges[s] = ""; is_master_line[k] = 1
		for (f = 9; f <= NF; f++) {
			if ($f ~ /^\[/) continue # migration markers: none in cellserver
			r = $f; if (r !~ /-/) r = r "-" r
			split(r, se, "-")
			ranges[s] = ranges[s] (ranges[s] == "" ? "" : ",") sprintf("{\"start\":%d,\"end\":%d}", se[1], se[2])
		}
	}
}
END {
	# Shards keep their nodes in CLUSTER NODES order: the master, then its replicas.
	for (s = 1; s <= nshards; s++) { members[s] = shard_master[s]; cnt[s] = 1 }
	for (i = 1; i <= k; i++) {
		if (i in is_master_line) continue
		s = shard_of_id[master_of[i]]
		if (s == "" || shard_master[s] == i) continue
		members[s] = members[s] " " i; cnt[s]++
	}
	printf "["
	for (s = 1; s <= nshards; s++) {
		split(members[s], m, " ")
		newm = ""
		for (j = 1; j <= cnt[s]; j++) if (addr[m[j]] == to) newm = m[j]
		if (newm == "") for (j = 1; j <= cnt[s]; j++) if (addr[m[j]] in is_sm) { newm = m[j]; break }
		if (newm == "") newm = shard_master[s]
		reps = ""
		for (j = 1; j <= cnt[s]; j++) if (m[j] != newm) reps = reps (reps == "" ? "" : ",") node_json(m[j])
		printf "%s{\"slot_ranges\":[%s],\"master\":%s,\"replicas\":[%s]}", (s > 1 ? "," : ""), ranges[s], node_json(newm), reps
		all = all " " addr[newm]
		for (j = 1; j <= cnt[s]; j++) if (m[j] != newm) all = all " " addr[m[j]]
	}
	printf "]\n%s\n", all
}' <<<"$nodes_txt")
json=$(head -1 <<<"$topology")
targets=$(sed -n 2p <<<"$topology")
if [[ "$json" == "[]" || -z "$targets" ]]; then
	log "CLUSTER NODES of $layout_from lists no shard; nothing to push"
	exit 1
fi
if [[ -n "$to_addr" && " $targets " != *" $to_addr "* && $mode == failover ]]; then
	log "the promoted node $to_addr is not in the cluster $layout_from describes; nothing to push"
	exit 2
fi

if [[ "${CELLSERVER_RECONFIG_DRYRUN:-0}" == 1 ]]; then
	echo "$json"
	exit 0
fi

# 4. Push to every node of the topology.
ok=0 down=0 failed=0 invalid=0
for a in $targets; do
	read -r h p <<<"$(split_addr "$a")"
	reply=$(cli "$h" "$p" CELLCLUSTER CONFIG "$json" 2>&1)
	rc=$?
	if [[ $rc -eq 0 && "$reply" == OK ]]; then
		ok=$((ok + 1))
		log "pushed to $a: OK"
	elif [[ "$reply" == *"Could not connect"* || "$reply" == *"Connection refused"* || $rc -eq 124 ]]; then
		down=$((down + 1))
		log "skipped $a: not answering (${reply//$'\n'/ })"
	elif [[ "$reply" == *"Invalid cluster configuration"* ]]; then
		invalid=$((invalid + 1))
		log "rejected by $a: $reply"
	else
		failed=$((failed + 1))
		log "failed on $a: ${reply//$'\n'/ }"
	fi
done
log "done: $ok took it, $down not answering, $failed failed, $invalid rejected it; topology $json"
if ((invalid > 0)); then exit 2; fi
if ((failed > 0 || ok == 0)); then exit 1; fi
exit 0
