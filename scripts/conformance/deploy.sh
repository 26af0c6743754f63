#!/usr/bin/env bash
# Conformance part "deploy": the shipped manifests and the image on the real control plane.
# Two real kube-apiservers, OLD (A, 192.0.2.2) and NEW (B, 192.0.2.3) of the pair
# (conformance_pair in lib.sh: 1.36.3 and 1.37.2 by default), on one etcd,
# in a network namespace of the part's own (as scripts/conformance/control-plane.sh):
#   - every Kubernetes manifest of deploy/kubernetes/ and every kustomization (the bases and
#     deploy/kustomize/'s overlays, rendered by `kubectl kustomize`) passes
#     `kubectl apply --dry-run=server` on both releases (kubeadm-config.yaml is kubeadm's and
#     prometheus-scrape.yaml Prometheus', not API objects: recorded as SKIP);
#   - rbac.yaml, applied for real, grants the ServiceAccount kube-system/mvproxy what mvproxy
#     does and not more, verb by verb (`kubectl auth can-i --as=system:serviceaccount:...`);
#   - the image (scripts/image.sh, filesystem exported) runs as the static pod runs it: its
#     entrypoint with the manifest's arguments and environment, kubeadm's PKI and the node's
#     config.yaml mounted read-only at the manifest's mountPaths, read-only root, nothing of
#     the host visible (pod-run.sh); one pod in front of each API server, each the other's
#     peer, and kubectl's routing checks through them.
# Reports in $CONFORMANCE_OUT/deploy/. Every process is stopped by its PID.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=lib.sh
. "$here/lib.sh"
out="${CONFORMANCE_OUT:-$root/target/conformance}/deploy"
mkdir -p "$out"
[ "$(id -u)" -eq 0 ] || { record "runs as root" FAIL "namespaces and bind mounts need root"; exit 1; }
rootfs="$root/target/image/rootfs"

if [ -z "${CONFORMANCE_NETNS:-}" ]; then
  t0=$(date +%s)
  "$root/scripts/image.sh" --export "$rootfs" >"$out/image.txt"
  record "image builds (scripts/image.sh)" PASS "$(tr '\n' ' ' <"$out/image.txt")in $(( $(date +%s) - t0 ))s (cached steps reused)"
  conformance_pair
  "$root/scripts/control-plane/build.sh" "${COMPONENTS[@]}" >/dev/null
  exec unshare --net -- env CONFORMANCE_NETNS=1 "$0" "$@"
fi
ip link set lo up
ip addr add 192.0.2.2/32 dev lo
ip addr add 192.0.2.3/32 dev lo

