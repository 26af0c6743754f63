#!/usr/bin/env bash
# Conformance checks against real components, one part after another; exits non-zero when any
# part fails. Parts live in scripts/conformance/.
#   telemetry-pack  the observability pack live: collector, Jaeger, Prometheus, dashboards,
#                   rules, traces, tail sampling (scripts/conformance/telemetry-pack.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/conformance/telemetry-pack.sh "$@"
