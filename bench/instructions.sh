#!/usr/bin/env bash
# Instructions per request on the real path under valgrind's callgrind: mvproxy against HAProxy
# and nginx, a count that does not move with the machine's load (bench/instructions.py says
# what is measured).
#
#   bench/instructions.sh                      the shipped build (release_mvproxy in need-tools.sh:
#                                              profile-guided; MVPROXY_PGO=0 plain); the run ~5 min
#   bench/instructions.sh OLD new=NEW NEW@0.1  several builds (and sampled export) side by side
#
# From a fresh Debian machine: installs valgrind, nginx-light, haproxy, h2load (nghttp2-client),
# openssl and objdump (apt). Variables: FEW, MANY, REPEATS, CONNECTIONS, PROTOS, KEEP, CACHE_SIM
# (1: simulated cache misses and mispredicted branches too), ATOMICS (1: locked read-modify-writes
# per request too), MVPROXY_PGO. The table is printed and written to
# target/loadtest/instructions.md. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=need-tools.sh
. bench/need-tools.sh
need_tools valgrind:valgrind nginx:nginx-light haproxy:haproxy h2load:nghttp2-client openssl:openssl objdump:binutils taskset:util-linux python3:python3
if (($# == 0)); then
  set -- "$(release_mvproxy)"
fi
exec python3 bench/instructions.py "$@"
