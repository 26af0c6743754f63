#!/usr/bin/env bash
# An upgrade rehearsal of a whole control plane, on loopback: three nodes, each with
# kube-apiserver, mvproxy in front of it, kube-controller-manager and kube-scheduler (both
# leader-elected, as in a real cluster, reaching the API only through their node's mvproxy),
# one etcd, and KWOK playing the kubelets of NODES fake nodes (node Leases, pod status) through
# HAProxy (TCP round-robin over the three mvproxies, as kubelets reach a load balancer). Every
# node starts at OLD; Deployments totalling DEPLOYMENTS x REPLICAS pods are scheduled and
# "run"; then, with --roll, the nodes are upgraded to NEW one after another (API server, then
# its controller-manager and scheduler, restarted on the node's turn), and a Deployment is
# scaled halfway, so the controllers and the scheduler do real work across the skew.
#
# What it proves (checks.tsv, one line per check: name, PASS|FAIL, detail), and what it
# measures (report.md):
#   every pod scheduled and Running as KWOK reports it, every Deployment at its replica count;
#   no object lost or duplicated (counts per resource before and after, read from each
#   release); the controller-manager and scheduler leader Leases held; no relist storm (LIST
#   and WATCH requests per client from mvproxy's mvproxy_client_requests_total, before, during
#   and after); mvproxy's cost (CPU seconds per second, RSS, watches held open, requests per
#   second by client and verb) under that load.
#
# usage: rehearsal.sh [--roll] [--hold] [--out DIR]
#   --roll  upgrade the three nodes OLD -> NEW and check the cluster after it
#   --hold  stay up until Ctrl-C (after the roll, with --roll); kubeconfig: $OUT/admin.kubeconfig,
#           the mvproxies' /metrics for Prometheus: $OUT/prometheus-targets.yml
# env: OLD (1.36.3), NEW (1.37.2), CP_ETCD_VERSION (3.7.0), NODES (100), DEPLOYMENTS (10),
#      REPLICAS (100), MVPROXY (default: a release build of this checkout), SETTLE_SECONDS (20)
# Needs root (a UTS namespace per API server), Go (the pinned builds), haproxy and jq.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
roll=0 hold=0 OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    --roll) roll=1 ;;
    --hold) hold=1 ;;
    --out) OUT=${2:?--out needs a directory}; shift ;;
    *) echo "rehearsal.sh: unknown argument $1 (usage: rehearsal.sh [--roll] [--hold] [--out DIR])" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "rehearsal.sh: needs root (a UTS namespace per API server)" >&2; exit 2; }
for tool in haproxy jq curl openssl; do
  command -v "$tool" >/dev/null || { echo "rehearsal.sh: needs $tool (Debian: apt-get install $tool)" >&2; exit 2; }
done
OLD=${OLD:-1.36.3} NEW=${NEW:-1.37.2}
export CP_ETCD_VERSION=${CP_ETCD_VERSION:-3.7.0}
NODES=${NODES:-100} DEPLOYMENTS=${DEPLOYMENTS:-10} REPLICAS=${REPLICAS:-100}
SETTLE_SECONDS=${SETTLE_SECONDS:-20}
for v in NODES DEPLOYMENTS REPLICAS SETTLE_SECONDS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "rehearsal.sh: $v must be a positive integer, not '${!v}'" >&2; exit 2; }
done
OUT=${OUT:-$root/target/rehearsal}
mkdir -p "$OUT"
: >"$OUT/checks.tsv"
MVPROXY=${MVPROXY:-$root/target/release/mvproxy}
if [ "$MVPROXY" = "$root/target/release/mvproxy" ]; then
  (cd "$root" && nice -n 10 cargo build --release --locked -p mvproxy -q)
fi

