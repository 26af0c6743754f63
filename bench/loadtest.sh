#!/usr/bin/env bash
# Loopback load test of mvproxy against nginx and HAProxy as reference proxies, in one run.
#
#   bench/loadtest.sh              full run (10 s per measurement, two repeats, ~15 min)
#   QUICK=1 bench/loadtest.sh      quick run for trying a change (3 s, one repeat)
#
# From a fresh Debian machine: installs nginx-light, haproxy, wrk and openssl (apt), oha
# (cargo install, pinned), builds mvproxy as the image ships it (release_mvproxy in
# need-tools.sh; MVPROXY_PGO=0: the plain static release build), then runs bench/loadtest.py, which says
# what is measured and how. The table is printed and written to $OUT
# (default target/loadtest/table.md). Everything listens on 127.0.0.1 only.
# Variables: QUICK, DURATION (e.g. 10s), REPEATS, RATE (open-loop req/s), CONNECTIONS,
# OUT, ONLY (comma-separated configuration names), PROFILE (a configuration to profile with
# perf into $OUT-NAME.perf.txt), MVPROXY_ENV (prefixes mvproxy's command,
# e.g. "env MALLOC_ARENA_MAX=1"), MVPROXY_BIN (a prebuilt binary instead of building).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=need-tools.sh
. bench/need-tools.sh
need_tools nginx:nginx-light haproxy:haproxy wrk:wrk openssl:openssl taskset:util-linux python3:python3
need_oha
if [[ -z "${MVPROXY_BIN:-}" ]]; then
  MVPROXY_BIN=$(release_mvproxy)
fi
export MVPROXY_BIN
exec python3 bench/loadtest.py "$@"
