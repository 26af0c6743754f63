#!/usr/bin/env bash
# Conformance part "controllers": the harm a version skew does to the control plane's own
# controllers, measured side by side. An unmodified kube-controller-manager (only its
# garbage-collector and namespace controllers) runs against a mixed control plane of two real
# kube-apiserver releases on one etcd, in three set-ups:
#   none       no version-aware proxy: the controller-manager reaches the API servers straight;
#   upstream   upstream's Mixed Version Proxy on in both API servers (--peer-ca-file);
#   mvproxy    mvproxy in front of each API server, the controller-manager reaches mvproxy;
# in two directions:
#   d1  the controller-manager is OLD, the objects are of a resource only NEW serves
#       (NEW_ONLY_GVR: a group-resource OLD does not have at all);
#   d2  the controller-manager is NEW, the objects are of a version NEW dropped (OLD_ONLY_GVR);
# and three ways to reach the API (ACCESS):
#   own      its own node's server (kubeadm's layout);
#   tcp-rr   HAProxy, TCP round-robin over every server (TLS end to end);
#   http-rr  HAProxy, HTTP round-robin per request (TLS terminated, re-encrypted to the servers
#            with the admin client certificate), as some installations run.
# Per run it counts:
#   namespace deletion  a namespace holding OBJECTS objects of the GVR is deleted: gone or not,
#                       how long it took, its conditions, and objects left in storage after it
#                       is gone (orphans, read back through the release that serves them);
#   garbage collection  DEPENDENTS ConfigMaps owned by one object of the GVR: those deleted while
#                       the owner lives (wrongful deletions) and those left GC_SECONDS after the
#                       owner is deleted (leaks).
# Checks: zero orphans, wrongful deletions and leaks, and every namespace gone, through mvproxy;
# objects held by a finalizer pass only when mvproxy names the cause in /debug/clients
# (deletions_waiting: a finalizer only the other release's controllers remove;
# undecodable_objects: objects the controller-manager's release cannot read); the no-proxy and
# upstream rows are measurements. Report: $CONFORMANCE_OUT/controllers/harm.md and harm.tsv.
#
# env: CONTROLLERS_SETUPS (default "none upstream mvproxy"), CONTROLLERS_DIRECTIONS ("d1 d2"),
#      CONTROLLERS_ACCESS ("own tcp-rr http-rr"), every combination of the three; or
#      CONTROLLERS_RUNS, the runs themselves as SETUP:DIRECTION:ACCESS ("none:d1:own
#      mvproxy:d1:own"), in place of the three; OBJECTS (5), DEPENDENTS (10),
#      WRONGFUL_SECONDS (10), GC_SECONDS (30), NS_SECONDS (30)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=lib.sh
. "$here/lib.sh"
out="${CONFORMANCE_OUT:-$root/target/conformance}/controllers"
mkdir -p "$out"
[ "$(id -u)" -eq 0 ] || { record "runs as root" FAIL "a UTS namespace per API server needs root"; exit 1; }
conformance_pair

SETUPS=${CONTROLLERS_SETUPS:-none upstream mvproxy}
DIRECTIONS=${CONTROLLERS_DIRECTIONS:-d1 d2}
ACCESS=${CONTROLLERS_ACCESS:-own tcp-rr http-rr}
if [ -n "${CONTROLLERS_RUNS:-}" ]; then
  RUNS=$CONTROLLERS_RUNS
else
  RUNS=$(for s in $SETUPS; do for d in $DIRECTIONS; do for a in $ACCESS; do echo "$s:$d:$a"; done; done; done)
fi
for r in $RUNS; do
  IFS=: read -r s d a <<<"$r"
  case " none upstream mvproxy " in *" $s "*) ;; *) bad=1 ;; esac
  case " d1 d2 " in *" $d "*) ;; *) bad=1 ;; esac
  case " own tcp-rr http-rr " in *" $a "*) ;; *) bad=1 ;; esac
  if [ -n "${bad:-}" ]; then
    record "controllers runs" FAIL "CONTROLLERS_RUNS: '$r' is not SETUP:DIRECTION:ACCESS with SETUP none, upstream or mvproxy, DIRECTION d1 or d2, ACCESS own, tcp-rr or http-rr"
    exit 1
  fi
