#!/usr/bin/env bash
# bench/cluster.sh — what cluster mode costs one node, and a load spread
# over three nodes.
#
# Usage:
#   bench/cluster.sh                  # both parts, 5 rounds x 300000 requests
#   QUICK=1 bench/cluster.sh          # smoke run: 1 round x 30000 requests
#   PARTS=slotcheck bench/cluster.sh  # only part A (PARTS=spread: only part B)
#
# Environment:
#   ROUNDS       rounds (default 5; QUICK=1: 1)
#   REQUESTS     requests per redis-benchmark run, -n (default 300000; QUICK=1: 30000)
#   CLIENTS      connections, -c (default 50)
#   PIPELINE     pipeline depth, -P (default 16)
#   KEYSPACE     random key range, -r (default 100000)
#   PARTS        "slotcheck spread" (default) or either one
#   SPREAD_MODE  part B: "cluster" (default: redis-benchmark --cluster if it works)
#                or "per-node" (one redis-benchmark per node)
#   NOPIN=1      do not pin with taskset
#   CELLSERVER_BIN  use this binary instead of building ./cmd/cellserver
#   RUN_TIMEOUT  seconds after which one redis-benchmark run is abandoned (default 300)
#
# Part A, the slot check's cost: two cellserver processes, one plain and one
# with --cluster-enabled yes and a topology giving it all 16384 slots
# (CELLCLUSTER CONFIG), both on CPU 0, redis-benchmark on CPU 1 (GOMAXPROCS
# is then 1, as in compare.sh). Every round runs
#   redis-benchmark -c 50 -P 16 -r 100000 CL.THROTTLE key:__rand_int__ 15 30 60
# against both, the order alternating between rounds (off-on, on-off, ...)
# so drift does not favour one. It prints each round's ratio on/off and the
# ratio of the medians; the aim is >= 0.97. It also prints each server's
# CPU time per request (/proc/PID/task/*/schedstat), whose ratio off/on is
# what a CPU-bound node would show, and which other processes on the
# machine disturb much less than requests/s.
#
# Part B, a load spread over three nodes: three cluster-mode nodes, each
# owning a third of the slots, and the same load as one node with every
# slot, under the same pinning (servers on CPU 0, redis-benchmark on
# CPU 1). It runs redis-benchmark --cluster (CLUSTER NODES for the masters
# and their slots, "{tag}" in the key replaced by a tag of the node the
# connection serves) and, if that fails, one redis-benchmark per node at the
# same time, each on keys whose hash tag lands on that node. Per node it
# reports its requests/s and the MOVED replies it sent (INFO
# errorstats): with --cluster, its share of the CL.THROTTLE calls (INFO
# commandstats) times redis-benchmark's total; per node, that
# redis-benchmark's figure.
#
# What two CPUs can show: that the load splits by slot (a third per node),
# that a cluster client sends no MOVED once it has the slot map, and what
# three processes sharing one core cost against one. What they cannot show:
# throughput growing with nodes. Every server shares CPU 0, and one
# redis-benchmark thread on CPU 1 is the client ceiling, so the total can
# at best equal the single node's. bench/README.md ("cluster.sh") works out
# on paper how throughput grows with nodes on separate machines.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

if [[ "${QUICK:-0}" == 1 ]]; then
	ROUNDS=${ROUNDS:-1}
	REQUESTS=${REQUESTS:-30000}
fi
ROUNDS=${ROUNDS:-5}
REQUESTS=${REQUESTS:-300000}
CLIENTS=${CLIENTS:-50}
PIPELINE=${PIPELINE:-16}
KEYSPACE=${KEYSPACE:-100000}
PARTS=${PARTS:-"slotcheck spread"}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}

