#!/usr/bin/env bash
# Installs the Debian tools the tests and benchmarks use (redis-cli,
# redis-benchmark, redis-server; tmux for the redis-cli hint test) when they
# are missing. Without root or sudo
# it only says what is missing: the redis-cli tests then skip themselves.
set -eu
if command -v redis-cli >/dev/null 2>&1 && command -v redis-server >/dev/null 2>&1 && command -v tmux >/dev/null 2>&1 && /usr/bin/python3 -c "import redis" 2>/dev/null; then
  exit 0
fi
if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else SUDO=none; fi
if [ "$SUDO" = none ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: redis-tools not installed and cannot install it here; redis-cli tests will be skipped" >&2
  exit 0
fi
echo "installing redis-tools, redis-server and tmux (Debian packages)..." >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-tools redis-server tmux python3-redis >/dev/null
