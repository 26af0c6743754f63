#!/usr/bin/env bash
# A chaos soak of mvproxy (soak/src/main.rs says what it does and checks): three nodes of
# stand-in API servers behind real mvproxy processes, under steady mixed load, while API
# servers and proxies are killed and restarted and a peer hop stalls. Prints its checks and
# exits 0 when all hold, 1 otherwise.
#
#   scripts/soak.sh              # 1 minute (CI)
#   scripts/soak.sh 10m 100      # the documented run: 10 minutes at 100 requests/s
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-60s}
rate=${2:-100}
nice -n 10 cargo build --release --locked -p mvproxy -p mvproxy-soak >&2
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
if ! target/release/mvproxy-soak --duration "$duration" --rate "$rate" \
  --mvproxy target/release/mvproxy --logs "$logs"; then
  echo "soak: failed; the proxies' logs:" >&2
  tail -n 20 "$logs"/*.log >&2 || true
  exit 1
fi