done
OBJECTS=${OBJECTS:-5}
DEPENDENTS=${DEPENDENTS:-10}
WRONGFUL_SECONDS=${WRONGFUL_SECONDS:-10}
GC_SECONDS=${GC_SECONDS:-30}
NS_SECONDS=${NS_SECONDS:-30}
# The GVRs of the skew, per pair: a group-resource only NEW has, and a version NEW dropped
# (proxy/core/src/target/catalog/1.N-all.json); NEW_VERSION_OF_OLD_ONLY, the version NEW serves
# of OLD_ONLY_GVR's group-resource, through which NEW's controllers read those objects.
case $CONFORMANCE_PAIR in
  1.36.3:1.37.2) NEW_ONLY_GVR=scheduling.k8s.io/v1alpha3/compositepodgroups/CompositePodGroup
                 OLD_ONLY_GVR=scheduling.k8s.io/v1alpha2/podgroups/PodGroup NEW_VERSION_OF_OLD_ONLY=v1beta1 ;;
  1.35.4:1.36.3) NEW_ONLY_GVR=scheduling.k8s.io/v1alpha2/podgroups/PodGroup
                 OLD_ONLY_GVR=scheduling.k8s.io/v1alpha1/workloads/Workload NEW_VERSION_OF_OLD_ONLY=v1alpha2 ;;
esac

MVPROXY=${MVPROXY:-$root/target/release/mvproxy}
if [ -z "${CONFORMANCE_NETNS:-}" ]; then
  if [ "$MVPROXY" = "$root/target/release/mvproxy" ]; then
    echo "building mvproxy (release) ..." >&2
    (cd "$root" && nice -n 10 cargo build --release --locked -p mvproxy -q)
  fi
  "$root/scripts/control-plane/build.sh" "${COMPONENTS[@]}" >/dev/null
  if ! command -v haproxy >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
      apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends haproxy >&2 || true
    fi
  fi
  command -v haproxy >/dev/null || { record "haproxy installed" FAIL "the load-balancer set-ups need HAProxy (Debian: apt-get install haproxy)"; exit 1; }
  exec unshare --net -- env CONFORMANCE_NETNS=1 "$0" "$@"
fi
ip link set lo up
A_IP=192.0.2.2 B_IP=192.0.2.3
MA_IP=127.0.0.2 MB_IP=127.0.0.3 LB_IP=127.0.0.4
for ip in $A_IP $B_IP; do ip addr add "$ip/32" dev lo; done

CP_DIR=$(mktemp -d /tmp/mvproxy-controllers.XXXXXX)
export CP_DIR
# shellcheck source=../control-plane/lib.sh
. "$root/scripts/control-plane/lib.sh"
cleanup() {
  cp_cleanup
  rm -rf "$out/logs"
  cp -r "$CP_DIR/logs" "$out/" 2>/dev/null || true
  rm -rf "$CP_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cp_init "${COMPONENTS[@]}"
cp_pki
pki="$CP_DIR/pki"
cat "$pki/apiserver.crt" "$pki/apiserver.key" >"$pki/lb.pem"
cat "$pki/admin.crt" "$pki/admin.key" >"$pki/admin.pem"
kcm_bin() { local var="KUBE_CONTROLLER_MANAGER_V$(echo "$1" | tr . _)"; echo "${!var:?no kube-controller-manager $1 built}"; }

# ---- helpers --------------------------------------------------------------------------------

# api IP:PORT METHOD PATH [BODY]: as the admin user; prints the body, then the status code on
# a line of its own.
api() {
  local addr=$1 method=$2 path=$3 body=${4:-} type=application/json
  [ "$method" = PATCH ] && type=application/merge-patch+json
  curl -sS --max-time 15 -A mvproxy-conformance --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    -X "$method" -H "Content-Type: $type" ${body:+--data-binary "$body"} \
    -w '\n%{http_code}' "https://$addr$path" 2>/dev/null || printf '\n000'
}
code_of() { tail -1; }
body_of() { sed '$d'; }
# gvr_path GVR NAMESPACE: the collection path of GVR (group/version/resource/Kind) in NAMESPACE.
gvr_path() { local g v r; IFS=/ read -r g v r _ <<<"$1"; echo "/apis/$g/$v/namespaces/$2/$r"; }
gvr_kind() { echo "${1##*/}"; }
gvr_gv() { local g v; IFS=/ read -r g v _ <<<"$1"; echo "$g/$v"; }
manifest() { # GVR NAMESPACE NAME
  local kind
  kind=$(gvr_kind "$1")
  case $kind in
    PodGroup) printf '{"apiVersion":"%s","kind":"PodGroup","metadata":{"name":"%s","namespace":"%s"},"spec":{"schedulingPolicy":{"basic":{}}}}' "$(gvr_gv "$1")" "$3" "$2" ;;
    CompositePodGroup) printf '{"apiVersion":"%s","kind":"CompositePodGroup","metadata":{"name":"%s","namespace":"%s"},"spec":{"workloadRef":{"workloadName":"w","templateName":"t"},"schedulingPolicy":{"basic":{}}}}' "$(gvr_gv "$1")" "$3" "$2" ;;
    Workload) printf '{"apiVersion":"%s","kind":"Workload","metadata":{"name":"%s","namespace":"%s"},"spec":{"podGroups":[{"name":"g","policy":{"basic":{}}}]}}' "$(gvr_gv "$1")" "$3" "$2" ;;
  esac
}
count_items() { jq -r '.items | length' 2>/dev/null || echo "?"; }

