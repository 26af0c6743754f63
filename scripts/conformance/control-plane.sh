#!/usr/bin/env bash
# Conformance part "control-plane": mvproxy (release build of this checkout) in front of real,
# unmodified kube-apiservers of two releases sharing one etcd (scripts/control-plane/), each
# mvproxy the other's peer, over TLS with the real certificates. The pair is
# CONFORMANCE_PAIR=OLD:NEW, 1.36.3:1.37.2 (on etcd 3.7.0) by default, or 1.35.4:1.36.3 (on etcd
# 3.6.16); each pair names the skew resource its checks use (SKEW_NEW_V, SKEW_OLD_V below).
#
# Control plane 1 (upstream's Mixed Version Proxy off, so whatever crosses releases is mvproxy's
# doing): node A = OLD on 192.0.2.2:6443, node B = NEW on 192.0.2.3:6443, mvproxy A' on
# 127.0.0.2:7443 and B' on 127.0.0.3:7443 (static peers, front-proxy identity), all in a
# network namespace of the part's own.
#   kubectl api-resources (installed kubectl and an older release) through either proxy;
#   create/get/list/watch/delete of a resource only the other release serves; a watch across
#   the peer hop; front-proxy identity with RBAC (also across the hop, spoofing refused);
#   watches across a restart of A', of B' and of the API server B, no event lost (issue 13
#   §5); --peer-source endpointslices and leases; which clients used GVRs of the skew
#   (/debug/clients and mvproxy_skew_requests_total); admin endpoints over TLS delegated to the
#   real TokenReview and SubjectAccessReview (issue 13 §2); then the rolling upgrade
#   OLD -> NEW under load via A', B'.
# Control plane 2 (upstream's Mixed Version Proxy on in both): the same rolling upgrade straight
# to the API servers; halfway (A = NEW, B = OLD) --peer-source leases and mvproxy's merged
# /apis against the NEW server's own peer-aggregated /apis.
#
# Reports in $CONFORMANCE_OUT/control-plane/: skew.txt, upgrade.md (the per-phase tables),
# apis-diff.txt, memory.txt. Everything runs in the part's own network namespace (see below);
# every process is stopped by PID.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=lib.sh
. "$here/lib.sh"
out="${CONFORMANCE_OUT:-$root/target/conformance}/control-plane"
mkdir -p "$out"
[ "$(id -u)" -eq 0 ] || { record "runs as root" FAIL "a UTS namespace per API server needs root"; exit 1; }

conformance_pair

# The part runs in a network namespace of its own (unshare --net). There the API servers
# listen on TEST-NET-1 addresses (192.0.2.2, .3: RFC 5737, documentation only) put on the
# namespace's own loopback device: kube-apiserver refuses 127.0.0.0/8 in the default/kubernetes
# endpoints it writes, and accepts these, so --peer-source endpointslices meets the real slice.
# Nothing can leave the machine (the namespace has no other device) or collide with anything
# outside it. What may need the network (cargo, the Go builds) runs first, outside.
# MVPROXY: the binary to test (default: a release build of this checkout, built here).
MVPROXY=${MVPROXY:-$root/target/release/mvproxy}
if [ -z "${CONFORMANCE_NETNS:-}" ]; then
  if [ "$MVPROXY" = "$root/target/release/mvproxy" ]; then
    echo "building mvproxy (release) ..." >&2
    (cd "$root" && nice -n 10 cargo build --release --locked -p mvproxy -q)
  fi
  "$root/scripts/control-plane/build.sh" "${COMPONENTS[@]}" >/dev/null
  # The official Python client (PyPI `kubernetes`, pinned), in a venv cached like the Go builds.
  pyk="${XDG_CACHE_HOME:-$HOME/.cache}/mvproxy/python-kubernetes-31.0.0"
  if [ ! -x "$pyk/bin/python" ] || ! "$pyk/bin/python" -c 'import kubernetes' 2>/dev/null; then
    rm -rf "$pyk" && python3 -m venv "$pyk" && "$pyk/bin/pip" install -q kubernetes==31.0.0 >&2
  fi
  exec unshare --net -- env CONFORMANCE_NETNS=1 "$0" "$@"
fi
ip link set lo up
ip addr add 192.0.2.2/32 dev lo
ip addr add 192.0.2.3/32 dev lo

