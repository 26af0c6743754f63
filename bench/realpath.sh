#!/usr/bin/env bash
# The real-path benchmark: TLS + HTTP/2 (and HTTP/1.1) in, HTTP/2 over TLS to the upstream;
# mvproxy against HAProxy and nginx in one run (bench/realpath.py says what is measured).
#
#   bench/realpath.sh                          the shipped build (release_mvproxy in need-tools.sh:
#                                              profile-guided; MVPROXY_PGO=0 plain); the run ~3 min
#   bench/realpath.sh OLD new=NEW NEW@0.1      several builds (and sampled export) side by side
#
# From a fresh Debian machine: installs nginx-light, haproxy, h2load (nghttp2-client) and openssl
# (apt), and oha (cargo). Variables: REPEATS, DURATION, RATES, CONNECTIONS, STREAMS, PROTOS, PROFILE, COPIES,
# LATENCIES, UPSTREAM_CORE, MVPROXY_ENV, MVPROXY_PGO. The table is printed and written to target/loadtest/realpath.md. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=need-tools.sh
. bench/need-tools.sh
need_tools nginx:nginx-light haproxy:haproxy h2load:nghttp2-client openssl:openssl taskset:util-linux python3:python3 perf:linux-perf
need_oha
if (($# == 0)); then
  set -- "$(release_mvproxy)"
fi
exec python3 bench/realpath.py "$@"