CP_DIR=$(mktemp -d /tmp/mvproxy-rehearsal.XXXXXX)
export CP_DIR
# shellcheck source=lib.sh
. "$here/lib.sh"
sleeper=""
cleanup() {
  [ -z "$sleeper" ] || kill "$sleeper" 2>/dev/null || true
  cp_cleanup
  rm -rf "$OUT/logs"
  cp -r "$CP_DIR/logs" "$OUT/" 2>/dev/null || true
  rm -rf "$CP_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cp_init "etcd-v$CP_ETCD_VERSION" "kube-apiserver-v$OLD" "kube-apiserver-v$NEW" kwok-v0.8.0
cp_pki
pki="$CP_DIR/pki"
kwok_mod="$(go env GOMODCACHE)/sigs.k8s.io/kwok@v0.8.0"
bin_of() { local var; var="$(echo "$1-v$2" | tr 'a-z.-' 'A-Z__')"; echo "${!var:?no $1 $2 built}"; }

check() { # NAME PASS|FAIL DETAIL
  printf '%s\t%s\t%s\n' "$1" "$2" "$(echo "$3" | tr '\t\n' '  ')" >>"$OUT/checks.tsv"
  echo "[rehearsal] $2 $1: $3" >&2
}
log() { echo "[rehearsal] $*" >&2; }
ip_of() { echo "127.0.0.$(( $1 + 1 ))"; }   # node 1..3: API server on :6443, mvproxy on :7443
release=("" "$OLD" "$OLD" "$OLD")

# ---- the processes of a node ------------------------------------------------------------------

start_apiserver() { cp_start_apiserver "apiserver-$1" "${release[$1]}" "$(ip_of "$1")" && cp_wait_ready "apiserver-$1" "$(ip_of "$1")" 240; }
start_mvproxy() {
  local n=$1 ip peers=() j
  ip=$(ip_of "$n")
  for j in 1 2 3; do [ "$j" = "$n" ] || peers+=(--peer "apiserver-$j=https://$(ip_of "$j"):7443"); done
  "$MVPROXY" serve --listen "$ip:7443" --admin-listen "$ip:7543" --server-id "apiserver-$n" "${peers[@]}" \
    --local "https://$ip:$CP_PORT" --local-ca-file "$pki/ca.crt" --peer-ca-file "$pki/ca.crt" \
    --tls-cert-file "$pki/apiserver.crt" --tls-key-file "$pki/apiserver.key" \
    --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
    --identity front-proxy --client-ca-file "$pki/ca.crt" \
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --refresh-interval-seconds 5 >>"$CP_DIR/logs/mvproxy-$n.log" 2>&1 &
  _cp_record "mvproxy-$n" $!
  local i
  for i in $(seq 1 120); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$ip:7543/readyz")" = 200 ] && return 0
    sleep 0.5
  done
  log "mvproxy-$n not ready; see logs/mvproxy-$n.log"
  return 1
}
# The controller-manager and the scheduler of node N's release, through node N's mvproxy, as
# the admin user (kubeadm gives them their own users; the identity does not change the routing).
start_controllers() {
  local n=$1 ip rel
  ip=$(ip_of "$n") rel=${release[$n]}
  cp_kubeconfig "$CP_DIR/node-$n.kc" "https://$ip:7443"
  unshare --uts -- sh -c 'hostname "$1"; shift; exec "$@"' sh "node-$n" \
    "$(bin_of kube-controller-manager "$rel")" --kubeconfig "$CP_DIR/node-$n.kc" --secure-port 0 \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --use-service-account-credentials=false --v 1 >>"$CP_DIR/logs/kcm-$n.log" 2>&1 &
  _cp_record "kcm-$n" $!
  unshare --uts -- sh -c 'hostname "$1"; shift; exec "$@"' sh "node-$n" \
    "$(bin_of kube-scheduler "$rel")" --kubeconfig "$CP_DIR/node-$n.kc" --secure-port 0 --v 1 \
    >>"$CP_DIR/logs/scheduler-$n.log" 2>&1 &
  _cp_record "scheduler-$n" $!
}
stop_node() { cp_stop "scheduler-$1"; cp_stop "kcm-$1"; cp_stop "apiserver-$1"; }

# KWOK through HAProxy (TCP round-robin over the three mvproxies), with upstream's "fast" node
# and pod stages and node heartbeats by Lease (kustomize/stage/ of sigs.k8s.io/kwok v0.8.0).
start_kwok() {
  cat >"$CP_DIR/haproxy.cfg" <<EOF
global
  maxconn 4000
defaults
  mode tcp
  timeout connect 5s
  timeout client 1h
  timeout server 1h
frontend fe
  bind 127.0.0.5:$CP_PORT
  default_backend be
backend be
  balance roundrobin
  server m1 $(ip_of 1):7443 check
  server m2 $(ip_of 2):7443 check
  server m3 $(ip_of 3):7443 check
EOF
  haproxy -f "$CP_DIR/haproxy.cfg" -db >>"$CP_DIR/logs/haproxy.log" 2>&1 &
  _cp_record haproxy $!
  cp_kubeconfig "$CP_DIR/kwok.kc" "https://127.0.0.5:$CP_PORT"
  local stages=() f
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    stages+=(--config "$kwok_mod/kustomize/stage/$f")
  done
  "$(bin_of kwok 0.8.0)" --kubeconfig "$CP_DIR/kwok.kc" "${stages[@]}" \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake --node-lease-duration-seconds 40 \
    >>"$CP_DIR/logs/kwok.log" 2>&1 &
  _cp_record kwok $!
}

