#!/usr/bin/env bash
# Installs the Debian tools the tests and benchmarks use (redis-cli,
# redis-benchmark, redis-server; redis-sentinel for tests/ha's failovers;
# tmux for the redis-cli hint test;
# prometheus-redis-exporter for tests/compat's exporter scrape, about 10 MB;
# python3-redis for the redis-py tests;
# tcl (tclsh) for tests/redistcl, which runs Redis's own TCL test units;
# prometheus for promtool (tests/monitoring checks monitoring/ with it; about
# 100 MB, its recommends left out and its service not left running);
# chromium for tests/dashboard, which loads the live dashboard in a headless
# browser (about 360 MB installed, its recommends left out);
# seconds to install) when they are missing. Without root or sudo
# it only says what is missing: the redis-cli tests then skip themselves.
set -eu
if command -v redis-cli >/dev/null 2>&1 && command -v redis-server >/dev/null 2>&1 && command -v redis-sentinel >/dev/null 2>&1 &&
  command -v tmux >/dev/null 2>&1 &&
  command -v prometheus-redis-exporter >/dev/null 2>&1 && /usr/bin/python3 -c "import redis" 2>/dev/null &&
  command -v tclsh >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else SUDO=none; fi
if [ "$SUDO" = none ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: cannot install redis-tools, redis-server, redis-sentinel, tmux, prometheus-redis-exporter, python3-redis, tcl, prometheus or chromium here; the tests that need them skip themselves" >&2
  exit 0
fi
echo "installing redis-tools, redis-server, redis-sentinel, tmux, prometheus-redis-exporter, python3-redis and tcl (Debian packages)..." >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-tools redis-server redis-sentinel tmux prometheus-redis-exporter python3-redis tcl >/dev/null
if ! command -v promtool >/dev/null 2>&1; then
  echo "installing prometheus (Debian package, for promtool)..." >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
fi
if ! command -v chromium >/dev/null 2>&1; then
  echo "installing chromium (Debian package, for tests/dashboard's headless browser)..." >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
