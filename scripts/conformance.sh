#!/usr/bin/env bash
# The conformance suite: mvproxy against real components, on loopback only. Runs each part
# under scripts/conformance/ in turn; a part records one line per check (see
# conformance/lib.sh) and writes its report files under $CONFORMANCE_OUT. Prints the summary
# table and exits non-zero if any check failed or any part failed to run.
#
#   control-plane   two real kube-apiserver releases and etcd; mvproxy against upstream's own
#                   Mixed Version Proxy (scripts/conformance/control-plane.sh)
#   deploy          the image (scripts/image.sh) and the manifests of deploy/kubernetes/ on two
#                   real kube-apiserver releases: server-side dry-run, RBAC verb by verb, the
#                   image's filesystem run as the static pod (scripts/conformance/deploy.sh)
#   peer-failures   one of two servers of a GVR killed, stopped, cut off: what clients see
#                   through mvproxy and through upstream's proxy (scripts/conformance/peer-failures.sh)
#   controllers     the harm a skew does to kube-controller-manager's garbage collector and
#                   namespace controller, with no version-aware proxy, upstream's and mvproxy,
#                   both directions, three ways to reach the API (scripts/conformance/controllers.sh)
#   cluster         a whole control plane (controller-managers, schedulers, KWOK's kubelets)
#                   rolled from OLD to NEW through mvproxy (scripts/conformance/cluster.sh)
#   telemetry-pack  the observability pack live: collector, Jaeger, Prometheus, dashboards,
#                   rules, traces, tail sampling, span export over mutual TLS across a
#                   collector restart and outage (scripts/conformance/telemetry-pack.sh)
#
# usage: scripts/conformance.sh [PART ...]    (default: every part, in the order below)
# env:   CONFORMANCE_OUT  report directory (default: target/conformance)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
parts=(control-plane deploy peer-failures controllers cluster telemetry-pack)
[ $# -gt 0 ] && parts=("$@")

export CONFORMANCE_OUT=${CONFORMANCE_OUT:-$root/target/conformance}
mkdir -p "$CONFORMANCE_OUT"
export CONFORMANCE_RESULTS="$CONFORMANCE_OUT/results.tsv"
: >"$CONFORMANCE_RESULTS"

failed_parts=()
for part in "${parts[@]}"; do
  script="$root/scripts/conformance/$part.sh"
  [ -x "$script" ] || { echo "conformance: no part $part ($script)" >&2; exit 2; }
  echo "== conformance part: $part" >&2
  start=$(date +%s)
  if ! CONFORMANCE_PART=$part "$script"; then
    failed_parts+=("$part")
  fi
  echo "== $part took $(( $(date +%s) - start ))s" >&2
done

echo
printf '%-14s %-58s %-5s %s\n' part check result detail
awk -F'\t' '{printf "%-14s %-58s %-5s %s\n", $1, $2, $3, $4}' "$CONFORMANCE_RESULTS"
pass=$(awk -F'\t' '$3 == "PASS"' "$CONFORMANCE_RESULTS" | wc -l)
fail=$(awk -F'\t' '$3 == "FAIL"' "$CONFORMANCE_RESULTS" | wc -l)
skip=$(awk -F'\t' '$3 == "SKIP"' "$CONFORMANCE_RESULTS" | wc -l)
echo
echo "$pass passed, $fail failed, $skip skipped; parts that did not finish: ${failed_parts[*]:-none}; reports in $CONFORMANCE_OUT"
[ "$fail" -eq 0 ] && [ ${#failed_parts[@]} -eq 0 ]