mvp_start() { # NAME IP LOCAL_IP [args...]
  local name=$1 ip=$2 local_ip=$3
  shift 3
  "$MVPROXY" serve --listen "$ip:7443" --admin-listen "$ip:7543" \
    --local "https://$local_ip:$CP_PORT" --local-ca-file "$pki/ca.crt" --peer-ca-file "$pki/ca.crt" \
    --tls-cert-file "$pki/apiserver.crt" --tls-key-file "$pki/apiserver.key" \
    --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
    --identity front-proxy --client-ca-file "$pki/ca.crt" \
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --refresh-interval-seconds 5 "$@" >>"$CP_DIR/logs/$name.log" 2>&1 &
  _cp_record "$name" $!
}
mvp_ready() { cp_wait_mvproxy "$1:7543"; } # IP

# lb_start MODE BACKEND...: HAProxy on $LB_IP:6443, round-robin over BACKENDs (IP:PORT).
lb_start() {
  local mode=$1 i=0 b
  shift
  {
    echo "global"
    echo "  maxconn 2000"
    echo "defaults"
    echo "  timeout connect 5s"
    echo "  timeout client 1h"
    echo "  timeout server 1h"
    echo "  timeout tunnel 1h"
    if [ "$mode" = tcp-rr ]; then
      echo "  mode tcp"
      echo "frontend fe"
      echo "  bind $LB_IP:$CP_PORT"
      echo "  default_backend be"
      echo "backend be"
      echo "  balance roundrobin"
      for b in "$@"; do i=$((i + 1)); echo "  server s$i $b"; done
    else
      echo "  mode http"
      echo "frontend fe"
      echo "  bind $LB_IP:$CP_PORT ssl crt $pki/lb.pem alpn h2,http/1.1"
      echo "  default_backend be"
      echo "backend be"
      echo "  balance roundrobin"
      for b in "$@"; do
        i=$((i + 1))
        echo "  server s$i $b ssl verify required ca-file $pki/ca.crt crt $pki/admin.pem"
      done
    fi
  } >"$CP_DIR/haproxy.cfg"
  haproxy -f "$CP_DIR/haproxy.cfg" -db >>"$CP_DIR/logs/haproxy.log" 2>&1 &
  _cp_record haproxy $!
  local n
  for n in $(seq 1 40); do
    (exec 3<>"/dev/tcp/$LB_IP/$CP_PORT") 2>/dev/null && return 0
    sleep 0.25
  done
  return 1
}