CP_DIR=$(mktemp -d /tmp/mvproxy-deploy.XXXXXX)
export CP_DIR
# shellcheck source=../control-plane/lib.sh
. "$root/scripts/control-plane/lib.sh"
cleanup() {
  cp_cleanup
  cp -r "$CP_DIR/logs" "$out/" 2>/dev/null || true
  rm -rf "$CP_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

conformance_pair
A_IP=192.0.2.2 B_IP=192.0.2.3
MA_IP=127.0.0.2 MB_IP=127.0.0.3
pki="$CP_DIR/pki"
deploy="$root/deploy/kubernetes"
kc() { # KUBECONFIG args...
  local cfg=$1
  shift
  kubectl --kubeconfig "$cfg" --cache-dir "$CP_DIR/kcache" --request-timeout 20s "$@"
}

cp_init "${COMPONENTS[@]}"
cp_pki alice mvproxy-testers
t0=$(date +%s)
cp_start_etcd
cp_start_apiserver apiserver-a "$OLD" "$A_IP"
cp_start_apiserver apiserver-b "$NEW" "$B_IP"
cp_wait_ready apiserver-a "$A_IP" 180
cp_wait_ready apiserver-b "$B_IP" 180
record "control plane starts" PASS "A $(cp_curl $A_IP /version | jq -r .gitVersion), B $(cp_curl $B_IP /version | jq -r .gitVersion), ready in $(( $(date +%s) - t0 ))s"
cp_kubeconfig "$CP_DIR/a.kc" "https://$A_IP:$CP_PORT"
cp_kubeconfig "$CP_DIR/b.kc" "https://$B_IP:$CP_PORT"
# What kube-controller-manager would have made by now: the namespace's default
# ServiceAccount, without which the ServiceAccount admission plugin refuses any Pod.
kc "$CP_DIR/a.kc" create serviceaccount default -n kube-system >/dev/null 2>&1 || true

# ---- server-side dry run of every manifest, on both releases --------------------------------
dry_run() { # KUBECONFIG FILE|-
  kc "$1" apply --dry-run=server -f "$2" >>"$out/dry-run.txt" 2>&1
}
for f in "$deploy"/*.yaml "$deploy"/static-pod/*.yaml; do
  rel=${f#"$root/"}
  case $(basename "$f") in
    kubeadm-config.yaml) record "dry-run $rel" SKIP "kubeadm's configuration (kubeadm.k8s.io), not an API object"; continue ;;
    prometheus-scrape.yaml) record "dry-run $rel" SKIP "a Prometheus scrape_configs snippet, not an API object"; continue ;;
    kustomization.yaml) continue ;;
    config.yaml) record "dry-run $rel" SKIP "mvproxy's configuration file on the node (tests/manifests.rs checks it)"; continue ;;
  esac
  for s in a:$OLD b:$NEW; do
    check "dry-run=server $rel on $s" "kubectl apply --dry-run=server" dry_run "$CP_DIR/${s%%:*}.kc" "$f"
  done
done
for k in deploy/kubernetes deploy/kubernetes/static-pod deploy/kustomize/static-pod deploy/kustomize/daemonset; do
  kubectl kustomize "$root/$k" >"$CP_DIR/kustomized.yaml" 2>>"$out/dry-run.txt" ||
    { record "kustomize $k" FAIL "kubectl kustomize failed (dry-run.txt)"; continue; }
  n=$(grep -c '^kind:' "$CP_DIR/kustomized.yaml")
  for s in a:$OLD b:$NEW; do
    check "kustomize $k, dry-run=server on $s" "$n objects" dry_run "$CP_DIR/${s%%:*}.kc" "$CP_DIR/kustomized.yaml"
  done
done

# ---- RBAC, verb by verb ------------------------------------------------------------------------
kc "$CP_DIR/a.kc" apply -f "$deploy/rbac.yaml" >/dev/null
sa=system:serviceaccount:kube-system:mvproxy
can() { # KUBECONFIG yes|no VERB RESOURCE [args]
  local cfg=$1 want=$2 got
  shift 2
  got=$(kc "$cfg" auth can-i --as="$sa" "$@" 2>/dev/null </dev/null || true)
  [ "$got" = "$want" ]
}
while read -r want verb resource ns; do
  for s in a:$OLD b:$NEW; do
    args=("$verb" "$resource")
    case $ns in
      -) ;;                      # cluster-scoped
      all) args+=(--all-namespaces) ;;
      *) args+=(-n "$ns") ;;
    esac
    check "rbac: $sa can-i ${args[*]} on $s = $want" "" can "$CP_DIR/${s%%:*}.kc" "$want" "${args[@]}"
  done
done <<'TABLE'
yes list leases.coordination.k8s.io kube-system
yes watch leases.coordination.k8s.io kube-system
yes list endpointslices.discovery.k8s.io default
yes watch endpointslices.discovery.k8s.io default
yes create tokenreviews.authentication.k8s.io -
yes create subjectaccessreviews.authorization.k8s.io -
no create leases.coordination.k8s.io kube-system
no update leases.coordination.k8s.io kube-system
no list endpointslices.discovery.k8s.io kube-system
no get secrets kube-system
no list pods all
TABLE

# ---- the image, run as the static pod runs it -------------------------------------------------
entrypoint=$(jq -r '.Entrypoint[0]' "$rootfs.config.json")
image_user=$(jq -r '.User' "$rootfs.config.json")
# The image's own user, with nothing of the host visible.
version_line=$("$here/pod-run.sh" "$rootfs" "$image_user" -- "$entrypoint" --version 2>&1 || true)
check "image: $entrypoint --version as $image_user, from the unpacked filesystem only" "$version_line" \
  grep -q "^mvproxy .* (commit [0-9a-f]\{7,\})$" <<<"$version_line"
check "image: one file (the binary), no shell" "$(cd "$rootfs" && find . -type f | tr '\n' ' ')" \
  sh -c "[ ! -e '$rootfs/bin/sh' ] && [ \$(find '$rootfs' -type f | wc -l) = 1 ]"

# The static pod's container: its args, env, runAsUser and mountPaths, from the manifest.
python3 - "$deploy/static-pod/mvproxy.yaml" >"$CP_DIR/pod.sh" <<'PY'
import shlex, sys, yaml
c = yaml.safe_load(open(sys.argv[1]))["spec"]["containers"][0]
q = shlex.quote
print("pod_args=(" + " ".join(q(a) for a in c["args"]) + ")")
print("pod_env=(" + " ".join("-e " + q(e["name"] + "=" + e["value"]) for e in c.get("env", [])) + ")")
print("pod_user=" + str(c["securityContext"]["runAsUser"]))
print("pod_mounts=(" + " ".join(sorted(q(m["mountPath"]) for m in c["volumeMounts"])) + ")")
PY
# shellcheck disable=SC1091
. "$CP_DIR/pod.sh"
[ "${pod_args[0]}" = serve ] || record "static pod runs serve" FAIL "args: ${pod_args[*]}"
# A node's config.yaml: the shipped one with the node's names and addresses, edited as its
# header says; kubeadm's PKI at /etc/kubernetes/pki (this control plane's, same file names).
# It ships with front-proxy identity: the peers are the other nodes' mvproxies, which pass
# mvproxy's own discovery reads on only from a front-proxy client they trust (without it every
# peer read is the API server's 401).
node_config() { # DIR SERVER_ID LOCAL_IP MY_IP PEER_ID PEER_IP
  mkdir -p "$1"
  sed -e "s/^server-id: .*/server-id: $2/" -e "s#^local: .*#local: https://$3:$CP_PORT#" \
    -e "s/^listen: .*/listen: $4:7443/" -e "s/^admin-listen: .*/admin-listen: $4:9464/" \
    -e "/^  - cp-[0-9]=/d" -e "s#^peers:#peers:\n  - $5=https://$6:7443#" \
    "$deploy/static-pod/config.yaml" >"$1/config.yaml"
}
node_config "$CP_DIR/node-a" apiserver-a "$A_IP" "$MA_IP" apiserver-b "$MB_IP"
node_config "$CP_DIR/node-b" apiserver-b "$B_IP" "$MB_IP" apiserver-a "$MA_IP"
pod_argv() { # NODE_DIR: sets POD to the command running the image's entrypoint as the static pod on that node
  POD=("$here/pod-run.sh" "$rootfs" "$pod_user:$pod_user" -v "$pki:/etc/kubernetes/pki" -v "$1:/etc/kubernetes/mvproxy"
    "${pod_env[@]}" -- "$entrypoint")
}
pod() { # NODE_DIR ARGS...: in the foreground
  local POD
  pod_argv "$1"
  shift
  "${POD[@]}" "$@"
}
check "the pod reads from the manifest's mounts only" "volumeMounts: ${pod_mounts[*]}" \
  test "${pod_mounts[*]}" = "/etc/kubernetes/mvproxy /etc/kubernetes/pki"
