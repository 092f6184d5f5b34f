# bench/serverlib.sh: the server handling shared by the bench scripts that
# start cellserver themselves (bench/limiters.sh, bench/reserve.sh). Source
# it after setting tmp (a scratch directory) and before building
# "$tmp/cellserver". It gives:
#   srvpin, clipin   taskset prefixes: server on CPU 0, client on CPU 1
#                    (empty without taskset or with one CPU)
#   freeport         a free 127.0.0.1 port
#   start [ARGS...]  starts "$tmp/cellserver" on a free port with ARGS, pinned
#                    as srvpin says (sets port and pid), and waits until it
#                    answers PING
#   stop             stops the server start started
#   median           the median of the numbers on its input
# Every server started is killed when the script exits.
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
srvpin=(); clipin=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then srvpin=(taskset -c 0); clipin=(taskset -c 1); echo "pinned: server on CPU 0, client on CPU 1"; fi

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
start() {
  port=$(freeport)
  "${srvpin[@]}" "$tmp/cellserver" --addr "127.0.0.1:$port" "$@" 2>"$tmp/server.$port.log" &
  pids+=($!); pid=$!
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server did not start" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
