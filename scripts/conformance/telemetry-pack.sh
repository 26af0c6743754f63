#!/usr/bin/env bash
# The observability pack, live (issue 10 §2): builds (or takes from the cache) the real
# OpenTelemetry Collector and Jaeger, installs Debian's Prometheus when missing, builds mvproxy
# and the stand-in API server, then runs scripts/conformance/telemetry_pack.py, which starts
# everything on loopback, drives a known mix of requests through three mvproxy processes and
# checks every dashboard query, rule, trace and sampling promise. Prints the table; exits
# non-zero when any check failed. Every process it starts is stopped by its PID.
#
#   scripts/conformance/telemetry-pack.sh [--table-file FILE]
#
# Needs: Go (the Go module proxy), cargo, python3 (standard library only), root for
# `apt-get install prometheus` if Prometheus is not installed. Cold: about the build times in
# scripts/conformance/README.md; warm: a few minutes (the run itself waits for scrapes and
# tail-sampling decisions).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"

# Prometheus from Debian (2.42 on bookworm; exemplar storage is there since 2.26).
if ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "telemetry-pack: prometheus is required: apt-get install -y prometheus (as root)" >&2
    exit 1
  fi
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus
fi

# Pinned collector and Jaeger, cached by version.
built="$(scripts/telemetry-backends/build.sh otelcol jaeger)"
echo "$built" >&2
otelcol="$(awk '$1 == "otelcol" {print $4}' <<<"$built")"
jaeger="$(awk '$1 == "jaeger" {print $4}' <<<"$built")"

nice -n 10 cargo build --locked -p mvproxy --bin mvproxy -p mvproxy-demo --example standin >&2
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 "$here/telemetry_pack.py" --repo "$repo" --workdir "$work" \
  --mvproxy "$target/debug/mvproxy" --standin "$target/debug/examples/standin" \
  --otelcol "$otelcol" --jaeger "$jaeger" --prometheus "$(command -v prometheus)" "$@"