check "image: check-config with the static pod's args, env and mounts" "$(pod "$CP_DIR/node-a" check-config "${pod_args[@]:1}" 2>&1 | head -1)" \
  pod "$CP_DIR/node-a" check-config "${pod_args[@]:1}"
# Started directly (not through a function), so the PID recorded is pod-run.sh's own.
pod_argv "$CP_DIR/node-a"
"${POD[@]}" "${pod_args[@]}" >"$CP_DIR/logs/pod-a.log" 2>&1 &
_cp_record pod-a $!
pod_argv "$CP_DIR/node-b"
"${POD[@]}" "${pod_args[@]}" >"$CP_DIR/logs/pod-b.log" 2>&1 &
_cp_record pod-b $!
pods_ready() { cp_wait_mvproxy "$MA_IP:9464" 30 && cp_wait_mvproxy "$MB_IP:9464" 30; }
check "static pods from the image ready (readinessProbe: /readyz on :9464)" "in front of A ($OLD) and B ($NEW), each the other's peer" \
  pods_ready

# kubectl through the pods: a bearer token (the static config forwards the client's
# Authorization as sent), the serving certificate verified against the cluster CA.
token_kubeconfig() { # FILE SERVER
  cat >"$1" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$2", certificate-authority: "$pki/ca.crt"}}]
users: [{name: u, user: {token: "$CP_ADMIN_TOKEN"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
YAML
}
token_kubeconfig "$CP_DIR/via-a.kc" "https://$MA_IP:7443"
token_kubeconfig "$CP_DIR/via-b.kc" "https://$MB_IP:7443"
api_resources() { kc "$1" api-resources -o name 2>>"$CP_DIR/logs/kubectl.err" | sort -u; }
sort -u <(api_resources "$CP_DIR/a.kc") <(api_resources "$CP_DIR/b.kc") >"$out/api-resources-union.txt"
for via in a b; do
  api_resources "$CP_DIR/via-$via.kc" >"$CP_DIR/ar.txt"
  d=$(diff "$out/api-resources-union.txt" "$CP_DIR/ar.txt" | grep '^[<>]' | tr '\n' ' ' || true)
  check "kubectl api-resources via the static pod on $via = union of both releases" "$(wc -l <"$CP_DIR/ar.txt") resources${d:+; differs: $d}" test -z "$d"
done
WL=workloads.$SKEW_NEW_V.scheduling.k8s.io
wl() { printf '{"apiVersion":"scheduling.k8s.io/%s","kind":"Workload","metadata":{"name":"%s","namespace":"default"},"spec":{"podGroupTemplates":[{"name":"g","schedulingPolicy":{"basic":{}}}]}}' "$SKEW_NEW_V" "$1"; }
crud_hop() {
  wl deploy-pod-1 | kc "$CP_DIR/via-a.kc" create -f - >/dev/null &&
    kc "$CP_DIR/via-a.kc" get "$WL" deploy-pod-1 -n default -o name | grep -q deploy-pod-1 &&
    [ "$(cp_curl "$B_IP" "/apis/scheduling.k8s.io/$SKEW_NEW_V/namespaces/default/workloads/deploy-pod-1" -o /dev/null -w '%{http_code}')" = 200 ] &&
    kc "$CP_DIR/via-a.kc" delete "$WL" deploy-pod-1 -n default >/dev/null
}
check "create/get/delete $NEW-only workloads via the static pod on A ($OLD)" "served by B through the peer pod; read back straight from B" crud_hop
kc "$CP_DIR/b.kc" delete "$WL" deploy-pod-1 -n default --ignore-not-found >/dev/null 2>&1 || true
rerouted() { curl -s "http://$MA_IP:9464/metrics" | grep 'mvproxy_rerouted_request_total{' | grep -q 'resource="workloads"'; }
check "the pod on A counted the reroute (mvproxy_rerouted_request_total)" "" rerouted
check "the pods log JSON (the config's log-format)" "" grep -q '^{' "$CP_DIR/logs/pod-a.log"
for n in pod-a pod-b; do cp_stop "$n"; done