k() { kubectl --kubeconfig "$CP_DIR/node-$1.kc" --request-timeout 30s "${@:2}"; }
# Straight to an API server (not through mvproxy): what each release reads from storage.
straight() { cp_curl "$(ip_of "$1")" "$2"; }

# ---- the workload ---------------------------------------------------------------------------

make_nodes() {
  local i
  for i in $(seq 0 $((NODES - 1))); do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {node.alpha.kubernetes.io/ttl: "0", kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/hostname: kwok-node-$i, type: kwok}
spec:
  taints: [{effect: NoSchedule, key: kwok.x-k8s.io/node, value: fake}]
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
EOF
  done
}
make_deployments() {
  local i
  for i in $(seq 0 $((DEPLOYMENTS - 1))); do
    cat <<EOF
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web-$i, namespace: rehearsal}
spec:
  replicas: $REPLICAS
  selector: {matchLabels: {app: web-$i}}
  template:
    metadata: {labels: {app: web-$i}}
    spec:
      nodeSelector: {type: kwok}
      tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
      automountServiceAccountToken: false
      containers: [{name: web, image: registry.example/web:1, resources: {requests: {cpu: 10m, memory: 16Mi}}}]
EOF
  done
}

# settled N SECONDS: every Deployment at its replica count and every pod Running (as KWOK
# reports it), through node N's mvproxy, within SECONDS.
want_pods=$((DEPLOYMENTS * REPLICAS))
settled() {
  local n=$1 limit=$2 i running ready
  for i in $(seq 1 $((limit / 5))); do
    running=$(k "$n" get pods -n rehearsal --field-selector status.phase=Running -o name 2>/dev/null | wc -l)
    ready=$(k "$n" get deployments -n rehearsal -o json 2>/dev/null |
      jq '[.items[] | select((.status.readyReplicas // 0) == .spec.replicas and (.status.updatedReplicas // 0) == .spec.replicas)] | length')
    [ "$running" = "$want_pods" ] && [ "$ready" = "$DEPLOYMENTS" ] && { SETTLED="$running pods Running, $ready Deployments ready"; return 0; }
    sleep 5
  done
  SETTLED="$running of $want_pods pods Running, ${ready:-0} of $DEPLOYMENTS Deployments ready after ${limit}s"
  return 1
}

# counts N: objects per resource in storage, read straight from node N's API server.
counts() {
  local n=$1 r
  for r in /api/v1/nodes /api/v1/namespaces/rehearsal/pods /apis/apps/v1/namespaces/rehearsal/deployments \
    /apis/apps/v1/namespaces/rehearsal/replicasets /api/v1/namespaces/rehearsal/serviceaccounts \
    /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases; do
    printf '%s=%s ' "${r##*/}" "$(straight "$n" "$r?limit=0" | jq '.items | length')"
  done
}

# requests: resource requests per client and verb, summed over the three mvproxies,
# tab-separated (client, verb, count: a client's name may hold spaces,
# "kube-controller-manager (sa ...)").
requests() {
  local n
  for n in 1 2 3; do
    curl -s --max-time 5 "http://$(ip_of "$n"):7543/metrics" || true
  done | awk '/^mvproxy_client_requests_total\{/ {
      match($0, /client="[^"]*"/); c = substr($0, RSTART + 8, RLENGTH - 9)
      match($0, /verb="[^"]*"/); v = substr($0, RSTART + 6, RLENGTH - 7)
      s[c "\t" v] += $NF } END { for (k in s) print k "\t" s[k] }' | sort
}
# cost: per mvproxy, CPU seconds (user + system), RSS in KiB and the watches it holds open
# (mvproxy_client_watches_open, summed over its clients).
cost() {
  local n pid watches
  for n in 1 2 3; do
    pid=$(cp_pid "mvproxy-$n")
    watches=$(curl -s --max-time 5 "http://$(ip_of "$n"):7543/metrics" |
      awk '/^mvproxy_client_watches_open\{/ {s += $NF} END {print s + 0}')
    echo "mvproxy-$n $(awk '{print ($14 + $15) / 100}' "/proc/$pid/stat" 2>/dev/null || echo 0) $(cp_rss_kib "mvproxy-$n") $watches"
  done
}

# ---- up ---------------------------------------------------------------------------------------

