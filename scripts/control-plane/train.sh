#!/usr/bin/env bash
# The training run of the optimised release build (scripts/release-binary.sh): runs an
# instrumented mvproxy binary in front of a real control plane and sends it what clients send
# there, so that the profile it writes says which paths are hot.
#
#   scripts/control-plane/train.sh BIN OUT
#
# BIN runs as two mvproxies, peers of each other, in front of real kube-apiservers of the
# release pair users rehearse (1.36.3 and 1.37.2 on etcd 3.7.0): Go's HTTP/2 and HTTP/1.1
# keep-alive GETs (bench/realcp/main.go), a list of a resource only the other release serves
# (the peer hop), kubectl's discovery (the merged aggregated documents and
# /apis/{group}/{version}), and watches, local and across the hop, while objects are created
# and deleted. Paths the training never takes are laid out as cold, so it covers each one the
# proxy exists for. Not bench/realpath.py's nginx and h2load: the benchmarks measure a build
# trained on something else.
#
# Each mvproxy NAME (mvproxy-a, mvproxy-b) runs with LLVM_PROFILE_FILE=OUT/NAME-%p.profraw,
# where an -Cprofile-generate build writes its raw profile as it exits.
# Needs root (each API server runs in its own UTS namespace), Go and kubectl. Loopback only
# (127.0.0.2, 127.0.0.3); every process started is stopped by its PID.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: scripts/control-plane/train.sh BIN OUT" >&2; exit 2; }
bin=$(realpath "$1") out=$(realpath -m "$2")
root="$(cd "$(dirname "$0")/../.." && pwd)"
fail() { echo "train: $*" >&2; exit 1; }
[ -x "$bin" ] || fail "$bin is not an executable"
[ "$(id -u)" -eq 0 ] || fail "kube-apiservers run in UTS namespaces of their own: run as root"
command -v kubectl >/dev/null || fail "kubectl is needed"
mkdir -p "$out"

CP_DIR=$(mktemp -d /tmp/mvproxy-train.XXXXXX)
export CP_DIR
CP_ETCD_VERSION=3.7.0
OLD=1.36.3 NEW=1.37.2
# A resource only NEW serves with every API on (scripts/conformance/lib.sh, SKEW_NEW_V).
SKEW_GROUP=scheduling.k8s.io SKEW_VERSION=v1beta1
SKEW_PATH=/apis/$SKEW_GROUP/$SKEW_VERSION/namespaces/default/workloads
# shellcheck source=lib.sh
. "$root/scripts/control-plane/lib.sh"
trap 'cp_cleanup; rm -rf "$CP_DIR"' EXIT
trap 'exit 130' INT TERM

client="$CP_DIR/realcp"
(cd "$root/bench/realcp" && go build -o "$client" .)
cp_init "etcd-v$CP_ETCD_VERSION" "kube-apiserver-v$OLD" "kube-apiserver-v$NEW" >&2
cp_pki >&2
A=127.0.0.2 B=127.0.0.3 pki="$CP_DIR/pki"
cp_start_etcd
cp_start_apiserver apiserver-a "$OLD" "$A"
cp_start_apiserver apiserver-b "$NEW" "$B"
cp_wait_ready apiserver-a "$A"
cp_wait_ready apiserver-b "$B"

cp_mvproxy_pki_args
mvp_start() { # NAME SERVER_ID IP PEER_ID PEER_IP
  LLVM_PROFILE_FILE="$out/$1-%p.profraw" "$bin" serve --server-id "$2" \
    --listen "$3:7443" --admin-listen "$3:7543" --local "https://$3:$CP_PORT" \
    --peer "$4=https://$5:7443" --peer-ca-file "$pki/ca.crt" "${CP_MVPROXY_PKI_ARGS[@]}" \
    >"$CP_DIR/logs/$1.log" 2>&1 &
  _cp_record "$1" $!
}
mvp_start mvproxy-a apiserver-a "$A" apiserver-b "$B"
mvp_start mvproxy-b apiserver-b "$B" apiserver-a "$A"
for ip in "$A" "$B"; do
  cp_wait_mvproxy "$ip:7543" || fail "the instrumented mvproxy on $ip did not become ready: $(tail -5 "$CP_DIR"/logs/mvproxy-*.log)"
done
cp_log "training $bin: kube-apiserver $OLD and $NEW behind two of it"

get() { # PROTO STRAIGHT_URL PATH N: GETs through both proxies (bench/realcp/main.go)
  "$client" -proto "$1" -ca "$pki/ca.crt" -cert "$pki/admin.crt" -key "$pki/admin.key" \
    -straight "$2" -via "a=https://$A:7443" -via "b=https://$B:7443" -path "$3" -n "$4" -repeats 1 >/dev/null
}
cp_kubeconfig "$CP_DIR/via-a.kc" "https://$A:7443"
cp_kubeconfig "$CP_DIR/via-b.kc" "https://$B:7443"
kc() { kubectl --kubeconfig "$@"; }
for proto in h2 h1; do
  get "$proto" "https://$A:$CP_PORT" /api/v1/namespaces/default 2000
  get "$proto" "https://$B:$CP_PORT" "$SKEW_PATH" 300
done
for _ in 1 2 3; do
  kc "$CP_DIR/via-a.kc" api-resources >/dev/null
  kc "$CP_DIR/via-b.kc" api-resources >/dev/null
  kc "$CP_DIR/via-a.kc" get --raw "/apis/$SKEW_GROUP/$SKEW_VERSION" >/dev/null
done
# Watches through A' of a local resource and of one across the peer hop, while B' creates and
# deletes objects of both (as bench/watches.py holds them, half local, half through the hop).
objects() { # COUNT: a List of COUNT ConfigMaps and COUNT Workloads
  python3 - "$1" "$SKEW_GROUP/$SKEW_VERSION" <<'PY'
import json, sys
n, gv = int(sys.argv[1]), sys.argv[2]
items = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"train-{i}"}, "data": {"k": "v"}} for i in range(n)]
items += [{"apiVersion": gv, "kind": "Workload", "metadata": {"name": f"train-{i}"},
           "spec": {"podGroupTemplates": [{"name": "g", "schedulingPolicy": {"basic": {}}}]}} for i in range(n)]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
}
watches=()
for res in configmaps "workloads.$SKEW_VERSION.$SKEW_GROUP"; do
  kc "$CP_DIR/via-a.kc" get "$res" -n default --watch-only >/dev/null 2>&1 &
  watches+=($!)
done
sleep 2
objects 100 >"$CP_DIR/objects.json"
kc "$CP_DIR/via-b.kc" create -n default -f "$CP_DIR/objects.json" >/dev/null
kc "$CP_DIR/via-b.kc" delete -n default -f "$CP_DIR/objects.json" >/dev/null
kill "${watches[@]}" 2>/dev/null || true
wait "${watches[@]}" 2>/dev/null || true

# The profiles are written as the proxies exit (SIGTERM: a graceful stop).
cp_stop mvproxy-a
cp_stop mvproxy-b
