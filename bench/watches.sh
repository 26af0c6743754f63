#!/usr/bin/env bash
# Watch scale: WATCHES (default 10 000) concurrent watches through one mvproxy, half local and
# half through the peer hop, upstreams over TLS (HTTP/2 when offered), with events flowing.
# Reports RSS per watch, file descriptors, upstream connections and CPU per event, and writes
# the table to $OUT (default target/loadtest/watches.md). See bench/watches.py. mvproxy is the
# shipped build (release_mvproxy in need-tools.sh; MVPROXY_PGO=0: the plain static release build),
# or MVPROXY_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in openssl taskset python3; do
  command -v "$tool" >/dev/null || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; apt-get install -y -qq openssl util-linux python3 >/dev/null; break; }
done
# shellcheck source=need-tools.sh
. bench/need-tools.sh
if [[ -z "${MVPROXY_BIN:-}" ]]; then
  MVPROXY_BIN=$(release_mvproxy)
  export MVPROXY_BIN
fi
# The stand-in API servers, whichever mvproxy is measured (STANDIN_BIN: one built elsewhere).
[[ -n "${STANDIN_BIN:-}" ]] || cargo build --release -p mvproxy-demo --example standin -q
exec python3 bench/watches.py "$@"
