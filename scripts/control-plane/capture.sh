#!/usr/bin/env bash
# Captures the discovery fixtures in fixtures/discovery/kube-apiserver-<version>/ (and the OpenAPI
# ones in fixtures/openapi/kube-apiserver-<version>/) from real,
# unmodified kube-apiservers (OLD and NEW, by default v1.35.4 and v1.36.3, see build.sh), started
# by lib.sh against one etcd with --runtime-config=api/all=true. fixtures/discovery/README.md
# describes the files.
#
# Two control planes are started, one after the other:
# 1. upstream's Mixed Version Proxy off: each server's own documents (every Accept variant);
# 2. upstream's Mixed Version Proxy on in both (gate, --peer-ca-file, --peer-advertise-*): the
#    1.36 server's peer-aggregated /apis (its peer being the 1.35 server), and the 1.35 one's.
#
# usage: capture.sh [OUT_DIR]   (default: fixtures/discovery of this repository)
# env:   OLD, NEW       the pair (default 1.35.4, 1.36.3); CP_ETCD_VERSION the etcd (lib.sh).
#        OLD=1.36.3 NEW=1.37.2 CP_ETCD_VERSION=3.7.0 capture.sh /tmp/x captures the newer pair;
#        copy /tmp/x/kube-apiserver-1.37.2 (its peer-aggregated/ is its merge with 1.36.3).
#
# capture.sh catalog [VERSION ...] (default: every kube-apiserver-v* module beside this script)
# captures instead what each release serves, twice, one release at a time, each alone against
# a fresh etcd: with its DEFAULT feature gates and runtime config (no --runtime-config, no
# --feature-gates: what a cluster serves unless its operator turned more on), into
# fixtures/discovery/defaults/kube-apiserver-VERSION/{api,apis,version}.json, and with EVERY API
# on (--runtime-config=api/all=true and every alpha and beta gate: what the release can serve
# at all), into fixtures/discovery/all/kube-apiserver-VERSION/ (aggregated discovery v2,
# profile=nopeer: the layout of `mvproxy serve --target-discovery DIR`). From them it writes
# the catalog embedded in mvproxy, proxy/core/src/target/catalog/1.MINOR.json and
# 1.MINOR-all.json (the groups, versions and resources, in the server's order). A test
# (proxy/core/src/target/catalog.rs) keeps the catalog equal to these captured files.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mode=local
if [ "${1:-}" = catalog ]; then
  mode=catalog
  shift
  out="$here/../../fixtures/discovery/defaults"
  catalog="$here/../../proxy/core/src/target/catalog"
  mkdir -p "$out" "$catalog"
  out=$(cd "$out" && pwd)
  catalog=$(cd "$catalog" && pwd)
  versions=("$@")
  if [ ${#versions[@]} -eq 0 ]; then
    for d in "$here"/kube-apiserver-v*/; do
      d=${d%/}
      versions+=("${d##*-v}")
    done
  fi
else
  out=${1:-"$here/../../fixtures/discovery"}
  out=$(cd "$out" && pwd)
fi
[ "$(id -u)" -eq 0 ] || { echo "capture.sh: needs root (a UTS namespace per API server)" >&2; exit 2; }
CP_DIR=$(mktemp -d /tmp/mvproxy-capture.XXXXXX)
export CP_DIR
# shellcheck source=lib.sh
. "$here/lib.sh"
trap 'cp_cleanup; rm -rf "$CP_DIR"' EXIT
trap 'exit 130' INT TERM

V2='application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList'
V2B1='application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList'

# get IP PATH ACCEPT FILE [any]: the body exactly as served, and its status and headers (minus
# the ones that change per request) beside it in FILE.headers. Fails on a status other than 200
# unless "any" is given (v2beta1 is refused with 406 once AggregatedDiscoveryRemoveBetaType is on).
get() {
  local ip=$1 path=$2 accept=$3 file=$4 any=${5:-}
  mkdir -p "$(dirname "$file")"
  cp_curl "$ip" "$path" -H "Accept: $accept" -D "$file.hdr" -o "$file"
  grep -viE '^(date|audit-id|x-kubernetes-pf-(flowschema|prioritylevel)-uid):' "$file.hdr" | tr -d '\r' |
    sed '/^$/d' >"$file.headers"
  rm -f "$file.hdr"
  [ -n "$any" ] || head -1 "$file.headers" | grep -q ' 200' || { cp_log "GET $path ($accept) on $ip: $(head -1 "$file.headers")"; return 1; }
}

capture_local() {
  local ip=$1 dir=$2 gv
  rm -rf "$dir"
  mkdir -p "$dir"
  get "$ip" /apis "$V2" "$dir/aggregated_v2.json"
  get "$ip" /apis "$V2;profile=nopeer" "$dir/aggregated_v2_nopeer.json"
  get "$ip" /apis "$V2B1" "$dir/aggregated_v2beta1.json" any
  get "$ip" /apis "$V2B1;profile=nopeer" "$dir/aggregated_v2beta1_nopeer.json" any
  # What client-go 1.26-1.29 (kubectl 1.27-1.29) sends: v2beta1, else legacy.
  get "$ip" /apis "$V2B1,application/json" "$dir/aggregated_v2beta1_or_legacy.json"
  get "$ip" /api "$V2" "$dir/api_aggregated_v2.json"
  get "$ip" /api "$V2;profile=nopeer" "$dir/api_aggregated_v2_nopeer.json"
  get "$ip" /api application/json "$dir/legacy/api.json"
  get "$ip" /api/v1 application/json "$dir/legacy/api/v1.json"
  get "$ip" /apis application/json "$dir/legacy/apis.json"
  # The legacy /apis lists every APIService in etcd, so also the other release's group-versions,
  # which this server answers with 404: kept as served.
  for gv in $(jq -r '.groups[].versions[].groupVersion' "$dir/legacy/apis.json"); do
    get "$ip" "/apis/$gv" application/json "$dir/legacy/apis/$gv.json" any
  done
  get "$ip" /version application/json "$dir/version.json"
  # OpenAPI (fixtures/openapi/kube-apiserver-<version>/): the v3 index, and v2 as JSON and as
  # the protobuf kubectl 1.27 asks for.
  local oa
  oa="$(dirname "$(dirname "$dir")")/openapi/$(basename "$dir")"
  rm -rf "$oa"
  get "$ip" /openapi/v3 application/json "$oa/openapi_v3.json"
  get "$ip" /openapi/v2 application/json "$oa/openapi_v2.json"
  get "$ip" /openapi/v2 'application/com.github.proto-openapi.spec.v2@v1.0+protobuf' "$oa/openapi_v2.pb"
}

# capture_defaults VERSION: one release alone, default gates and runtime config.
# capture_catalog VERSION defaults|all: one release alone, its documents and its catalog file.
capture_catalog() {
  local v=$1 config=$2 dir minor file
  minor=$(echo "$v" | cut -d. -f1,2)
  if [ "$config" = defaults ]; then
    dir="$out/kube-apiserver-$v" file="$catalog/$minor.json"
    cp_log "kube-apiserver $v, default feature gates and runtime config"
  else
    dir="$out/../all/kube-apiserver-$v" file="$catalog/$minor-all.json" config=""
    cp_log "kube-apiserver $v, every API on"
  fi
  rm -rf "$CP_DIR/run/etcd" "$dir"
  cp_start_etcd
  cp_start_apiserver apiserver "$v" 127.0.0.2 "$config"
  cp_wait_ready apiserver 127.0.0.2
  mkdir -p "$dir"
  get 127.0.0.2 /api "$V2;profile=nopeer" "$dir/api.json"
  get 127.0.0.2 /apis "$V2;profile=nopeer" "$dir/apis.json"
  get 127.0.0.2 /version application/json "$dir/version.json"
  cp_cleanup
  : >"$CP_DIR/pids"
  jq -n --slurpfile api "$dir/api.json" --slurpfile apis "$dir/apis.json" --slurpfile ver "$dir/version.json" '
    {gitVersion: $ver[0].gitVersion,
     groups: [($api[0].items + $apis[0].items)[]
       | {name: (.metadata.name // ""),
          versions: [.versions[] | {version, resources: [(.resources // [])[].resource]}]}]}' \
    >"$file"
  cp_log "captured $dir and $file"
}

if [ "$mode" = catalog ]; then
  builds=("etcd-v$CP_ETCD_VERSION")
  for v in "${versions[@]}"; do builds+=("kube-apiserver-v$v"); done
  cp_init "${builds[@]}"
  cp_pki
  for v in "${versions[@]}"; do
    capture_catalog "$v" defaults
    capture_catalog "$v" all
  done
  exit 0
fi

OLD=${OLD:-1.35.4} NEW=${NEW:-1.36.3}
cp_init "etcd-v$CP_ETCD_VERSION" "kube-apiserver-v$OLD" "kube-apiserver-v$NEW"
cp_pki

cp_log "control plane 1: upstream's Mixed Version Proxy off"
cp_start_etcd
cp_start_apiserver apiserver-old $OLD 127.0.0.2
cp_start_apiserver apiserver-new $NEW 127.0.0.3
cp_wait_ready apiserver-old 127.0.0.2
cp_wait_ready apiserver-new 127.0.0.3
capture_local 127.0.0.2 "$out/kube-apiserver-$OLD"
capture_local 127.0.0.3 "$out/kube-apiserver-$NEW"
cp_cleanup

cp_log "control plane 2: upstream's Mixed Version Proxy on in both"
rm -rf "$CP_DIR/run/etcd"
: >"$CP_DIR/pids"
cp_start_etcd
cp_start_apiserver apiserver-old $OLD 127.0.0.2 mvp
cp_start_apiserver apiserver-new $NEW 127.0.0.3 mvp
cp_wait_ready apiserver-old 127.0.0.2
cp_wait_ready apiserver-new 127.0.0.3
# Peer discovery is fetched when a peer's identity lease appears; wait until the NEW server's
# /apis lists a group-version only the OLD server serves, or give up after 60 s.
only_old=$(comm -23 \
  <(jq -r '.items[] | .metadata.name as $g | .versions[] | "\($g)/\(.version)"' "$out/kube-apiserver-$OLD/aggregated_v2_nopeer.json" | sort) \
  <(jq -r '.items[] | .metadata.name as $g | .versions[] | "\($g)/\(.version)"' "$out/kube-apiserver-$NEW/aggregated_v2_nopeer.json" | sort) | head -1)
cp_log "waiting for the $NEW server's /apis to list $only_old (only $OLD serves it)"
for _ in $(seq 1 120); do
  if cp_curl 127.0.0.3 /apis -H "Accept: $V2" |
    jq -e --arg gv "$only_old" '[.items[] | .metadata.name as $g | .versions[] | "\($g)/\(.version)"] | index($gv)' >/dev/null; then
    break
  fi
  sleep 0.5
done
for pair in "127.0.0.2 kube-apiserver-$OLD" "127.0.0.3 kube-apiserver-$NEW"; do
  set -- $pair
  get "$1" /apis "$V2" "$out/$2/peer-aggregated/aggregated_v2.json"
  get "$1" /apis "$V2;profile=nopeer" "$out/$2/peer-aggregated/aggregated_v2_nopeer.json"
done
# Server IDs (identity lease names): upstream's merge orders servers by them.
old_id=$(cp_lease_of 127.0.0.3 apiserver-old)
new_id=$(cp_lease_of 127.0.0.3 apiserver-new)
for v in $OLD $NEW; do
  jq -n --arg old "$old_id" --arg new "$new_id" --arg oldkey "kube-apiserver-$OLD" --arg newkey "kube-apiserver-$NEW" \
    '{($oldkey): {"host": "apiserver-old", "id": $old, "address": "127.0.0.2:6443"},
      ($newkey): {"host": "apiserver-new", "id": $new, "address": "127.0.0.3:6443"}}' \
    >"$out/kube-apiserver-$v/peer-aggregated/servers.json"
done
cp_log "captured into $out"