# kcm_start RELEASE SERVER_URL: kube-controller-manager of RELEASE, as the admin user, with
# the controllers this part measures (garbage collector, namespace) and, from 1.36 on, the one
# that removes the finalizer 1.36 and later stamp on PodGroups (podgroup-protection-controller,
# behind the GenericWorkload gate: the feature gates match the API servers'; 1.35 has no such
# controller and refuses to start when asked for it). No leader election: one runs at a time.
kcm_start() {
  local release=$1 url=$2 controllers=garbagecollector,namespace minor=${1#1.}
  ((${minor%%.*} < 36)) || controllers+=,podgroup-protection-controller
  cp_kubeconfig "$CP_DIR/kcm.kc" "$url"
  "$(kcm_bin "$release")" --kubeconfig "$CP_DIR/kcm.kc" --controllers "$controllers" \
    --feature-gates AllAlpha=true,AllBeta=true --leader-elect=false --secure-port 0 --concurrent-gc-syncs 5 --v 2 \
    >"$CP_DIR/logs/kcm-$RUN.log" 2>&1 &
  _cp_record kcm $!
}
# kcm_synced: the garbage collector's graph is built (its monitors have synced).
kcm_synced() {
  local i
  for i in $(seq 1 120); do
    grep -q -E 'all resource monitors have synced|synced garbage collector' "$CP_DIR/logs/kcm-$RUN.log" 2>/dev/null && return 0
    kill -0 "$(cp_pid kcm)" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}

# ---- one run --------------------------------------------------------------------------------

printf 'setup\tdirection\taccess\tcontroller_manager\tgvr\tns_gone\tns_seconds\tns_conditions\torphans\torphan_finalizers\twrongful\tleaks\tnote\n' >"$out/harm.tsv"

# run SETUP DIRECTION ACCESS: one measurement; appends a row to harm.tsv.
run() {
  local setup=$1 dir=$2 access=$3 gvr release serving url ns gns i owner uid
  RUN="$setup-$dir-$access"
  if [ "$dir" = d1 ]; then gvr=$NEW_ONLY_GVR release=$OLD serving="$B_IP:$CP_PORT" own_ip=$A_IP own_mp=$MA_IP
  else gvr=$OLD_ONLY_GVR release=$NEW serving="$A_IP:$CP_PORT" own_ip=$B_IP own_mp=$MB_IP; fi
  ns="h-$RUN" gns="g-$RUN"
  # The objects, made through the release that serves them.
  for n in "$ns" "$gns"; do
    api "$serving" POST /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$n\"}}" >/dev/null
  done
  for i in $(seq 1 "$OBJECTS"); do
    api "$serving" POST "$(gvr_path "$gvr" "$ns")" "$(manifest "$gvr" "$ns" "o$i")" >"$CP_DIR/create.out"
    [ "$(code_of <"$CP_DIR/create.out")" = 201 ] || { cp_log "create $gvr in $ns: $(cat "$CP_DIR/create.out")"; }
  done
  api "$serving" POST "$(gvr_path "$gvr" "$gns")" "$(manifest "$gvr" "$gns" owner)" >"$CP_DIR/owner.out"
  uid=$(body_of <"$CP_DIR/owner.out" | jq -r '.metadata.uid // empty')
  made=$(api "$serving" GET "$(gvr_path "$gvr" "$ns")" | body_of | count_items)
  if [ -z "$uid" ] || [ "$made" != "$OBJECTS" ]; then
    record "$RUN: the objects of $gvr created" FAIL "$made of $OBJECTS in $ns; owner: $(head -c 300 "$CP_DIR/owner.out")"
    return 0
  fi
  for i in $(seq 1 "$DEPENDENTS"); do
    api "$serving" POST "/api/v1/namespaces/$gns/configmaps" \
      "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"d$i\",\"ownerReferences\":[{\"apiVersion\":\"$(gvr_gv "$gvr")\",\"kind\":\"$(gvr_kind "$gvr")\",\"name\":\"owner\",\"uid\":\"$uid\"}]}}" >/dev/null
  done

  case $setup:$access in
    mvproxy:own) url="https://$own_mp:7443" ;;
    *:own) url="https://$own_ip:$CP_PORT" ;;
    mvproxy:*) lb_start "$access" "$MA_IP:7443" "$MB_IP:7443"; url="https://$LB_IP:$CP_PORT" ;;
    *) lb_start "$access" "$A_IP:$CP_PORT" "$B_IP:$CP_PORT"; url="https://$LB_IP:$CP_PORT" ;;
  esac
  kcm_start "$release" "$url"
  local note=""
  if ! kcm_synced; then
    # A controller-manager that is not running measures nothing: the run fails, naming why.
    if ! kill -0 "$(cp_pid kcm)" 2>/dev/null; then
      record "$RUN: kube-controller-manager $release runs" FAIL \
        "it exited: $(grep -m1 -E '^[EF][0-9]{4}' "$CP_DIR/logs/kcm-$RUN.log" | cut -c1-300)"
      cp_stop haproxy
      return 0
    fi
    note="the garbage collector did not report its monitors synced in 60 s; "
  fi
  sleep "$WRONGFUL_SECONDS"
  local left wrongful
  left=$(api "$serving" GET "/api/v1/namespaces/$gns/configmaps" | body_of | count_items)
  wrongful=$((DEPENDENTS - left))

  # Delete the namespace and the owner (background propagation: the collector deletes the
  # dependents), through the release that serves the GVR.
  local t0 gone="no" secs="-" conds leaks orphans ofin
  t0=$(date +%s)
  api "$serving" DELETE "/api/v1/namespaces/$ns" >/dev/null
  api "$serving" DELETE "$(gvr_path "$gvr" "$gns")/owner" '{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}' >/dev/null
  local limit=$((NS_SECONDS > GC_SECONDS ? NS_SECONDS : GC_SECONDS)) ns_done="" gc_left
  for i in $(seq 1 $((limit * 2))); do
    if [ -z "$ns_done" ] && [ "$(api "$serving" GET "/api/v1/namespaces/$ns" | code_of)" = 404 ]; then
      ns_done=1 gone=yes secs=$(( $(date +%s) - t0 ))
    fi
    gc_left=$(api "$serving" GET "/api/v1/namespaces/$gns/configmaps" | body_of | count_items)
    [ -n "$ns_done" ] && [ "$gc_left" = 0 ] && break
    sleep 0.5
  done
  conds=$(api "$serving" GET "/api/v1/namespaces/$ns" | body_of |
    jq -r '[.status.conditions[]? | select(.status == "True") | .type] | join(",")' 2>/dev/null || true)
  [ "$gone" = yes ] && conds="-"
  leaks=$(api "$serving" GET "/api/v1/namespaces/$gns/configmaps" | body_of | count_items)
  # An owner still in storage (held by a finalizer) has not been deleted yet: its dependents
  # are not leaked, they wait with it.
  api "$serving" GET "$(gvr_path "$gvr" "$gns")/owner" >"$CP_DIR/owner-left.out"
  if [ "$(code_of <"$CP_DIR/owner-left.out")" = 200 ]; then
    leaks="held($(body_of <"$CP_DIR/owner-left.out" | jq -r '.metadata.finalizers // [] | join(",")'))"
  fi
  api "$serving" GET "$(gvr_path "$gvr" "$ns")" | body_of >"$CP_DIR/left.json"
  orphans=$(count_items <"$CP_DIR/left.json")
  ofin=$(jq -r '[.items[]?.metadata.finalizers[]?] | unique | join(",")' "$CP_DIR/left.json" 2>/dev/null || true)
  [ "$gone" = no ] && [ "$orphans" != 0 ] && note+="objects still in the namespace (it is Terminating); "
  [ "$gone" = yes ] && [ "$orphans" != 0 ] && note+="orphans: the namespace is gone, its objects are not; "
  # Why objects are held: the controller-manager's release cannot read what the other stored
  # (checked through that release's own server), or mvproxy names a finalizer only the other
  # release's controllers remove (/debug/clients, deletions_waiting).
  if [ "$dir" = d2 ] && { [ "$gone" = no ] || [ "${leaks#held}" != "$leaks" ]; }; then
    local g v r
    IFS=/ read -r g v r _ <<<"$gvr"
    if api "$own_ip:$CP_PORT" GET "/apis/$g/$NEW_VERSION_OF_OLD_ONLY/namespaces/$gns/$r" | grep -q 'not decodable'; then
      note+="undecodable: $release cannot decode the $(gvr_gv "$gvr") objects $OLD stored (no kind registered for that version); "
    fi
  fi
  if [ "$setup" = mvproxy ]; then
    # The controllers' informers open streaming watches, which a server that cannot decode
    # the objects leaves waiting rather than answering 500: what an operator runs during the
    # rehearsal (a list, as kubectl and client-go's protobuf clients send it) through the
    # controller-manager's mvproxy gets the 500 that mvproxy reads.
    if [ "$dir" = d2 ] && [ "$gone" = no ]; then
      local g2 v2 r2
      IFS=/ read -r g2 v2 r2 _ <<<"$gvr"
      for accept in application/json application/vnd.kubernetes.protobuf; do
        for path in "$r2" "$r2/o1"; do
          curl -s --max-time 10 -o /dev/null --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
            -H "Accept: $accept" "https://$own_mp:7443/apis/$g2/$NEW_VERSION_OF_OLD_ONLY/namespaces/$ns/$path" || true
        done
      done
    fi
    curl -s --max-time 5 "http://$own_mp:7543/debug/clients" >"$out/debug-clients-$RUN.json" || true
    if [ -n "$ofin" ] && jq -e --arg f "${ofin%%,*}" '[.deletions_waiting[]? | select(.finalizer == $f)] | length > 0' \
      "$out/debug-clients-$RUN.json" >/dev/null 2>&1; then
      note+="named by mvproxy: deletions_waiting in /debug/clients; "
    fi
    if jq -e '[.undecodable_objects[]?] | length > 0' "$out/debug-clients-$RUN.json" >/dev/null 2>&1; then
      what=$(jq -r '.undecodable_objects[0] | "\(.stored_group)/\(.stored_version) \(.kind // "") unreadable by \(.server) \(.server_release // "")"' "$out/debug-clients-$RUN.json" 2>/dev/null || echo "?")
      note+="named by mvproxy: undecodable_objects in /debug/clients ($what); "
    fi
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$setup" "$dir" "$access" "$release" "${gvr%/*}" \
    "$gone" "$secs" "${conds:--}" "$orphans" "${ofin:--}" "$wrongful" "$leaks" "${note:--}" >>"$out/harm.tsv"
  cp_log "$RUN: ns gone=$gone (${secs}s) conditions=${conds:--} orphans=$orphans (${ofin:--}) wrongful=$wrongful leaks=$leaks"

  if [ "$setup" = mvproxy ]; then
    curl -s --max-time 5 "http://$own_mp:7543/metrics" | grep -E '^mvproxy_(deletions_waiting|skew_requests)_total' >"$out/metrics-$RUN.txt" || true
  fi
  cp_stop kcm
  cp_stop haproxy
  # What is left is cleared through the serving release, finalizers and all, so the next run
  # starts clean.
  for n in "$ns" "$gns"; do
    api "$serving" GET "$(gvr_path "$gvr" "$n")" | body_of | jq -r '.items[]?.metadata.name' 2>/dev/null |
      while read -r o; do
        api "$serving" PATCH "$(gvr_path "$gvr" "$n")/$o" '{"metadata":{"finalizers":null}}' >/dev/null
        api "$serving" DELETE "$(gvr_path "$gvr" "$n")/$o" >/dev/null
      done
    api "$serving" DELETE "/api/v1/namespaces/$n" >/dev/null
  done
}

# ---- control plane 1: no peer proxy in the API servers; mvproxy in front for its rows -------

t0=$(date +%s)
cp_start_etcd
cp_start_apiserver apiserver-a "$OLD" "$A_IP"
cp_start_apiserver apiserver-b "$NEW" "$B_IP"
cp_wait_ready apiserver-a "$A_IP" 180
cp_wait_ready apiserver-b "$B_IP" 180
record "control plane starts" PASS "A $(cp_curl $A_IP /version | jq -r .gitVersion), B $(cp_curl $B_IP /version | jq -r .gitVersion), ready in $(( $(date +%s) - t0 ))s"
mvp_start mvproxy-a "$MA_IP" "$A_IP" --server-id apiserver-a --peer "apiserver-b=https://$MB_IP:7443"
mvp_start mvproxy-b "$MB_IP" "$B_IP" --server-id apiserver-b --peer "apiserver-a=https://$MA_IP:7443"
mvp_ready "$MA_IP" && mvp_ready "$MB_IP" || record "mvproxy A' and B' ready" FAIL "see logs/mvproxy-*.log"

for r in $RUNS; do
  IFS=: read -r setup dir access <<<"$r"
  [ "$setup" = upstream ] || run "$setup" "$dir" "$access"
done

# ---- control plane 2: upstream's Mixed Version Proxy on in both API servers -----------------

if [[ " $(echo $RUNS) " == *" upstream:"* ]]; then
  cp_stop mvproxy-a
  cp_stop mvproxy-b
  cp_stop apiserver-a
  cp_stop apiserver-b
  cp_start_apiserver apiserver-a "$OLD" "$A_IP" mvp
  cp_start_apiserver apiserver-b "$NEW" "$B_IP" mvp
  cp_wait_ready apiserver-a "$A_IP" 180
  cp_wait_ready apiserver-b "$B_IP" 180
  # Each server must have found the other (its identity Lease) before it can proxy to it.
  sleep 10
  for r in $RUNS; do
    IFS=: read -r setup dir access <<<"$r"
    [ "$setup" != upstream ] || run upstream "$dir" "$access"
  done
fi

# ---- the table and the checks ---------------------------------------------------------------

python3 - "$out/harm.tsv" "$OLD" "$NEW" >"$out/harm.md" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
old, new = sys.argv[2], sys.argv[3]
print(f"| set-up | controller-manager | objects of | reaches the API | namespace gone | in | conditions while Terminating | left in storage | wrongful deletions | leaked dependents |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    left = r["orphans"] + (f" ({r['orphan_finalizers']})" if r["orphan_finalizers"] != "-" else "")
    print(f"| {r['setup']} | {r['controller_manager']} | {r['gvr']} | {r['access']} | {r['ns_gone']} | {r['ns_seconds']} s | {r['ns_conditions']} | {left} | {r['wrongful']} | {r['leaks']} |")
PY
cat "$out/harm.md" >&2

harmed=$(awk -F'\t' 'NR > 1 && $1 == "none" && ($6 == "no" || $9 != 0 || $11 != 0 || $12 != "0")' "$out/harm.tsv" | wc -l)
none_rows=$(awk -F'\t' 'NR > 1 && $1 == "none"' "$out/harm.tsv" | wc -l)
if [ "$none_rows" -gt 0 ]; then
  check "harm shown without a version-aware proxy" "$harmed of $none_rows runs with a namespace left Terminating, orphans, wrongful deletions or leaks (harm.md)" test "$harmed" -gt 0
fi
while IFS=$'\t' read -r setup dir access release gvr gone secs conds orphans ofin wrongful leaks note; do
  detail="$release controller-manager, $gvr, $access: namespace gone=$gone in ${secs}s, left in storage $orphans${ofin:+ ($ofin)}, wrongful $wrongful, leaks $leaks"
  if [ "$setup" = mvproxy ]; then
    # Objects held by a finalizer pass only with their cause named: a release that cannot read
    # what the other stored, or mvproxy's deletions_waiting.
    ok=1
    [ "$wrongful" = 0 ] || ok=0
    if [ "$gone" = yes ] && [ "$leaks" = 0 ]; then [ "$orphans" = 0 ] || ok=0
    elif [ "$ofin" != - ] || [ "${leaks#held}" != "$leaks" ]; then
      # Through mvproxy the cause must be named by mvproxy itself (/debug/clients).
      case $note in
        *"named by mvproxy"*) detail+="; held, not lost: $note" ;;
        *) ok=0; detail+="; held, and mvproxy named no cause: $note" ;;
      esac
      [ "$leaks" = 0 ] || [ "${leaks#held}" != "$leaks" ] || ok=0
    else ok=0; fi
    [ "$ok" = 1 ] && r=PASS || r=FAIL
    record "through mvproxy ($dir, $access): no orphan, wrongful deletion or leak" "$r" "$detail"
  else
    record "$setup ($dir, $access), measured" PASS "$detail"
  fi
done < <(tail -n +2 "$out/harm.tsv")