for tool in go redis-benchmark redis-cli timeout awk; do
	command -v "$tool" >/dev/null || { echo "cluster.sh: $tool not found (apt-get install redis-tools)" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cellbench-cluster.XXXXXX")
raw="$tmp/raw"
mkdir -p "$raw"
pids=()
bench_pids=()

cleanup() {
	local pid
	for pid in "${bench_pids[@]}"; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	pids=()
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "cluster.sh: no free port found" >&2
	return 1
}


srv_pin=() cli_pin=() pin_note="not pinned"
if [[ "${NOPIN:-0}" != 1 ]] && command -v taskset >/dev/null && (($(nproc) >= 2)); then
	srv_pin=(taskset -c 0)
	cli_pin=(taskset -c 1)
	pin_note="pinned with taskset: servers on CPU 0, redis-benchmark on CPU 1 (cellserver GOMAXPROCS=1)"
fi

bin=${CELLSERVER_BIN:-}
if [[ -z "$bin" ]]; then
	echo "== building cellserver"
	(cd "$repo" && go build -o "$tmp/cellserver" ./cmd/cellserver)
	bin="$tmp/cellserver"
fi
help=$("$bin" --help 2>&1 || true)
if [[ "$help" != *--cluster-enabled* ]]; then
	echo "cluster.sh: this cellserver build has no --cluster-enabled option (cluster mode not in this build)" >&2
	exit 3
fi

# start NAME PORTVAR ARGS...: a pinned cellserver on 127.0.0.1:$PORTVAR;
# sets spid. If another process took the port meanwhile, it picks another
# one and stores it in PORTVAR.
start() {
	local name=$1
	local -n _port=$2
	shift 2
	for _ in 1 2 3 4 5; do
		"${srv_pin[@]}" "$bin" --addr "127.0.0.1:$_port" "$@" >"$tmp/$name.log" 2>&1 &
		spid=$!
		pids+=("$spid")
		for _ in $(seq 100); do
			kill -0 "$spid" 2>/dev/null || break
			if [[ "$(timeout 2 redis-cli -p "$_port" PING 2>/dev/null)" == PONG ]]; then return 0; fi
			sleep 0.1
		done
		if kill -0 "$spid" 2>/dev/null; then
			echo "cluster.sh: $name on port $_port not ready after 10 s" >&2
			return 1
		fi
		if ! grep -q 'address already in use' "$tmp/$name.log"; then
			echo "cluster.sh: $name on port $_port exited; log:" >&2
			cat "$tmp/$name.log" >&2
			return 1
		fi
		_port=$(free_port)
	done
	echo "cluster.sh: $name: no free port after 5 tries" >&2
	return 1
}

# push PORTS... with RANGES...: the topology in which node i (of PORTS)
# owns RANGES[i] ("start-end"), pushed to every node.
push_topology() {
	local -n _ports=$1 _ranges=$2
	local json="[" i id
	for i in "${!_ports[@]}"; do
		id=$(redis-cli -p "${_ports[$i]}" CLUSTER MYID)
		[[ "$id" =~ ^[0-9a-f]{40}$ ]] || { echo "cluster.sh: CLUSTER MYID on ${_ports[$i]}: $id" >&2; exit 1; }
		((i > 0)) && json+=","
		json+="{\"slot_ranges\":[{\"start\":${_ranges[$i]%-*},\"end\":${_ranges[$i]#*-}}],\"master\":{\"id\":\"$id\",\"ip\":\"127.0.0.1\",\"port\":${_ports[$i]}},\"replicas\":[]}"
	done
	json+="]"
	for i in "${!_ports[@]}"; do
		local r
		r=$(redis-cli -p "${_ports[$i]}" CELLCLUSTER CONFIG "$json")
		[[ "$r" == OK ]] || { echo "cluster.sh: CELLCLUSTER CONFIG on ${_ports[$i]}: $r" >&2; exit 1; }
	done
	echo "$json" >"$tmp/topology-$(IFS=-; echo "${_ports[*]}").json"
}

# stat PORT FIELD: a field of INFO commandstats/errorstats/stats.
info_field() {
	redis-cli -p "$1" INFO "$2" | tr -d '\r' | sed -n "s/^$3://p"
}
# throttle_calls PORT: CL.THROTTLE calls the node served so far.
throttle_calls() {
	local v
	v=$(info_field "$1" commandstats 'cmdstat_cl\.throttle' | sed -n 's/^calls=\([0-9]*\).*/\1/p')
	echo "${v:-0}"
}
moved_replies() {
	local v
	v=$(info_field "$1" errorstats errorstat_MOVED | sed -n 's/^count=\([0-9]*\).*/\1/p')
	echo "${v:-0}"
}

# bench OUT ARGS...: one redis-benchmark run (pinned, with a deadline) into
# OUT (CSV); prints its rps.
bench() {
	local out=$1
	shift
	timeout "$RUN_TIMEOUT" "${cli_pin[@]}" redis-benchmark -h 127.0.0.1 --csv "$@" >"$out" 2>"$out.err" &
	bench_pids=($!)
	if ! wait "${bench_pids[0]}"; then
		bench_pids=()
		return 1
	fi
	bench_pids=()
	awk -F'"' '$2 == "test" { getline; print $4; exit }' "$out"
}


# cpu_ns PID: CPU time the process's threads have used, in ns
# (/proc/PID/task/*/schedstat, first field).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'; }

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
	echo "date:      $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "machine:   $(nproc) CPUs, ${cpu:-unknown CPU}, $(uname -sr)"
	echo "tree:      $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
	echo "versions:  $(go version | cut -d' ' -f3), $(redis-benchmark --version)"
	echo "load:      rounds=$ROUNDS requests=$REQUESTS clients=$CLIENTS pipeline=$PIPELINE keyspace=$KEYSPACE"
	echo "pinning:   $pin_note"
	echo "loadavg:   $(cut -d' ' -f1-3 /proc/loadavg) at start (other processes on the machine add noise)"
	echo "raw:       $tmp"
} | tee "$tmp/header.txt"

