#!/usr/bin/env bash
# Instructions per request on the real path under valgrind's callgrind: mvproxy against HAProxy
# and nginx, a count that does not move with the machine's load (bench/instructions.py says
# what is measured).
#
#   bench/instructions.sh                      mvproxy built in release; the run ~5 min
#   bench/instructions.sh OLD new=NEW NEW@0.1  several builds (and sampled export) side by side
#
# From a fresh Debian machine: installs valgrind, nginx-light, haproxy, h2load (nghttp2-client)
# and openssl (apt). Variables: FEW, MANY, REPEATS, CONNECTIONS, PROTOS, KEEP. The table is
# printed and written to target/loadtest/instructions.md. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=need-tools.sh
. bench/need-tools.sh
need_tools valgrind:valgrind nginx:nginx-light haproxy:haproxy h2load:nghttp2-client openssl:openssl taskset:util-linux python3:python3
if (($# == 0)); then
  cargo build --release -p mvproxy --bin mvproxy -q
fi
exec python3 bench/instructions.py "$@"