t0=$(date +%s)
cp_start_etcd
for n in 1 2 3; do cp_start_apiserver "apiserver-$n" "${release[$n]}" "$(ip_of "$n")"; done
for n in 1 2 3; do cp_wait_ready "apiserver-$n" "$(ip_of "$n")" 240; done
for n in 1 2 3; do start_mvproxy "$n"; done
for n in 1 2 3; do start_controllers "$n"; done
start_kwok
cp_kubeconfig "$OUT/admin.kubeconfig" "https://$(ip_of 1):7443"
# The three mvproxies' admin listeners (/metrics) as a Prometheus file_sd list: the
# observability pack's Prometheus and dashboards show the rehearsal when it scrapes these
# (deploy/prometheus/targets/mvproxy.yml has the same shape; a Prometheus on the host network).
{
  echo "- targets:"
  for n in 1 2 3; do echo "    - $(ip_of "$n"):7543"; done
  echo "  labels: {rehearsal: \"$OLD-to-$NEW\"}"
} >"$OUT/prometheus-targets.yml"
log "control plane up in $(( $(date +%s) - t0 ))s: 3 x $OLD; kubeconfig $OUT/admin.kubeconfig"

make_nodes | k 1 apply -f - >/dev/null
k 1 create namespace rehearsal >/dev/null
# The namespace's default ServiceAccount comes from the controller-manager.
for i in $(seq 1 60); do k 1 get serviceaccount default -n rehearsal >/dev/null 2>&1 && break; sleep 1; done
make_deployments | k 1 apply -f - >/dev/null
t1=$(date +%s)
if settled 1 600; then r=PASS; else r=FAIL; fi
check "workload scheduled and running on $OLD" $r "$SETTLED on $NODES KWOK nodes, in $(( $(date +%s) - t1 ))s"

before_counts=$(counts 1)
requests >"$OUT/requests-0-before.txt"
cost >"$OUT/cost-0.txt"
tc0=$(date +%s)