throttle=(CL.THROTTLE 'key:__rand_int__' 15 30 60)

if [[ " $PARTS " == *" slotcheck "* ]]; then
	echo
	echo "== part A: the slot check's cost (one node, cluster mode off vs on with every slot)"
	poff=$(free_port)
	pon=$(free_port)
	while [[ "$pon" == "$poff" ]]; do pon=$(free_port); done
	start off poff
	offpid=$spid
	start on pon --cluster-enabled yes --cluster-config-file "$tmp/on-cluster.json"
	onpid=$spid
	onports=("$pon") onranges=("0-16383")
	push_topology onports onranges
	[[ "$(redis-cli -p "$pon" INFO cluster | tr -d '\r' | sed -n 's/^cluster_enabled://p')" == 1 ]] ||
		{ echo "cluster.sh: INFO cluster of the cluster-mode node does not say cluster_enabled:1" >&2; exit 1; }
	a=$(redis-cli -p "$poff" CL.THROTTLE bench:check 15 30 60 | tr '\n' ' ')
	b=$(redis-cli -p "$pon" CL.THROTTLE bench:check 15 30 60 | tr '\n' ' ')
	[[ "$a" == "$b" ]] || { echo "cluster.sh: replies differ: off [$a] on [$b]" >&2; exit 1; }
	offs="" ons="" ratios="" offns="" onns="" nsratios=""
	for round in $(seq "$ROUNDS"); do
		order=(off on)
		((round % 2 == 0)) && order=(on off)
		for which in "${order[@]}"; do
			port=$poff pid=$offpid
			[[ $which == on ]] && port=$pon pid=$onpid
			c0=$(cpu_ns "$pid")
			rps=$(bench "$raw/A-r$round-$which.csv" -p "$port" -c "$CLIENTS" -n "$REQUESTS" -P "$PIPELINE" -r "$KEYSPACE" "${throttle[@]}") ||
				{ echo "cluster.sh: redis-benchmark failed ($which); see $raw/A-r$round-$which.csv.err" >&2; exit 1; }
			ns=$(awk -v a="$c0" -v b="$(cpu_ns "$pid")" -v n="$REQUESTS" 'BEGIN { printf "%.0f", (b - a) / n }')
			printf '  round %d  cluster %-3s %12s rps  %5s ns server CPU/request\n' "$round" "$which" "$rps" "$ns"
			if [[ $which == on ]]; then on_rps=$rps on_ns=$ns; else off_rps=$rps off_ns=$ns; fi
		done
		offs+=" $off_rps" ons+=" $on_rps" offns+=" $off_ns" onns+=" $on_ns"
		ratios+=" $(awk -v a="$on_rps" -v b="$off_rps" 'BEGIN { printf "%.3f", a / b }')"
		nsratios+=" $(awk -v a="$on_ns" -v b="$off_ns" 'BEGIN { printf "%.3f", b / a }')"
	done
	moff=$(median <<<"$offs") mon=$(median <<<"$ons")
	moffns=$(median <<<"$offns") monns=$(median <<<"$onns")
	errs_on=$(info_field "$pon" stats total_error_replies)
	errs_off=$(info_field "$poff" stats total_error_replies)
	{
		echo
		echo "part A: CL.THROTTLE key:rand 15 30 60, -c $CLIENTS -P $PIPELINE -r $KEYSPACE, $ROUNDS interleaved rounds"
		echo "  median rps: cluster off $moff, cluster on (all slots) $mon"
		echo "  ratio of medians on/off: $(awk -v a="$mon" -v b="$moff" 'BEGIN { printf "%.3f", a / b }') (aim >= 0.97)"
		echo "  per-round ratios on/off:$ratios"
		echo "  median server CPU per request: off $moffns ns, on $monns ns; ratio off/on $(awk -v a="$moffns" -v b="$monns" 'BEGIN { printf "%.3f", a / b }')"
		echo "    (the throughput ratio a CPU-bound node would show; per round:$nsratios)"
		echo "  error replies: off ${errs_off:-?}, on ${errs_on:-?}"
	} | tee "$tmp/partA.txt"
	cleanup