CP_DIR=$(mktemp -d /tmp/mvproxy-conformance.XXXXXX)
export CP_DIR
# shellcheck source=../control-plane/lib.sh
. "$root/scripts/control-plane/lib.sh"
loader_pid=""
cleanup() {
  [ -n "$loader_pid" ] && kill -TERM "$loader_pid" 2>/dev/null && wait "$loader_pid" 2>/dev/null
  cp_cleanup
  cp -r "$CP_DIR/logs" "$out/" 2>/dev/null || true
  rm -rf "$CP_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PHASE_SECONDS=${PHASE_SECONDS:-15}
LOAD_RATE=${LOAD_RATE:-40}
# API servers A and B; mvproxy A' and B' (on loopback: their admin listeners are plain HTTP).
A_IP=192.0.2.2 B_IP=192.0.2.3
MA_IP=127.0.0.2 MB_IP=127.0.0.3
V2='application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList'
pki="$CP_DIR/pki"
kubectl_new=$(command -v kubectl)
kubectl_old="$(dirname "$(readlink -f "$kubectl_new")")/kubectl.1.30"
[ -x "$kubectl_old" ] || kubectl_old=$(command -v kubectl.1.30 || true)


cp_init "${COMPONENTS[@]}"
cp_pki alice mvproxy-testers

# ---- helpers --------------------------------------------------------------------------------

# mvp_start NAME IP LOCAL_IP [args...]: mvproxy on IP:7443 (admin IP:7543) in front of LOCAL_IP:6443.
mvp_start() {
  local name=$1 ip=$2 local_ip=$3
  shift 3
  "$MVPROXY" serve --listen "$ip:${MVP_PORT:-7443}" --admin-listen "$ip:$((${MVP_PORT:-7443} + 100))" \
    --local "https://$local_ip:$CP_PORT" --local-ca-file "$pki/ca.crt" --peer-ca-file "$pki/ca.crt" \
    --tls-cert-file "$pki/apiserver.crt" --tls-key-file "$pki/apiserver.key" \
    --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
    --identity front-proxy --client-ca-file "$pki/ca.crt" \
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --refresh-interval-seconds 5 "$@" >>"$CP_DIR/logs/$name.log" 2>&1 &
  _cp_record "$name" $!
}
mvp_ready() { cp_wait_mvproxy "$1:$((${2:-7443} + 100))"; } # IP [PORT]: admin on PORT+100
# as USER URL_BASE PATH [curl args]: a request with USER's client certificate (admin, user, rogue-proxy).
as() {
  local user=$1 base=$2 path=$3
  shift 3
  curl -sS --max-time 15 --cacert "$pki/ca.crt" --cert "$pki/$user.crt" --key "$pki/$user.key" "$@" "$base$path"
}
kc() { # KUBECTL KUBECONFIG args...
  local bin=$1 cfg=$2
  shift 2
  "$bin" --kubeconfig "$cfg" --cache-dir "$CP_DIR/kcache.$RANDOM" --request-timeout 20s "$@"
}
# kw KUBECTL KUBECONFIG args... &: as kc, for a watch in the background (no client-side request
# timeout). It execs kubectl, so that $! is kubectl's own PID; never call it in the foreground.
kw() {
  local bin=$1 cfg=$2
  shift 2
  exec "$bin" --kubeconfig "$cfg" --cache-dir "$CP_DIR/kcache.$RANDOM" "$@"
}
user_kubeconfig() { # FILE SERVER USER
  cp_kubeconfig "$1" "$2"
  sed -i "s#$pki/admin#$pki/$3#g" "$1"
}

# The GVRs (group/version/resource, core group as "core") a server's nopeer discovery lists;
# the documents themselves are kept in $CP_DIR/docs-IP.json.
gvrs_of() { # IP
  { cp_curl "$1" /api -H "Accept: $V2;profile=nopeer"; echo; cp_curl "$1" /apis -H "Accept: $V2;profile=nopeer"; } |
    jq -s '{items: (map(.items) | add)}' >"$CP_DIR/docs-$1.json"
  jq -r '.items[] | (.metadata.name // "" | if . == "" then "core" else . end) as $g | .versions[] | .version as $v | .resources[] | "\($g)/\($v)/\(.resource)"' \
    "$CP_DIR/docs-$1.json" | sort -u
}

wait_for() { # SECONDS COMMAND...: until COMMAND succeeds
  local limit=$1 i
  shift
  for i in $(seq 1 $((limit * 2))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

# ---- control plane 1: upstream's proxy off, mvproxy in front ---------------------------------

t0=$(date +%s)
cp_start_etcd
cp_start_apiserver apiserver-a "$OLD" "$A_IP"
cp_start_apiserver apiserver-b "$NEW" "$B_IP"
cp_wait_ready apiserver-a "$A_IP" 180
cp_wait_ready apiserver-b "$B_IP" 180
record "control plane starts" PASS "etcd $( "$(cp_etcd_bin)" --version | awk '/etcd Version/ {print $3}'), A $(cp_curl $A_IP /version | jq -r .gitVersion), B $(cp_curl $B_IP /version | jq -r .gitVersion), ready in $(( $(date +%s) - t0 ))s"
sleep 5
{
  echo "resident memory after start (KiB):"
  for n in etcd apiserver-a apiserver-b; do echo "  $n $(cp_rss_kib $n)"; done
} >"$out/memory.txt"

gvrs_of "$A_IP" >"$out/gvrs-$OLD.txt"
gvrs_of "$B_IP" >"$out/gvrs-$NEW.txt"
comm -23 "$out/gvrs-$OLD.txt" "$out/gvrs-$NEW.txt" >"$out/only-$OLD.txt"
comm -13 "$out/gvrs-$OLD.txt" "$out/gvrs-$NEW.txt" >"$out/only-$NEW.txt"
{
  echo "GVRs served: $OLD $(wc -l <"$out/gvrs-$OLD.txt"), $NEW $(wc -l <"$out/gvrs-$NEW.txt") (--runtime-config=api/all=true)"
  echo "only $OLD ($(wc -l <"$out/only-$OLD.txt")):"; sed 's/^/  /' "$out/only-$OLD.txt"
  echo "only $NEW ($(wc -l <"$out/only-$NEW.txt")):"; sed 's/^/  /' "$out/only-$NEW.txt"
} >"$out/skew.txt"
check "releases differ (skew visible)" "only $OLD: $(wc -l <"$out/only-$OLD.txt") GVRs, only $NEW: $(wc -l <"$out/only-$NEW.txt") GVRs (skew.txt)" \
  test -s "$out/only-$NEW.txt"

mvp_start mvproxy-a "$MA_IP" "$A_IP" --server-id apiserver-a --peer "apiserver-b=https://$MB_IP:7443"
mvp_start mvproxy-b "$MB_IP" "$B_IP" --server-id apiserver-b --peer "apiserver-a=https://$MA_IP:7443"
check "mvproxy A' and B' ready" "in front of $OLD and $NEW" mvp_ready "$MA_IP"
mvp_ready "$MB_IP" || record "mvproxy B' ready" FAIL "see logs/mvproxy-b.log"

for n in direct-a:$A_IP:$CP_PORT direct-b:$B_IP:$CP_PORT via-a:$MA_IP:7443 via-b:$MB_IP:7443; do
  IFS=: read -r name ip port <<<"$n"
  cp_kubeconfig "$CP_DIR/$name.kc" "https://$ip:$port"
done
user_kubeconfig "$CP_DIR/alice-via-a.kc" "https://$MA_IP:7443" user

# ---- kubectl api-resources: the union of both releases through either proxy -----------------

api_resources() { kc "$1" "$2" api-resources -o name 2>>"$CP_DIR/logs/kubectl.err" | sort -u; }
sort -u <(api_resources "$kubectl_new" "$CP_DIR/direct-a.kc") <(api_resources "$kubectl_new" "$CP_DIR/direct-b.kc") >"$out/api-resources-union.txt"
for k in "$kubectl_new" "$kubectl_old"; do
  kv=$("$k" version --client -o json 2>/dev/null | jq -r .clientVersion.gitVersion)
  for via in a b; do
    api_resources "$k" "$CP_DIR/via-$via.kc" >"$CP_DIR/ar.txt"
    d=$(diff "$out/api-resources-union.txt" "$CP_DIR/ar.txt" | grep '^[<>]' | tr '\n' ' ' || true)
    check "kubectl $kv api-resources via mvproxy $via = union" "$(wc -l <"$CP_DIR/ar.txt") resources${d:+; differs: $d}" test -z "$d"
  done
done

# ---- legacy discovery, one group-version at a time: the union through either proxy ----------
# kubectl 1.27 asks for aggregated discovery v2beta1, which 1.35 and later refuse (406), so it
# reads legacy discovery: /apis, then every /apis/{g}/{v} (client-go's ServerGroupsAndResources
# on the legacy path). Upstream answers /apis/{g}/{v} from the local server only
# (docs/routing.md); mvproxy merges it where both releases serve the group-version.
kubectl_legacy="$(dirname "$(readlink -f "$kubectl_new")")/kubectl.1.27"
[ -x "$kubectl_legacy" ] || kubectl_legacy=$(command -v kubectl.1.27 || true)
if [ -n "$kubectl_legacy" ]; then
  for via in a b; do
    api_resources "$kubectl_legacy" "$CP_DIR/via-$via.kc" >"$CP_DIR/ar.txt"
    d=$(diff "$out/api-resources-union.txt" "$CP_DIR/ar.txt" | grep '^[<>]' | tr '\n' ' ' || true)
    check "kubectl 1.27 (legacy discovery) api-resources via mvproxy $via = union" "$(wc -l <"$CP_DIR/ar.txt") resources${d:+; differs: $d}" test -z "$d"
  done
  # The same client straight to A: what it misses without a version-aware proxy (measured;
  # it exits non-zero there, "unable to retrieve the complete list of server APIs", as A's
  # legacy /apis lists B's group-versions, fixtures/discovery/README.md).
  api_resources "$kubectl_legacy" "$CP_DIR/direct-a.kc" >"$CP_DIR/ar.txt" || true
  missing=$(comm -23 "$out/api-resources-union.txt" "$CP_DIR/ar.txt" | tr '\n' ' ')
  record "kubectl 1.27 api-resources straight to A $OLD (measured, not a check)" PASS "misses $(comm -23 "$out/api-resources-union.txt" "$CP_DIR/ar.txt" | wc -l) of the union: ${missing:-none}"
else
  record "kubectl 1.27 (legacy discovery)" FAIL "kubectl.1.27 is not installed beside kubectl"
fi

# Every group-version both servers serve: /apis/{g}/{v} through each proxy lists the union of
# the two servers' own lists (storageVersionHash aside: aggregated discovery has none).
per_gv() {
  python3 - "$CP_DIR/pki" "$A_IP:$CP_PORT" "$B_IP:$CP_PORT" "$MA_IP:7443" "$MB_IP:7443" >"$out/per-group-version.txt" <<'PY'
import json, ssl, sys, urllib.request
pki, a, b, via_a, via_b = sys.argv[1:]
ctx = ssl.create_default_context(cafile=f"{pki}/ca.crt")
ctx.load_cert_chain(f"{pki}/admin.crt", f"{pki}/admin.key")
def get(addr, path, accept="application/json"):
    req = urllib.request.Request(f"https://{addr}{path}", headers={"Accept": accept, "User-Agent": "mvproxy-conformance"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError:
        return None
def gvs(addr):
    out = {"v1": "/api/v1"}
    for g in get(addr, "/apis")["groups"]:
        for v in g["versions"]:
            out[v["groupVersion"]] = f"/apis/{v['groupVersion']}"
    return out
def names(doc):
    return sorted(r["name"] for r in doc["resources"])
# A server's legacy /apis lists the other's group-versions too (built from the APIService
# objects in the shared etcd), which it answers 404: shared means both answer with a list.
paths = {**gvs(a), **gvs(b)}
shared = []
for gv, path in sorted(paths.items()):
    own_a, own_b = get(a, path), get(b, path)
    if own_a is not None and own_b is not None:
        shared.append((gv, path, own_a, own_b))
bad = merged = 0
for gv, path, own_a, own_b in shared:
    union = sorted(set(names(own_a)) | set(names(own_b)))
    for proxy in (via_a, via_b):
        got = get(proxy, path)
        if got is None or names(got) != union:
            bad += 1
            print(f"DIFFERS {gv} via {proxy}: {got and names(got)} != {union}")
    if union != names(own_a) or union != names(own_b):
        merged += 1
        print(f"merged {gv}: {len(union)} resources (A {len(names(own_a))}, B {len(names(own_b))})")
    # profile=nopeer: each proxy's local server's own list
    own = get(via_a, path, "application/json;profile=nopeer")
    if own is None or names(own) != names(own_a):
        bad += 1
        print(f"DIFFERS nopeer {gv} via A: {own and names(own)}")
print(f"{len(shared)} shared group-versions, {merged} with resources only one release serves, {bad} wrong answers")
sys.exit(1 if bad or not merged else 0)
PY
}
if per_gv; then r=PASS; else r=FAIL; fi
record "/apis/{g}/{v} via either proxy = union of both servers' lists, every shared group-version" $r \
  "$(tail -1 "$out/per-group-version.txt") ($(grep -m2 DIFFERS "$out/per-group-version.txt" | tr '\n' ' ')per-group-version.txt)"

# The official Python client's discovery (legacy only: /apis, then every /apis/{g}/{v})
# through either proxy finds the GVRs aggregated discovery lists there.
pyk="${XDG_CACHE_HOME:-$HOME/.cache}/mvproxy/python-kubernetes-31.0.0"
for via in a b; do
  mkdir -p "$CP_DIR/pyk-$via"
  detail=$("$pyk/bin/python" "$here/python_discovery.py" "$CP_DIR/via-$via.kc" "$CP_DIR/pyk-$via" 2>&1 | tail -1) && r=PASS || r=FAIL
  record "Python client 31.0.0 (legacy discovery) via mvproxy $via = aggregated discovery" "$r" "$detail"
done

# ---- a resource only the other release serves: create/get/list/watch/delete ----------------

WL_NEW=workloads.$SKEW_NEW_V.scheduling.k8s.io
WL_OLD=workloads.$SKEW_OLD_V.scheduling.k8s.io
WLN=/apis/scheduling.k8s.io/$SKEW_NEW_V/namespaces/default/workloads
WLO=/apis/scheduling.k8s.io/$SKEW_OLD_V/namespaces/default/workloads
grep -qx "scheduling.k8s.io/$SKEW_NEW_V/workloads" "$out/only-$NEW.txt" || record "skew resource" FAIL "scheduling.k8s.io/$SKEW_NEW_V/workloads is not $NEW-only any more; pick another"
# wl VERSION NAME: a Workload of that version (v1alpha1 named its groups podGroups/policy; from
# v1alpha2 on they are podGroupTemplates/schedulingPolicy).
wl() {
  if [ "$1" = v1alpha1 ]; then
    printf '{"apiVersion":"scheduling.k8s.io/v1alpha1","kind":"Workload","metadata":{"name":"%s","namespace":"default"},"spec":{"podGroups":[{"name":"g","policy":{"basic":{}}}]}}' "$2"
  else
    printf '{"apiVersion":"scheduling.k8s.io/%s","kind":"Workload","metadata":{"name":"%s","namespace":"default"},"spec":{"podGroupTemplates":[{"name":"g","schedulingPolicy":{"basic":{}}}]}}' "$1" "$2"
  fi
}
wl_new() { wl "$SKEW_NEW_V" "$1"; }
wl_old() { wl "$SKEW_OLD_V" "$1"; }
crud() { # KUBECONFIG RESOURCE MANIFEST_FN NAME OWNER_IP OWNER_PATH
  local cfg=$1 res=$2 fn=$3 name=$4 owner=$5 opath=$6
  $fn "$name" | kc "$kubectl_new" "$cfg" create -f - >/dev/null &&
    kc "$kubectl_new" "$cfg" get "$res" "$name" -n default -o name | grep -q "$name" &&
    kc "$kubectl_new" "$cfg" get "$res" -n default -o name | grep -q "$name" &&
    [ "$(cp_curl "$owner" "$opath/$name" -o /dev/null -w '%{http_code}')" = 200 ] &&
    kc "$kubectl_new" "$cfg" delete "$res" "$name" -n default >/dev/null &&
    ! kc "$kubectl_new" "$cfg" get "$res" "$name" -n default >/dev/null 2>&1
}
check "create/get/list/delete $NEW-only workloads ($SKEW_NEW_V) via mvproxy A ($OLD)" "object read back straight from B ($NEW)" \
  crud "$CP_DIR/via-a.kc" "$WL_NEW" wl_new cp-new-1 "$B_IP" "$WLN"
kc "$kubectl_new" "$CP_DIR/direct-b.kc" delete "$WL_NEW" cp-new-1 -n default --ignore-not-found >/dev/null 2>&1 || true

# A watch through mvproxy A, across the peer hop to B: events as they happen.
watch_hop() {
  local log="$CP_DIR/watch.out" wpid i t1 ok=1
  kw "$kubectl_new" "$CP_DIR/via-a.kc" get "$WL_NEW" -n default --watch-only --output-watch-events >"$log" 2>&1 &
  wpid=$!
  # kubectl lists (for the resourceVersion) before it watches: an object created before that
  # list is not an event. Give it time to be watching, even on a loaded machine.
  sleep 8
  wl_new cp-watch-1 | kc "$kubectl_new" "$CP_DIR/direct-b.kc" create -f - >/dev/null
  t1=$(date +%s%N)
  wait_for 10 grep -q "ADDED.*cp-watch-1" "$log" || ok=0
  WATCH_MS=$(( ($(date +%s%N) - t1) / 1000000 ))
  kc "$kubectl_new" "$CP_DIR/direct-b.kc" delete "$WL_NEW" cp-watch-1 -n default >/dev/null
  wait_for 10 grep -q "DELETED.*cp-watch-1" "$log" || ok=0
  kill "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null || true
  [ "$ok" = 1 ]
}
WATCH_MS=?
check "watch via mvproxy A across the peer hop" "ADDED then DELETED of an object created straight on B, each within 10 s" watch_hop
record "watch latency (measured)" PASS "ADDED seen ${WATCH_MS} ms after kubectl create returned"

# ---- OpenAPI across the skew: kubectl explain and apply through either proxy ----------------
# shellcheck source=openapi.sh
. "$here/openapi.sh"

# ---- no watch event lost across a restart (issue 13 §5) -------------------------------------
# kubectl get -w through mvproxy while a component on the watch's path restarts: the peer's
# mvproxy B' (watch across the hop), the API server B serving it, the client's own mvproxy A'
# and the API server A behind it (a locally served watch; the writes while A is down go to B).
# kubectl must see the stream end (exit, not hang); the client then resumes from the last
# resourceVersion it saw (kubectl get --raw ...watch=1&resourceVersion=RV), or, answered 410
# Expired (a restarted API server's watch cache starts at its own list), relists and watches
# from the list's resourceVersion, as client-go's reflector does. What it collected must equal the writes made over the interval (their
# names and resourceVersions from the create responses), while down included: each once,
# none missing, nothing else.
rw_manifest() { # KIND NAME LABEL
  case $1 in
    workload) wl_new "$2" | jq -c --arg l "$3" '.metadata.labels = {rw: $l}' ;;
    configmap) jq -nc --arg n "$2" --arg l "$3" '{apiVersion: "v1", kind: "ConfigMap", metadata: {name: $n, namespace: "default", labels: {rw: $l}}, data: {k: $n}}' ;;
  esac
}
rw_write() { # KIND NAME LABEL KUBECONFIG: creates it, appends "NAME RV" to the history
  local rv
  rv=$(rw_manifest "$1" "$2" "$3" | kc "$kubectl_new" "$4" create -f - -o jsonpath='{.metadata.resourceVersion}') &&
    echo "$2 $rv" >>"$RW_DIR/history"
}
rw_events() { # FILE: "TYPE NAME RV" per event of a watch stream (kubectl -o json or raw lines)
  jq -r 'select(.type != null) | "\(.type) \(.object.metadata.name // .object.message) \(.object.metadata.resourceVersion // .object.code)"' "$1" 2>/dev/null || true
}
rw_seen() { rw_events "$1" | grep -q "^ADDED $2 "; } # FILE NAME
# restart_watch LABEL KIND PATH VIA_KC WRITER_KC STOP_FN START_FN WRITE_WHILE_DOWN(0|1)
restart_watch() {
  local label=$1 kind=$2 path=$3 via=$4 writer=$5 stop_fn=$6 start_fn=$7 while_down=$8
  local res sel wpid t0 rv code i relist=""
  res=$([ "$kind" = workload ] && echo "$WL_NEW" || echo configmaps)
  sel="labelSelector=rw%3D$label"
  RW_DIR="$CP_DIR/rw-$label"
  mkdir -p "$RW_DIR"
  : >"$RW_DIR/history"
  RW_DETAIL="setup failed"
  kw "$kubectl_new" "$via" get "$res" -n default -l "rw=$label" -w --output-watch-events -o json >"$RW_DIR/seg1" 2>"$RW_DIR/seg1.err" &
  wpid=$!
  rw_write "$kind" "$label-1" "$label" "$writer" && wait_for 20 rw_seen "$RW_DIR/seg1" "$label-1" &&
    rw_write "$kind" "$label-2" "$label" "$writer" && wait_for 20 rw_seen "$RW_DIR/seg1" "$label-2" ||
    { kill "$wpid" 2>/dev/null; RW_DETAIL="events before the restart not seen (rw-$label/)"; return 1; }
  t0=$(date +%s%N)
  $stop_fn
  # The stream must end: kubectl exits once its watch does.
  wait_for 30 sh -c "! kill -0 $wpid" || { kill "$wpid" 2>/dev/null; RW_DETAIL="kubectl get -w still hanging 30 s after the stop"; return 1; }
  RW_END_MS=$(( ($(date +%s%N) - t0) / 1000000 ))
  wait "$wpid" 2>/dev/null || true
  # A clean end: no ERROR event (client-go reports a reset stream as one).
  if rw_events "$RW_DIR/seg1" | grep -q '^ERROR'; then
    RW_DETAIL="the stream did not end cleanly: $(jq -r 'select(.type == "ERROR") | .object.message' "$RW_DIR/seg1" | head -1)"
    return 1
  fi
  if [ "$while_down" = 1 ]; then
    rw_write "$kind" "$label-3" "$label" "$writer" && rw_write "$kind" "$label-4" "$label" "$writer" || { RW_DETAIL="write while down failed"; return 1; }
  fi
  $start_fn || { RW_DETAIL="restart failed"; return 1; }
  [ "$while_down" = 1 ] || { rw_write "$kind" "$label-3" "$label" "$writer" && rw_write "$kind" "$label-4" "$label" "$writer"; } ||
    { RW_DETAIL="write after the restart failed"; return 1; }
  # The route answers again (a peer that was down is up once the next refresh has seen it).
  wait_for 60 kc "$kubectl_new" "$via" get --raw "$path?$sel&limit=1" || { RW_DETAIL="no answer through mvproxy after the restart"; return 1; }
  rv=$(rw_events "$RW_DIR/seg1" | grep -v '^ERROR' | tail -1 | cut -d' ' -f3)
  kw "$kubectl_new" "$via" get --raw "$path?$sel&watch=1&resourceVersion=$rv" >"$RW_DIR/seg2" 2>"$RW_DIR/seg2.err" &
  wpid=$!
  if wait_for 20 sh -c "grep -q . '$RW_DIR/seg2'" && rw_events "$RW_DIR/seg2" | head -1 | grep -q '^ERROR .* 410$'; then
    # 410 Expired: relist, then watch from the list's resourceVersion.
    kill "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null || true
    relist=1
    kc "$kubectl_new" "$via" get --raw "$path?$sel" >"$RW_DIR/list" || { RW_DETAIL="relist failed"; return 1; }
    rv=$(jq -r .metadata.resourceVersion "$RW_DIR/list")
    kw "$kubectl_new" "$via" get --raw "$path?$sel&watch=1&resourceVersion=$rv" >"$RW_DIR/seg2" 2>"$RW_DIR/seg2.err" &
    wpid=$!
  fi
  rw_write "$kind" "$label-5" "$label" "$writer" && wait_for 20 rw_seen "$RW_DIR/seg2" "$label-5" ||
    { kill "$wpid" 2>/dev/null; RW_DETAIL="event after the resume not seen (rw-$label/)"; return 1; }
  kill "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null || true
  # Collected: the events of both watches (and the relisted objects), as "NAME RV".
  {
    rw_events "$RW_DIR/seg1" | awk '{print $2, $3}' >"$RW_DIR/events"
    [ -z "$relist" ] || jq -r '.items[] | "\(.metadata.name) \(.metadata.resourceVersion)"' "$RW_DIR/list" >"$RW_DIR/relisted"
    rw_events "$RW_DIR/seg2" | awk '{print $2, $3}' >>"$RW_DIR/events"
  }
  local d
  if [ -z "$relist" ]; then
    # Every event once: the two watches' events are the history exactly.
    d=$(diff <(sort "$RW_DIR/history") <(sort "$RW_DIR/events") | grep '^[<>]' | tr '\n' ' ' || true)
    RW_DETAIL="stream ended $RW_END_MS ms after the stop; resumed from resourceVersion, 5 writes (2 while down), $(wc -l <"$RW_DIR/events") events${d:+; differs (< history, > collected): $d}"
  else
    # Events never repeat; with the relisted objects they make up the history.
    d=$( { sort "$RW_DIR/events" | uniq -d | sed 's/^/duplicate /'; diff <(sort "$RW_DIR/history") <(sort -u "$RW_DIR/events" "$RW_DIR/relisted") | grep '^[<>]'; } | tr '\n' ' ' || true)
    RW_DETAIL="stream ended $RW_END_MS ms after the stop; resume answered 410 Expired, relisted $(wc -l <"$RW_DIR/relisted") objects, 5 writes, $(wc -l <"$RW_DIR/events") events${d:+; differs: $d}"
  fi
  [ -z "$d" ]
}
rw_check() { # NAME ARGS...: records RW_DETAIL
  local name=$1
  shift
  if restart_watch "$@"; then record "$name" PASS "$RW_DETAIL"; else record "$name" FAIL "$RW_DETAIL"; fi
  # Gone again: a workload left in etcd breaks the other release's lists of workloads (above).
  kc "$kubectl_new" "$5" delete "$([ "$2" = workload ] && echo "$WL_NEW" || echo configmaps)" -n default -l "rw=$1" >/dev/null 2>&1 || true
}
start_mvproxy_a() { mvp_start mvproxy-a "$MA_IP" "$A_IP" --server-id apiserver-a --peer "apiserver-b=https://$MB_IP:7443" && mvp_ready "$MA_IP"; }
start_mvproxy_b() { mvp_start mvproxy-b "$MB_IP" "$B_IP" --server-id apiserver-b --peer "apiserver-a=https://$MA_IP:7443" && mvp_ready "$MB_IP"; }
stop_mvproxy_a() { cp_stop mvproxy-a; }
stop_mvproxy_b() { cp_stop mvproxy-b; }
stop_apiserver_a() { cp_stop apiserver-a; }
start_apiserver_a() { cp_start_apiserver apiserver-a "$OLD" "$A_IP" && cp_wait_ready apiserver-a "$A_IP" 180; }
stop_apiserver_b() { cp_stop apiserver-b; }
start_apiserver_b() { cp_start_apiserver apiserver-b "$NEW" "$B_IP" && cp_wait_ready apiserver-b "$B_IP" 180; }
CM=/api/v1/namespaces/default/configmaps
rw_check "local watch survives a restart of the client's mvproxy A'" \
  rw-local-mvp configmap "$CM" "$CP_DIR/via-a.kc" "$CP_DIR/direct-a.kc" stop_mvproxy_a start_mvproxy_a 1
rw_check "local watch survives a restart of the API server A serving it" \
  rw-local-api configmap "$CM" "$CP_DIR/via-a.kc" "$CP_DIR/direct-b.kc" stop_apiserver_a start_apiserver_a 1
rw_check "watch across the hop survives a restart of the peer's mvproxy B'" \
  rw-peer-mvp workload "$WLN" "$CP_DIR/via-a.kc" "$CP_DIR/direct-b.kc" stop_mvproxy_b start_mvproxy_b 1
rw_check "watch across the hop survives a restart of the API server B serving it" \
  rw-peer-api workload "$WLN" "$CP_DIR/via-a.kc" "$CP_DIR/direct-b.kc" stop_apiserver_b start_apiserver_b 0

# The $OLD-only $SKEW_OLD_V workloads come last of the workload checks: an object A ($OLD) stores
# as $SKEW_OLD_V cannot be decoded by B ($NEW, no $SKEW_OLD_V in its scheme), and B's watch cache for
# workloads stalls on it: no watch event of any version reaches a watcher of B, straight or
# through mvproxy, until the cache gives up and reinitializes (seen live: ~30 s of 'failed to
# prepare current and previous objects: no kind "Workload" is registered for version
# "scheduling.k8s.io/v1alpha1"', then 'Terminating all watchers from cacher workloads'); lists
# wait 3 s for the stale cache. The watch checks above must not run in that window. And while
# such an object exists, the other release's lists of workloads fail (500 StorageReadError,
# "failed to read one or more workloads.scheduling.k8s.io from the storage"), so every check
# deletes what it created.
if grep -qx "scheduling.k8s.io/$SKEW_OLD_V/workloads" "$out/only-$OLD.txt"; then
  check "create/get/list/delete $OLD-only workloads ($SKEW_OLD_V) via mvproxy B ($NEW)" "object read back straight from A ($OLD)" \
    crud "$CP_DIR/via-b.kc" "$WL_OLD" wl_old cp-old-1 "$A_IP" "$WLO"
  kc "$kubectl_new" "$CP_DIR/direct-a.kc" delete "$WL_OLD" cp-old-1 -n default --ignore-not-found >/dev/null 2>&1 || true
  # The checks below list workloads on B: wait out its stalled watch cache (1.37 answers such a
  # list 429 "Too large resource version" until the cache has caught up).
  b_lists_workloads() { [ "$(cp_curl "$B_IP" "$WLN" -o /dev/null -w '%{http_code}')" = 200 ]; }
  t_stall=$(date +%s)
  if wait_for 120 b_lists_workloads; then
    record "B's watch cache of workloads back after the $OLD-only object (measured, not a check)" PASS "lists answered again $(( $(date +%s) - t_stall )) s after the delete"
  else
    record "B's watch cache of workloads back after the $OLD-only object" FAIL "B still refuses lists of workloads 120 s after the delete"
  fi
fi

# ---- upgrade readiness: which clients used what the skew takes away ----------------------------
# The kubectl requests above, judged from each server's /version: on mvproxy A (in front of
# $OLD) the $NEW-only workloads break on a rollback, on B (in front of $NEW) the $OLD-only ones
# break after the upgrade; /debug/clients and mvproxy_skew_requests_total agree.
readiness_seen() { # IP FIELD SIDE GVR
  local ip=$1 field=$2 side=$3 gvr=$4 g v r debug metric admin
  IFS=/ read -r g v r <<<"$gvr"
  admin="http://$ip:$((${MVP_PORT:-7443} + 100))"
  debug=$(curl -s "$admin/debug/clients" | jq -r --arg gvr "$gvr" --arg f "$field" \
    '[.clients[] | select(.program == "kubectl") | .[$f][] | select(.gvr == $gvr) | .requests] | add // 0')
  metric=$(curl -s "$admin/metrics" | awk -v sel="group=\"$g\",version=\"$v\",resource=\"$r\",side=\"$side\"" \
    'index($0, "mvproxy_skew_requests_total{client=\"kubectl") == 1 && index($0, sel) {n += $NF} END {print n + 0}')
  READINESS_DETAIL="kubectl: $debug requests in /debug/clients $field, $metric in mvproxy_skew_requests_total{side=\"$side\"}"
  [ "$debug" -gt 0 ] && [ "$debug" = "$metric" ]
}
readiness_check() { # NAME IP FIELD SIDE GVR
  local name=$1
  shift
  READINESS_DETAIL="/debug/clients unreadable"
  if readiness_seen "$@"; then record "$name" PASS "$READINESS_DETAIL"; else record "$name" FAIL "$READINESS_DETAIL"; fi
}
readiness_check "readiness: kubectl's $NEW-only workloads via mvproxy A break on a rollback" \
  "$MA_IP" breaks_on_rollback new_only "scheduling.k8s.io/$SKEW_NEW_V/workloads"
if grep -qx "scheduling.k8s.io/$SKEW_OLD_V/workloads" "$out/only-$OLD.txt"; then
  readiness_check "readiness: kubectl's $OLD-only workloads via mvproxy B break after the upgrade" \
    "$MB_IP" breaks_after_upgrade old_only "scheduling.k8s.io/$SKEW_OLD_V/workloads"
fi

# ---- front-proxy identity end to end, with RBAC ----------------------------------------------

kc "$kubectl_new" "$CP_DIR/direct-b.kc" apply -f - >/dev/null <<'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: cp-testers-list-workloads, namespace: default}
rules: [{apiGroups: [scheduling.k8s.io], resources: [workloads], verbs: [list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: cp-testers-list-workloads, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cp-testers-list-workloads}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: mvproxy-testers}]
YAML
sleep 2
code_and_user() { # expected-code expected-user-in-message curl-args...
  local want=$1 who=$2 body code
  shift 2
  body=$("$@" -w '\n%{http_code}') || return 1
  code=$(tail -1 <<<"$body")
  [ "$code" = "$want" ] || { echo "got $code: $(head -c 300 <<<"$body")" >&2; return 1; }
  [ -z "$who" ] || grep -q "User \\\\\"$who\\\\\"" <<<"$body" || { echo "no User \"$who\" in: $(head -c 300 <<<"$body")" >&2; return 1; }
}
check "alice (group mvproxy-testers) lists workloads via A, across the hop: 200" "RBAC grants the group list on workloads; A ($OLD) does not serve $SKEW_NEW_V" \
  code_and_user 200 "" as user "https://$MA_IP:7443" "$WLN"
check "alice lists workloads via B (local): 200" "" code_and_user 200 "" as user "https://$MB_IP:7443" "$WLN"
check "alice creates a workload via A, across the hop: 403 naming alice" "" \
  code_and_user 403 alice as user "https://$MA_IP:7443" "$WLN" -X POST -H 'Content-Type: application/json' --data "$(wl_new cp-denied)"
check "alice lists configmaps via A (local): 403 naming alice" "" code_and_user 403 alice as user "https://$MA_IP:7443" /api/v1/namespaces/default/configmaps
check "alice's own X-Remote-User/Group (admin, system:masters) are ignored" "403 still names alice" \
  code_and_user 403 alice as user "https://$MA_IP:7443" /api/v1/namespaces/default/configmaps -H 'X-Remote-User: kubernetes-admin' -H 'X-Remote-Group: system:masters'
check "spoofed X-Remote-User across the hop is ignored" "workload create via A with admin headers: 403 naming alice" \
  code_and_user 403 alice as user "https://$MA_IP:7443" "$WLN" -X POST -H 'X-Remote-User: kubernetes-admin' -H 'X-Remote-Group: system:masters' -H 'Content-Type: application/json' --data "$(wl_new cp-denied)"
rogue() {
  local body
  body=$(as rogue-proxy "https://$MA_IP:7443" /api/v1/namespaces/default/configmaps -H 'X-Remote-User: kubernetes-admin' -H 'X-Remote-Group: system:masters' -w '\n%{http_code}') || return 0
  ! grep -q '^200$' <<<"$(tail -1 <<<"$body")" && ! grep -q kubernetes-admin <<<"$body"
}
check "a front-proxy-CA certificate with a CN not allowed cannot assert X-Remote-User" "not 200, not kubernetes-admin" rogue

# ---- peers from the cluster: --peer-source endpointslices -----------------------------------

# kube-apiserver's endpoint reconciler writes default/kubernetes (Endpoints and EndpointSlice)
# from each server's --advertise-address (192.0.2.2 and .3 here: it refuses loopback ones),
# one endpoint per server. mvproxy in front of A, with no --peer, takes B from that slice.
slice_lists_both() {
  "$kubectl_new" --kubeconfig "$CP_DIR/direct-a.kc" get endpointslices -n default \
    -l kubernetes.io/service-name=kubernetes -o json |
    jq -e --arg a "$A_IP" --arg b "$B_IP" '[.items[].endpoints[].addresses[]] | (index($a) != null and index($b) != null)'
}
check "default/kubernetes EndpointSlice lists both API servers" "$A_IP and $B_IP" wait_for 30 slice_lists_both
MVP_PORT=7444 mvp_start mvproxy-a-eps "$MA_IP" "$A_IP" --server-id apiserver-a --peer-source endpointslices --kubeconfig "$CP_DIR/direct-a.kc"
eps_check() {
  mvp_ready "$MA_IP" 7444 || return 1
  # The peer set arrives from the EndpointSlice list after start; its discovery after that.
  wait_for 30 sh -c "curl -s http://$MA_IP:7544/debug/discovery | jq -e --arg u '$B_IP:$CP_PORT' '[.servers[] | select(.local | not)] | length == 1 and (.[0].url | contains(\$u)) and .[0].up'" &&
    [ "$(as admin "https://$MA_IP:7444" "$WLN" -o /dev/null -w '%{http_code}')" = 200 ] &&
    curl -s "http://$MA_IP:7544/metrics" | grep 'mvproxy_rerouted_request_total{' | grep -q 'resource="workloads"'
}
check "--peer-source endpointslices: peer $B_IP:$CP_PORT from default/kubernetes, $SKEW_NEW_V routed to it" "no --peer; A itself skipped" eps_check
cp_stop mvproxy-a-eps

# ---- peers from the cluster: --peer-source leases (the identity Leases, their address annotation)

la=$(cp_lease_of "$A_IP" apiserver-a) lb=$(cp_lease_of "$A_IP" apiserver-b)
MVP_PORT=7445 mvp_start mvproxy-a-leases "$MA_IP" "$A_IP" --server-id "$la" --peer-source leases --kubeconfig "$CP_DIR/direct-a.kc"
leases_check() {
  mvp_ready "$MA_IP" 7445 || return 1
  wait_for 30 sh -c "curl -s http://$MA_IP:7545/debug/discovery | jq -e --arg id '$lb' '[.servers[] | select(.id == \$id and .up)] | length == 1'" || return 1
  [ "$(as admin "https://$MA_IP:7445" "$WLN" -o /dev/null -w '%{http_code}')" = 200 ] &&
    curl -s "http://$MA_IP:7545/metrics" | grep 'mvproxy_rerouted_request_total{' | grep -q 'resource="workloads"'
}
check "--peer-source leases: peer $lb from its identity Lease, $SKEW_NEW_V routed to it" "server id $la (A's lease); no --peer" leases_check
cp_stop mvproxy-a-leases

# ---- admin endpoints over TLS, delegated to the real API server (issue 13 §2) -----------------
# mvproxy in front of A with its admin listener over TLS: authentication by client certificate
# (the cluster CA) or bearer token (A's TokenReview), authorization by A's SubjectAccessReview
# for get on the path, as kube-controller-manager serves its /metrics. mvproxy reviews as the
# ServiceAccount kube-system/mvproxy (system:auth-delegator); scraper may get /metrics only;
# nobody is authenticated and allowed nothing.
kc "$kubectl_new" "$CP_DIR/direct-a.kc" apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: ServiceAccount
metadata: {name: mvproxy, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: mvproxy-auth-delegator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:auth-delegator"}
subjects: [{kind: ServiceAccount, name: mvproxy, namespace: kube-system}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: scraper, namespace: default}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: nobody, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: mvproxy-metrics-reader}
rules: [{nonResourceURLs: ["/metrics"], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: mvproxy-metrics-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: mvproxy-metrics-reader}
subjects: [{kind: ServiceAccount, name: scraper, namespace: default}]
YAML
sa_token() { kc "$kubectl_new" "$CP_DIR/direct-a.kc" create token "$2" -n "$1" --duration 1h; } # NS NAME
sa_token kube-system mvproxy >"$CP_DIR/mvproxy.token"
scraper_token=$(sa_token default scraper) scraper_token2=$(sa_token default scraper) nobody_token=$(sa_token default nobody)
ADMIN="https://$MA_IP:7546"
MVP_PORT=7446 mvp_start mvproxy-a-admin "$MA_IP" "$A_IP" --server-id apiserver-a --peer "apiserver-b=https://$MB_IP:7443" \
  --admin-tls-cert-file "$pki/apiserver.crt" --admin-tls-key-file "$pki/apiserver.key" --admin-client-ca-file "$pki/ca.crt" \
  --admin-auth-token-file "$CP_DIR/mvproxy.token" --admin-auth-cache-ttl-seconds 2
admin_get() { # PATH [curl args]: prints the status code (and keeps the body in $CP_DIR/admin.body)
  local path=$1
  shift
  curl -sS --max-time 15 --cacert "$pki/ca.crt" -o "$CP_DIR/admin.body" -D "$CP_DIR/admin.headers" -w '%{http_code}' "$@" "$ADMIN$path"
}
admin_is() { # WANT PATH [curl args]
  local want=$1 got
  shift
  got=$(admin_get "$@") || true
  [ "$got" = "$want" ] || { echo "admin $1: got $got, want $want: $(head -c 300 "$CP_DIR/admin.body")" >&2; return 1; }
}
bearer() { echo "Authorization: Bearer $1"; }
check "admin over TLS: /healthz anonymous: 200" "mvproxy's admin listener in front of A ($OLD)" wait_for 30 admin_is 200 /healthz
check "admin: /metrics without credentials: 401" "" admin_is 401 /metrics
check "admin: /metrics with a token A rejects: 401" "TokenReview says unauthenticated" admin_is 401 /metrics -H "$(bearer not-a-token)"
check "admin: /metrics as ServiceAccount scraper (ClusterRole: get /metrics): 200" "real TokenReview and SubjectAccessReview" \
  sh -c "[ \"\$(curl -sS --max-time 15 --cacert '$pki/ca.crt' -H 'Authorization: Bearer $scraper_token' '$ADMIN/metrics' | grep -c '^mvproxy_')\" -gt 0 ]"
check "admin: /debug/discovery as scraper: 403" "its ClusterRole allows /metrics only" admin_is 403 /debug/discovery -H "$(bearer "$scraper_token")"
check "admin: /metrics as ServiceAccount nobody: 403" "authenticated, no RBAC" admin_is 403 /metrics -H "$(bearer "$nobody_token")"
check "admin: /metrics with the admin client certificate (system:masters): 200" "--admin-client-ca-file" \
  admin_is 200 /metrics --cert "$pki/admin.crt" --key "$pki/admin.key"
check "admin: /metrics with alice's client certificate: 403" "no RBAC for /metrics" admin_is 403 /metrics --cert "$pki/user.crt" --key "$pki/user.key"
cp_stop apiserver-a
sleep 3 # the decisions cached above (2 s) have expired
down_503() { # TOKEN: 503 with Retry-After, never the metrics
  admin_is 503 /metrics -H "$(bearer "$1")" && grep -qi '^retry-after:' "$CP_DIR/admin.headers" && ! grep -q '^mvproxy_' "$CP_DIR/admin.body"
}
check "admin: API server down, a token seen before: 503 with Retry-After" "A stopped; no open door" down_503 "$scraper_token"
check "admin: API server down, a new token: 503 with Retry-After" "A stopped" down_503 "$scraper_token2"
check "admin: API server down, /healthz anonymous: 200" "" admin_is 200 /healthz
cp_start_apiserver apiserver-a "$OLD" "$A_IP"
cp_wait_ready apiserver-a "$A_IP" 180
check "admin: API server back, scraper's new token: 200" "" wait_for 30 admin_is 200 /metrics -H "$(bearer "$scraper_token2")"
cp_stop mvproxy-a-admin

# ---- the rolling upgrade OLD -> NEW under steady load --------------------------------------

# The load: GET list (limit=1) of a few GVRs every release serves and of every GVR only one
# release serves, each tagged with the releases that serve it.
python3 - "$out/gvrs-$OLD.txt" "$out/gvrs-$NEW.txt" "$OLD" "$NEW" "$CP_DIR/docs-$A_IP.json" "$CP_DIR/docs-$B_IP.json" >"$CP_DIR/load-gvrs.json" <<'PY'
import json, sys
old, new = (set(open(p).read().split()) for p in sys.argv[1:3])
vo, vn = sys.argv[3:5]
scope = {}
for p in sys.argv[5:7]:
    for g in json.load(open(p))["items"]:
        name = g.get("metadata", {}).get("name") or "core"
        for v in g.get("versions", []):
            for r in v.get("resources", []):
                scope[f"{name}/{v['version']}/{r['resource']}"] = r["scope"]
common = ["core/v1/pods", "core/v1/configmaps", "core/v1/namespaces", "apps/v1/deployments",
          "core/v1/componentstatuses",
          "coordination.k8s.io/v1/leases", "rbac.authorization.k8s.io/v1/roles"]
def path(gvr):
    g, v, r = gvr.split("/")
    base = "/api/v1" if g == "core" else f"/apis/{g}/{v}"
    return f"{base}/{r}" if scope.get(gvr) == "Cluster" else f"{base}/namespaces/default/{r}"
out = []
for gvr in common + sorted(old ^ new):
    out.append({"path": path(gvr), "gvr": gvr,
                "served_by": [v for v, s in ((vo, old), (vn, new)) if gvr in s]})
json.dump(out, sys.stdout)
PY

phase_file="$CP_DIR/phase"
phase() { echo "$*" >"$phase_file"; }
start_load() { # LABEL TARGET_URLS
  phase pause
  python3 "$here/load.py" --targets "$2" --phase-file "$phase_file" --gvrs "$CP_DIR/load-gvrs.json" \
    --rate "$LOAD_RATE" --ca "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    --json "$out/upgrade-$1.json" --label "$1" &
  loader_pid=$!
}
stop_load() {
  kill -TERM "$loader_pid" 2>/dev/null || true
  wait "$loader_pid" 2>/dev/null || true
  loader_pid=""
}
# restart NODE IP VERSION MVP: the node leaves the rotation, its API server restarts on VERSION.
restart_node() {
  local node=$1 ip=$2 version=$3 mvp=$4
  cp_stop "apiserver-$node"
  cp_start_apiserver "apiserver-$node" "$version" "$ip" "$mvp"
  cp_wait_ready "apiserver-$node" "$ip" 180
}
# upgrade LABEL TARGETS MVP [MIDWAY_HOOK]: from both on $OLD to both on $NEW, phase by phase.
upgrade() {
  local label=$1 targets=$2 mvp=$3 hook=${4:-}
  start_load "$label" "$targets"
  phase all-old "$OLD" "$OLD"; sleep "$PHASE_SECONDS"
  phase "node-1-restart" down "$OLD"; restart_node a "$A_IP" "$NEW" "$mvp"
  phase "node-1-upgraded" "$NEW" "$OLD"; sleep "$PHASE_SECONDS"
  if [ -n "$hook" ]; then phase pause; $hook; fi
  phase "node-2-restart" "$NEW" down; restart_node b "$B_IP" "$NEW" "$mvp"
  phase all-new "$NEW" "$NEW"; sleep "$PHASE_SECONDS"
  stop_load
}

# mvp_footprint NAME: "RSS KiB/open descriptors" of a running mvproxy.
mvp_footprint() { echo "$(cp_rss_kib "$1") KiB/$(ls "/proc/$(cp_pid "$1")/fd" 2>/dev/null | wc -l) fds"; }
# mvp_stop_clean NAME: SIGTERM, then its exit code (a hang past 30 s counts as a failure).
mvp_stop_clean() {
  local pid rc=0
  pid=$(cp_pid "$1")
  kill -TERM "$pid" 2>/dev/null || return 1
  timeout 30 tail --pid="$pid" -f /dev/null || { cp_stop "$1"; return 1; }
  wait "$pid" 2>/dev/null || rc=$?
  awk -v n="$1" '$1 != n' "$CP_DIR/pids" >"$CP_DIR/pids.tmp" && mv "$CP_DIR/pids.tmp" "$CP_DIR/pids"
  return "$rc"
}

# Through mvproxy: B goes back to $OLD first (both old), mvproxy A' and B' stay up throughout,
# while their real API servers restart under load (the chaos soak's stand-ins made real).
restart_node b "$B_IP" "$OLD" ""
sleep 6

# ---- before the upgrade: which clients will NEW break? (mvproxy readiness) -------------------
# A' and B' restart told the target, --target-release $TARGET (the catalog: what $TARGET serves
# with its default runtime config, and with every API on), with both API servers on $OLD. Five
# clients use a few GVRs each: kubectl of two releases (one client name, "kubectl"), a Python
# client with its own User-Agent, a DRA driver (curl, its own User-Agent) and curl with a
# ServiceAccount's token. Three GVRs matter:
#   scheduling.k8s.io/$SKEW_OLD_V/workloads: served by $OLD here because this control plane
#     turns every API on (--runtime-config=api/all=true); $NEW serves $SKEW_NEW_V instead, so
#     no $TARGET serves $SKEW_OLD_V, whatever its runtime config;
#   resource.k8s.io/v1alpha3/devicetaintrules: $TARGET serves it only with that group-version
#     on (breaks_unless_enabled, with its --runtime-config entry), and $OLD answers it with a
#     deprecation warning (deprecated);
#   v1/componentstatuses: every release serves it and warns "v1 ComponentStatus is deprecated
#     in v1.19+" (no release of removal named).
# The other GVRs are ones $TARGET serves by default. `mvproxy readiness` must name exactly these
# clients and GVRs; after the two rolling upgrades below, the GVRs that then got 404s straight
# from the API servers must be exactly those it said break (readiness-outcome.md).
for n in mvproxy-a mvproxy-b; do mvp_stop_clean "$n" || record "$n stops for the readiness restart" FAIL "see logs/$n.log"; done
mvp_start mvproxy-a "$MA_IP" "$A_IP" --server-id apiserver-a --peer "apiserver-b=https://$MB_IP:7443" --target-release "$TARGET"
mvp_start mvproxy-b "$MB_IP" "$B_IP" --server-id apiserver-b --peer "apiserver-a=https://$MA_IP:7443" --target-release "$TARGET"
mvp_ready "$MA_IP" && mvp_ready "$MB_IP" && wait_for 30 sh -c "curl -s http://$MA_IP:7543/debug/discovery | jq -e '[.servers[] | select(.up)] | length == 2'" ||
  record "mvproxy A' and B' with --target-release $TARGET ready" FAIL "see logs/mvproxy-a.log, logs/mvproxy-b.log"
kc "$kubectl_new" "$CP_DIR/direct-a.kc" apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: ServiceAccount
metadata: {name: auditor, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: auditor}
rules: [{apiGroups: [""], resources: [componentstatuses, configmaps], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: auditor}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: auditor}
subjects: [{kind: ServiceAccount, name: auditor, namespace: default}]
YAML
auditor_token=$(kc "$kubectl_new" "$CP_DIR/direct-a.kc" create token auditor -n default --duration 1h)
readiness_clients() {
  local ok=0
  # kubectl (older release) through A': the GVR $TARGET does not serve, and pods.
  kc "$kubectl_old" "$CP_DIR/via-a.kc" get "$WL_OLD" -n default >/dev/null 2>>"$CP_DIR/logs/kubectl.err" || ok=1
  kc "$kubectl_old" "$CP_DIR/via-a.kc" get pods -n default >/dev/null 2>>"$CP_DIR/logs/kubectl.err" || ok=1
  # kubectl (installed release) through B': configmaps, and the deprecated componentstatuses.
  kc "$kubectl_new" "$CP_DIR/via-b.kc" get configmaps -n default >/dev/null 2>>"$CP_DIR/logs/kubectl.err" || ok=1
  kc "$kubectl_new" "$CP_DIR/via-b.kc" get componentstatuses >/dev/null 2>>"$CP_DIR/logs/kubectl.err" || ok=1
  # A Python client with its own User-Agent, through both: deployments and the missing GVR.
  python3 - "$pki" "$MA_IP" "$MB_IP" "$WLO" <<'PY' || ok=1
import http.client, ssl, sys
pki, a, b, old_only = sys.argv[1:5]
ctx = ssl.create_default_context(cafile=f"{pki}/ca.crt")
ctx.load_cert_chain(f"{pki}/admin.crt", f"{pki}/admin.key")
for host, path in [(a, "/apis/apps/v1/namespaces/default/deployments"),
                   (b, old_only),
                   (a, old_only)]:
    c = http.client.HTTPSConnection(host, 7443, context=ctx, timeout=15)
    c.request("GET", path, headers={"User-Agent": "inventory-sync/2.1.0 (linux/amd64)",
                                    "Accept": "application/json"})
    r = c.getresponse()
    r.read()
    assert r.status == 200, (path, r.status)
PY
  # A DRA driver through A': resource.k8s.io/v1alpha3/devicetaintrules, which $TARGET serves
  # only with that group-version turned on (the catalog's every-API capture lists it).
  [ "$(as admin "https://$MA_IP:7443" /apis/resource.k8s.io/v1alpha3/devicetaintrules -A 'dra-driver/0.3.0' -o /dev/null -w '%{http_code}')" = 200 ] || ok=1
  # curl with the ServiceAccount's token (no client certificate) through A'.
  for path in /api/v1/componentstatuses /api/v1/namespaces/default/configmaps; do
    [ "$(curl -sS --max-time 15 --cacert "$pki/ca.crt" -H "Authorization: Bearer $auditor_token" -o /dev/null -w '%{http_code}' "https://$MA_IP:7443$path")" = 200 ] || ok=1
  done
  return "$ok"
}
check "readiness clients: kubectl $("$kubectl_old" version --client -o json 2>/dev/null | jq -r .clientVersion.gitVersion) and $("$kubectl_new" version --client -o json 2>/dev/null | jq -r .clientVersion.gitVersion), inventory-sync (Python), dra-driver and curl (ServiceAccount token)" \
  "every request answered 200 through A' and B', both API servers on $OLD" readiness_clients
set +e
"$MVPROXY" readiness --target "$TARGET" --proxy "http://$MA_IP:7543" --proxy "http://$MB_IP:7543" --output json >"$out/readiness-before.json" 2>"$CP_DIR/readiness.err"
readiness_rc=$?
"$MVPROXY" readiness --target "$TARGET" --proxy "http://$MA_IP:7543" --proxy "http://$MB_IP:7543" >"$out/readiness-before.txt" 2>>"$CP_DIR/readiness.err"
set -e
# (client, kind, GVR) as readiness reports them, core GVRs as core/v1/…
readiness_rows() {
  jq -r '.rows[] | "\(.client) \(.kind) \(.gvr | if (split("/") | length) == 2 then "core/" + . else . end)"' "$out/readiness-before.json" | LC_ALL=C sort
}
# kubectl names itself after its binary in its User-Agent (client-go's default takes
# os.Args[0]), so the two releases are two clients: kubectl and kubectl.1.30.
kold=$(basename "$kubectl_old") knew=$(basename "$kubectl_new")
LC_ALL=C sort >"$CP_DIR/readiness-want.txt" <<WANT
curl deprecated core/v1/componentstatuses
dra-driver breaks_unless_enabled resource.k8s.io/v1alpha3/devicetaintrules
dra-driver deprecated resource.k8s.io/v1alpha3/devicetaintrules
inventory-sync breaks_on_target scheduling.k8s.io/$SKEW_OLD_V/workloads
$kold breaks_on_target scheduling.k8s.io/$SKEW_OLD_V/workloads
$knew deprecated core/v1/componentstatuses
WANT
readiness_exact() {
  [ "$readiness_rc" = 1 ] && diff <(readiness_rows) "$CP_DIR/readiness-want.txt" >&2
}
check "mvproxy readiness --target $TARGET before the upgrade names exactly the clients and GVRs" \
  "exit $readiness_rc (want 1); $(readiness_rows | tr '\n' ';') (readiness-before.txt)" readiness_exact
fp_before="A' $(mvp_footprint mvproxy-a), B' $(mvp_footprint mvproxy-b)"
upgrade mvproxy "https://$MA_IP:7443,https://$MB_IP:7443" ""
fp_after="A' $(mvp_footprint mvproxy-a), B' $(mvp_footprint mvproxy-b)"
clean_exit=""
for n in mvproxy-a mvproxy-b; do
  mvp_stop_clean "$n" || clean_exit+="$n did not exit 0 on SIGTERM; "
done
panics=$(grep -l -i 'panicked' "$CP_DIR/logs/mvproxy-a.log" "$CP_DIR/logs/mvproxy-b.log" 2>/dev/null || true)
check "mvproxy A' and B' through the rolling upgrade: no panic, exit 0 on SIGTERM" \
  "${clean_exit}${panics:+panic in $panics; }before: $fp_before; after: $fp_after (measured)" \
  test -z "$clean_exit$panics"

# ---- control plane 2: upstream's Mixed Version Proxy on ---------------------------------------

cp_stop apiserver-a
cp_stop apiserver-b
cp_start_apiserver apiserver-a "$OLD" "$A_IP" mvp
cp_start_apiserver apiserver-b "$OLD" "$B_IP" mvp
cp_wait_ready apiserver-a "$A_IP" 180
cp_wait_ready apiserver-b "$B_IP" 180
sleep 5

midway() {
  # A = $NEW, B = $OLD, both with upstream's proxy. mvproxy in front of A with peers from the
  # identity leases, named as upstream names them, so the two merges have the same inputs.
  local la lb
  la=$(cp_lease_of "$A_IP" apiserver-a) lb=$(cp_lease_of "$A_IP" apiserver-b)
  MVP_PORT=7445 mvp_start mvproxy-a-leases "$MA_IP" "$A_IP" --server-id "$la" --peer-source leases --kubeconfig "$CP_DIR/direct-a.kc"
  local synced=1
  mvp_ready "$MA_IP" 7445 &&
    wait_for 30 sh -c "curl -s http://$MA_IP:7545/debug/discovery | jq -e --arg id '$lb' '[.servers[] | select(.id == \$id and .up)] | length == 1'" ||
    { synced=0; record "mvproxy with lease peers in front of upstream's proxy" FAIL "peer $lb not up (logs/mvproxy-a-leases.log)"; }
  # Upstream's $NEW peer-aggregated /apis, once it has fetched its peer (a $OLD-only GV listed).
  local gv
  gv=$(grep -m1 . "$out/only-$OLD.txt" | cut -d/ -f1,2)
  wait_for 60 sh -c "curl -s --cacert $pki/ca.crt --cert $pki/admin.crt --key $pki/admin.key -H 'Accept: $V2' https://$A_IP:$CP_PORT/apis | jq -e --arg gv '$gv' '[.items[] | .metadata.name as \$g | .versions[] | \"\(\$g)/\(.version)\"] | index(\$gv)'" ||
    record "upstream $NEW lists its peer's group-versions" FAIL "$gv never appeared in $A_IP's /apis"
  cp_curl "$A_IP" /apis -H "Accept: $V2" >"$out/apis-upstream-$NEW.json"
  as admin "https://$MA_IP:7445" /apis -H "Accept: $V2" >"$out/apis-mvproxy.json"
  # Compared only once mvproxy has read both servers (else it passes local's document through).
  check "merged /apis via mvproxy = upstream $NEW's peer-aggregated /apis (groups, versions, resources, order)" "see apis-diff.txt" \
    sh -c "[ $synced = 1 ] && python3 '$here/compare_apis.py' '$out/apis-mvproxy.json' '$out/apis-upstream-$NEW.json' '$out/apis-diff.txt'"
  cp_stop mvproxy-a-leases
}
upgrade upstream "https://$A_IP:$CP_PORT,https://$B_IP:$CP_PORT" mvp midway

# ---- report ----------------------------------------------------------------------------------

python3 - "$out/upgrade-mvproxy.json" "$out/upgrade-upstream.json" >"$out/upgrade.md" <<'PY'
import json, sys
print("| via | phase | sent | answered | false 404s | 503s | other errors | true 404s | p50 ms | p99 ms |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for p in sys.argv[1:]:
    d = json.load(open(p))
    via = "mvproxy" if d["label"] == "mvproxy" else "upstream MVP"
    for r in d["phases"]:
        if r["phase"] == "pause":
            continue
        print(f"| {via} | {r['phase']} | {r['sent']} | {r['answered']} | {r['false_404']} | {r['503']} | {r['other']} | {r['true_404']} | {r['p50_ms']} | {r['p99_ms']} |")
PY
cat "$out/upgrade.md" >&2
for label in mvproxy upstream; do
  f=$(jq '[.phases[] | select(.phase != "pause") | .false_404] | add' "$out/upgrade-$label.json")
  if [ "$label" = mvproxy ]; then
    check "rolling upgrade through mvproxy: no false 404" "$f false 404s (upgrade.md)" test "$f" = 0
  else
    record "rolling upgrade through upstream's proxy (measured, not a check)" PASS "$f false 404s (upgrade.md)"
  fi
done
# ---- the prediction against what the upgrade did -------------------------------------------
# A GVR broke when its requests were answered in all-old and got 404s (false or true) in a
# later phase, straight from the API servers (upstream's run) and through mvproxy.
python3 - "$out/readiness-before.json" "$out/upgrade-upstream.json" "$out/upgrade-mvproxy.json" \
  "core/v1/pods=$kold" "core/v1/configmaps=$knew,curl" "apps/v1/deployments=inventory-sync" \
  "core/v1/componentstatuses=$knew,curl" "scheduling.k8s.io/$SKEW_OLD_V/workloads=$kold,inventory-sync" "target=$TARGET" \
  >"$out/readiness-outcome.md" 2>"$CP_DIR/outcome.err" <<'PY' || true
import json, sys
pred, straight, via = (json.load(open(p)) for p in sys.argv[1:4])
used = dict(a.split("=", 1) for a in sys.argv[4:])  # GVR -> the clients that sent it
target = used.pop("target")
norm = lambda g: "core/" + g if g.count("/") == 1 else g
predicted = {}
for r in pred["rows"]:
    predicted.setdefault(norm(r["gvr"]), {}).setdefault(r["kind"], set()).add(r["client"])
def broke(run, gvr):
    phases = run["by_gvr"].get(gvr, {})
    before = phases.get("all-old", {})
    later = [p for p in phases if p not in ("all-old", "pause")]
    n404 = sum(phases[p].get("false404", 0) + phases[p].get("true404", 0) for p in later)
    return before.get("ok", 0) > 0 and n404 > 0, n404, sorted(p for p in later if phases[p].get("false404", 0) + phases[p].get("true404", 0))
print("| GVR | used by | readiness before the upgrade | straight to the API servers | through mvproxy |")
print("|---|---|---|---|---|")
bad = []
for g, users in used.items():
    kinds = predicted.get(g, {})
    breaks = "breaks_on_target" in kinds
    said = [f"breaks on {target}: {', '.join(sorted(kinds['breaks_on_target']))}"] if breaks else []
    if "deprecated" in kinds:
        said.append(f"deprecated: {', '.join(sorted(kinds['deprecated']))}")
    label = "; ".join(said) or "not listed"
    b1, n1, p1 = broke(straight, g)
    b2, n2, p2 = broke(via, g)
    cell = lambda b, n, p: f"broke: {n} 404s ({', '.join(p)})" if b else "answered"
    print(f"| `{g}` | {users.replace(',', ', ')} | {label} | {cell(b1, n1, p1)} | {cell(b2, n2, p2)} |")
    if breaks != b1:
        bad.append(g)
print()
print("mismatch: " + (", ".join(bad) if bad else "none"))
sys.exit(1 if bad else 0)
PY
check "the GVRs that broke straight from the API servers during the upgrade = the ones readiness predicted" \
  "$(tail -1 "$out/readiness-outcome.md") (readiness-outcome.md)" grep -qx 'mismatch: none' "$out/readiness-outcome.md"
cat "$out/readiness-outcome.md" >&2

{
  echo "resident memory at the end (KiB):"
  for n in etcd apiserver-a apiserver-b; do echo "  $n $(cp_rss_kib $n)"; done
} >>"$out/memory.txt"
