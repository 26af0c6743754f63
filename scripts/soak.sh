#!/usr/bin/env bash
# A chaos soak of mvproxy (soak/src/main.rs says what it does and checks): three nodes of
# stand-in API servers behind real mvproxy processes, under steady mixed load, while API
# servers and proxies are killed and restarted and a peer hop stalls. Prints its checks and
# exits 0 when all hold, 1 otherwise (the proxies' last log lines are printed then). The soak
# starts and stops every process by its PID; the whole run is also bounded from outside
# (`timeout`: the duration plus 10 minutes for start-up and shutdown).
#
#   scripts/soak.sh              # 1 minute
#   scripts/soak.sh 10m 100      # the documented run: 10 minutes at 100 requests/s
#
# SOAK_PROFILE=debug uses the debug binaries (what scripts/test.sh built: CI runs it so,
# without a release build); the default is release.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-60s}
rate=${2:-100}
profile=${SOAK_PROFILE:-release}
case "$profile" in
  release)
    # Each package alone: built together, cargo would resolve their features as one set,
    # which may differ from the demo's `cargo run --release -p mvproxy` and relink the
    # fat-LTO binary (scripts/check-release-features.py).
    nice -n 10 cargo build --release --locked -p mvproxy >&2
    nice -n 10 cargo build --release --locked -p mvproxy-soak >&2
    ;;
  debug)
    # scripts/test.sh's own build command: `-p mvproxy -p mvproxy-soak` resolves fewer
    # features than the whole workspace (whose tests enable more), so it rebuilt what
    # test.sh had just built.
    nice -n 10 cargo build --workspace --locked --bins >&2
    ;;
  *)
    echo "soak: SOAK_PROFILE must be release or debug, not $profile" >&2
    exit 2
    ;;
esac
# the outer bound in seconds: humantime's s/m/h suffixes, as the soak reads its --duration
case "$duration" in
  *h) bound=$((${duration%h} * 3600)) ;;
  *m) bound=$((${duration%m} * 60)) ;;
  *s) bound=${duration%s} ;;
  *) bound=$duration ;;
esac
if ! [[ "$bound" =~ ^[0-9]+$ ]]; then
  echo "soak: the duration is N, Ns, Nm or Nh, not $duration" >&2
  exit 2
fi
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
rc=0
timeout -k 10 $((bound + 600)) "target/$profile/mvproxy-soak" --duration "$duration" --rate "$rate" \
  --mvproxy "target/$profile/mvproxy" --logs "$logs" || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "soak: FAILED (exit $rc); the proxies' last log lines:" >&2
  tail -n 20 "$logs"/*.log >&2 || true
  exit 1
fi