fi

if [[ " $PARTS " == *" spread "* ]]; then
	echo
	echo "== part B: the same load on one node with every slot, then spread over three nodes"
	p1=$(free_port)
	start single p1 --cluster-enabled yes --cluster-config-file "$tmp/single-cluster.json"
	sports=("$p1") sranges=("0-16383")
	push_topology sports sranges
	ports=()
	for i in 0 1 2; do
		p=$(free_port)
		while [[ " ${ports[*]} $p1 " == *" $p "* ]]; do p=$(free_port); done
		start "node$i" p --cluster-enabled yes --cluster-config-file "$tmp/node$i-cluster.json"
		ports+=("$p")
	done
	ranges=("0-5460" "5461-10922" "10923-16383")
	push_topology ports ranges

	# Does redis-benchmark --cluster work with cellserver's CLUSTER NODES?
	mode=${SPREAD_MODE:-cluster}
	if [[ $mode == cluster ]]; then
		if ! out=$(timeout 60 "${cli_pin[@]}" redis-benchmark -h 127.0.0.1 -p "${ports[0]}" --cluster --csv -c 6 -n 3000 \
			CL.THROTTLE 'probe:{tag}:__rand_int__' 15 30 60 2>&1) || ! grep -q '^"CL.THROTTLE' <<<"$out"; then
			mode=per-node
			echo "  redis-benchmark --cluster did not work with these nodes; running one redis-benchmark per node:"
			sed 's/^/    /' <<<"$out" | head -10
		fi
	fi
	echo "  mode: $mode"
	# tags[i]: a hash tag whose slot node i owns (for the per-node mode).
	tags=()
	for i in 0 1 2; do
		lo=${ranges[$i]%-*} hi=${ranges[$i]#*-}
		for n in $(seq 0 200); do
			s=$(redis-cli -p "${ports[0]}" CLUSTER KEYSLOT "{n$n}")
			if ((s >= lo && s <= hi)); then tags+=("n$n"); break; fi
		done
	done
	((${#tags[@]} == 3)) || { echo "cluster.sh: no hash tag found for every node" >&2; exit 1; }

	: >"$raw/B.csv"
	for round in $(seq "$ROUNDS"); do
		# One node with every slot.
		rps=$(bench "$raw/B-r$round-single.csv" -p "$p1" -c "$CLIENTS" -n "$REQUESTS" -P "$PIPELINE" -r "$KEYSPACE" "${throttle[@]}") ||
			{ echo "cluster.sh: redis-benchmark failed (single node)" >&2; exit 1; }
		echo "single,$round,$rps" >>"$raw/B.csv"
		printf '  round %d  one node        total %12s rps\n' "$round" "$rps"

		# Three nodes.
		declare -a c0=() m0=() nrps=()
		for i in 0 1 2; do c0[i]=$(throttle_calls "${ports[$i]}"); m0[i]=$(moved_replies "${ports[$i]}"); done
		if [[ $mode == cluster ]]; then
			total=$(bench "$raw/B-r$round-three.csv" -p "${ports[0]}" --cluster -c "$CLIENTS" -n "$REQUESTS" -P "$PIPELINE" \
				-r "$KEYSPACE" CL.THROTTLE 'key:{tag}:__rand_int__' 15 30 60) ||
				{ echo "cluster.sh: redis-benchmark --cluster failed" >&2; exit 1; }
		else
			# One redis-benchmark per node, at once, each with a third of the
			# clients and requests, on keys of that node's hash tag.
			bp=()
			for i in 0 1 2; do
				timeout "$RUN_TIMEOUT" "${cli_pin[@]}" redis-benchmark -h 127.0.0.1 -p "${ports[$i]}" -c $((CLIENTS / 3 + 1)) \
					-n $((REQUESTS / 3)) -P "$PIPELINE" -r "$KEYSPACE" --csv \
					CL.THROTTLE "{${tags[$i]}}:__rand_int__" 15 30 60 >"$raw/B-r$round-node$i.csv" 2>&1 &
				bp+=($!)
			done
			bench_pids=("${bp[@]}")
			for pid in "${bp[@]}"; do wait "$pid" || { echo "cluster.sh: a per-node redis-benchmark failed" >&2; exit 1; }; done
			bench_pids=()
			total=0
			for i in 0 1 2; do
				nrps[i]=$(awk -F'"' '$2 == "test" { getline; print $4; exit }' "$raw/B-r$round-node$i.csv")
				total=$(awk -v a="$total" -v b="${nrps[$i]}" 'BEGIN { printf "%.0f", a + b }')
			done
		fi
		line="  round $round  three nodes "
		calls=() sumcalls=0
		for i in 0 1 2; do
			calls[i]=$(($(throttle_calls "${ports[$i]}") - c0[i]))
			sumcalls=$((sumcalls + calls[i]))
		done
		for i in 0 1 2; do
			moved=$(($(moved_replies "${ports[$i]}") - m0[i]))
			# --cluster: the node's share of the calls times the total.
			[[ $mode == cluster ]] && nrps[i]=$(awk -v t="$total" -v c="${calls[$i]}" -v s="$sumcalls" 'BEGIN { printf "%.0f", t * c / s }')
			echo "node$i,$round,${nrps[$i]},${calls[$i]},$moved" >>"$raw/B.csv"
			line+=" node$i ${nrps[$i]} rps (${calls[$i]} calls, $moved MOVED)"
		done
		echo "three,$round,$total" >>"$raw/B.csv"
		echo "$line  total $total rps"
	done
	{
		echo
		echo "part B: CL.THROTTLE, -c $CLIENTS -P $PIPELINE -r $KEYSPACE, $ROUNDS rounds, mode $mode (medians)"
		echo "  one node, every slot:   $(awk -F, '$1 == "single" {print $3}' "$raw/B.csv" | tr '\n' ' ' | median) rps"
		for i in 0 1 2; do
			echo "  node$i (${ranges[$i]}): $(awk -F, -v n="node$i" '$1 == n {print $3}' "$raw/B.csv" | tr '\n' ' ' | median) rps," \
				"MOVED sent over all rounds: $(awk -F, -v n="node$i" '$1 == n {s += $5} END {print s + 0}' "$raw/B.csv")"
		done
		echo "  three nodes, total:     $(awk -F, '$1 == "three" {print $3}' "$raw/B.csv" | tr '\n' ' ' | median) rps"
		echo "  (with --cluster: total = redis-benchmark's rps, per node = the total times the node's share of the"
		echo "   CL.THROTTLE calls in INFO commandstats; per-node mode: each node's redis-benchmark rps, total = their sum)"
		if ((${#srv_pin[@]} > 0)); then
			echo "  all servers share CPU 0, redis-benchmark runs on CPU 1: this shows the split, not scaling"
		else
			echo "  not pinned: servers and redis-benchmark share $(nproc) CPUs: this shows the split, not scaling"
		fi
	} | tee "$tmp/partB.txt"
fi
echo
echo "loadavg:   $(cut -d' ' -f1-3 /proc/loadavg) at end"
echo "raw results: $tmp"
