#!/usr/bin/env bash
# Conformance part "cluster": a whole control plane rolled through the skew, small
# (scripts/control-plane/rehearsal.sh --roll): three nodes of kube-apiserver, mvproxy,
# kube-controller-manager and kube-scheduler (leader-elected, restarted on their node's turn),
# KWOK's kubelets through a load balancer, rolled from the pair's OLD release to NEW. Each check
# the rehearsal writes becomes a line of the suite. CI runs it at CLUSTER_NODES nodes and
# CLUSTER_DEPLOYMENTS x CLUSTER_REPLICAS pods; the full scale (100 nodes, 1 000 pods) is the
# rehearsal's default (docs/controllers.md).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=lib.sh
. "$here/lib.sh"
out="${CONFORMANCE_OUT:-$root/target/conformance}/cluster"
mkdir -p "$out"
conformance_pair
if command -v haproxy >/dev/null || { [ "$(id -u)" -eq 0 ] && apt-get install -y -q --no-install-recommends haproxy >&2; }; then :; fi
status=0
OLD=$OLD NEW=$NEW NODES=${CLUSTER_NODES:-20} DEPLOYMENTS=${CLUSTER_DEPLOYMENTS:-4} REPLICAS=${CLUSTER_REPLICAS:-25} \
  "$root/scripts/control-plane/rehearsal.sh" --roll --out "$out" || status=$?
while IFS=$'\t' read -r name result detail; do
  record "$name" "$result" "$detail"
done <"$out/checks.tsv"
[ -s "$out/checks.tsv" ] || record "rehearsal ran" FAIL "no checks written (exit $status); see $out/logs"
exit "$status"
