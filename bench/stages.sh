#!/usr/bin/env bash
# A proxy's own share of each request, from the kernel's scheduler and system-call events:
# mvproxy against HAProxy on bench/realpath.py's path, requests spread at fixed rates
# (bench/stages.py says what is measured, and why).
#
#   bench/stages.sh                  the shipped build (release_mvproxy in need-tools.sh); ~7 min
#   bench/stages.sh OLD new=NEW      several builds side by side
#
# From a fresh Debian machine: installs nginx-light, haproxy, h2load (nghttp2-client), openssl,
# perf (linux-perf) and ss (iproute2). Variables: REPEATS, DURATION, RATES, PROTOS. Needs root
# (perf's tracepoints). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=need-tools.sh
. bench/need-tools.sh
need_tools nginx:nginx-light haproxy:haproxy h2load:nghttp2-client openssl:openssl taskset:util-linux python3:python3 perf:linux-perf ss:iproute2
if (($# == 0)); then
  set -- "$(release_mvproxy)"
fi
exec python3 bench/stages.py "$@"