if [ "$roll" = 1 ]; then
  phase=0
  for n in 1 2 3; do
    phase=$((n))
    log "node $n: $OLD -> $NEW"
    tp=$(date +%s)
    stop_node "$n"
    release[$n]=$NEW
    start_apiserver "$n" || check "node $n's API server $NEW ready" FAIL "see logs/apiserver-$n-$NEW.log"
    start_controllers "$n"
    # Halfway, real work across the skew: a Deployment scaled up (the ReplicaSet controller and
    # the scheduler of whichever release leads, through mvproxy).
    if [ "$n" = 2 ]; then
      k 1 scale deployment web-0 -n rehearsal --replicas $((REPLICAS + REPLICAS / 10)) >/dev/null
      want_pods=$((want_pods + REPLICAS / 10))
    fi
    sleep "$SETTLE_SECONDS"
    requests >"$OUT/requests-$phase-node-$n.txt"
    cost >"$OUT/cost-$phase.txt"
    log "node $n upgraded in $(( $(date +%s) - tp ))s"
  done
  tc1=$(date +%s)
  t2=$(date +%s)
  if settled 1 600; then r=PASS; else r=FAIL; fi
  check "after the upgrade every pod Running and every Deployment at its count" $r "$SETTLED ($want_pods pods wanted), settled $(( $(date +%s) - t2 ))s after the last node"
  # Counts from each release before and after: nothing lost, nothing duplicated (the scaled
  # Deployment's extra pods aside: one ReplicaSet per Deployment, pods = the replicas wanted).
  after_counts=$(counts 3)
  b=${before_counts//pods=$((DEPLOYMENTS * REPLICAS))/pods=$want_pods}
  if [ "$b" = "$after_counts" ]; then r=PASS; else r=FAIL; fi
  check "no object lost or duplicated (counts per resource, $OLD before, $NEW after)" $r "before ($OLD): $before_counts; after ($NEW): $after_counts"
  for lease in kube-controller-manager kube-scheduler; do
    holder=$(straight 3 "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/$lease" | jq -r '.spec.holderIdentity // ""')
    trans=$(straight 3 "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/$lease" | jq -r '.spec.leaseTransitions // 0')
    if [ -n "$holder" ]; then r=PASS; else r=FAIL; fi
    check "$lease leader Lease held after the upgrade" $r "holder ${holder:-none}, $trans transitions over 3 restarts of each"
  done
  # A relist storm is a client listing again and again. client-go's informers of these
  # releases start with a streaming watch (WatchListClient: a watch with sendInitialEvents)
  # rather than a LIST, so a relist is a list or a watch: after the roll has settled, no client
  # may open more than 10 + a quarter of the watches it held before (watches are renewed every
  # 5 to 10 minutes in steady state).
  requests >"$OUT/requests-4-settled.txt"
  sleep 30
  requests >"$OUT/requests-5-after.txt"
  per_client() { awk -F'\t' '$2 == "list" || $2 == "watch" {n[$1] += $3} END {for (c in n) print c "\t" n[c]}' "$1" | sort; }
  watches_before() { awk -F'\t' '$2 == "watch" {print $1 "\t" $3}' "$OUT/requests-0-before.txt" | sort; }
  storm=$(join -t $'\t' <(per_client "$OUT/requests-4-settled.txt") <(per_client "$OUT/requests-5-after.txt") |
    join -t $'\t' -a 1 -e 0 -o 0,1.2,1.3,2.2 - <(watches_before) |
    awk -F'\t' '$3 - $2 > 10 + $4 / 4 {print $1 ": " $3 - $2}' | tr '\n' ' ')
  if [ -z "$storm" ] && [ -s "$OUT/requests-5-after.txt" ]; then r=PASS; else r=FAIL; fi
  check "no relist storm: no client lists or watches more than 10 + a quarter of its watches in the 30 s after the roll settled" $r \
    "${storm:-none over} (mvproxy_client_requests_total; requests-*.txt)"
  cost >"$OUT/cost-after.txt"

  # The report: LISTs per client, and mvproxy's cost, phase by phase.
  {
    echo "## Rehearsal: 3 nodes $OLD -> $NEW, $NODES KWOK nodes, $DEPLOYMENTS Deployments x $REPLICAS pods"
    echo
    echo "LIST / WATCH requests per client, summed over the three mvproxies, cumulative at the end of each phase:"
    echo
    echo "| client | before the roll | node 1 $NEW | node 2 $NEW | node 3 $NEW | settled | 30 s later |"
    echo "| --- | --- | --- | --- | --- | --- | --- |"
    cat "$OUT"/requests-*.txt | awk -F'\t' '$2 == "list" || $2 == "watch" {print $1}' | sort -u | while IFS= read -r c; do
      row="| $c"
      for f in 0-before 1-node-1 2-node-2 3-node-3 4-settled 5-after; do
        row+=" | $(awk -F'\t' -v c="$c" '$1 == c {n[$2] = $3} END {printf "%d / %d", n["list"], n["watch"]}' "$OUT/requests-$f.txt" 2>/dev/null)"
      done
      echo "$row |"
    done
    echo
    secs=$((tc1 - tc0))
    echo "mvproxy's cost over the roll ($secs s): CPU seconds per second, resident memory and watches held open, before and after:"
    echo
    echo "| proxy | CPU s/s during the roll | RSS before (MiB) | RSS after (MiB) | watches open before | watches open after |"
    echo "| --- | --- | --- | --- | --- | --- |"
    join <(sort "$OUT/cost-0.txt") <(sort "$OUT/cost-after.txt") |
      awk -v s="$secs" '{printf "| %s | %.3f | %.1f | %.1f | %d | %d |\n", $1, ($5 - $2) / s, $3 / 1024, $6 / 1024, $4, $7}'
    echo
    echo "Requests per second by client over the roll, summed over the three mvproxies (mvproxy_client_requests_total), busiest first:"
    echo
    echo "| client | requests/s | by verb |"
    echo "| --- | --- | --- |"
    # The difference per (client, verb) between the start and the end of the roll.
    awk -F'\t' -v s="$secs" 'FNR == NR {b[$1 "\t" $2] = $3; next}
      {d = $3 - b[$1 "\t" $2]; if (d > 0) {t[$1] += d; v[$1] = v[$1] sprintf("%s%s %.2f", (v[$1] == "" ? "" : ", "), $2, d / s)}}
      END {for (c in t) printf "%.2f\t| %s | %.2f | %s |\n", t[c] / s, c, t[c] / s, v[c]}' \
      "$OUT/requests-0-before.txt" "$OUT/requests-3-node-3.txt" | sort -t $'\t' -k1,1 -g -r | cut -f2-
  } >"$OUT/report.md"
  cat "$OUT/report.md" >&2
fi

failed=$(awk -F'\t' '$2 == "FAIL"' "$OUT/checks.tsv" | wc -l)
if [ "$hold" = 0 ]; then
  [ "$failed" -eq 0 ] || log "$failed checks failed (checks.tsv)"
  exit $((failed > 0))
fi
log "up; Ctrl-C stops it (kubeconfig $OUT/admin.kubeconfig)"
while :; do
  sleep 3600 &
  sleeper=$!
  wait "$sleeper" || true
done
