# Sourced by control-plane.sh (control plane 1, mvproxy A' in front of $OLD, B' in front of
# $NEW): OpenAPI across the skew, with kubectl 1.27 and the newest kubectl installed.
# Through each proxy, for the Workload version only the other release serves:
#   - kubectl explain --recursive prints what it prints straight against the serving server;
#   - client-side kubectl apply, twice, sends the same patch type as straight (from kubectl's
#     -v=8 request headers), and a finalizer a controller added in between survives (or not)
#     the same way: a strategic merge keeps it, a JSON merge patch drops it;
#   - kubectl apply --validate=strict of an unknown field fails with the same message;
# and, for the documents both releases serve, the proxy's /openapi/v3 index and /openapi/v2
# carry the local server's own entries unchanged, plus the other release's group-version.
# Uses control-plane.sh's helpers (kc, cp_curl, check, record) and kubeconfigs.

newest_kubectl() {
  local k best="" bestv=0 v
  for k in "$kubectl_new" "$(dirname "$(readlink -f "$kubectl_new")")"/kubectl.1.*; do
    [ -x "$k" ] || continue
    v=$("$k" version --client -o json 2>/dev/null | jq -r '.clientVersion.minor // "0"' | tr -dc 0-9)
    [ "${v:-0}" -gt "$bestv" ] && { best=$k; bestv=$v; }
  done
  echo "$best"
}
kubectl_1_27="$(dirname "$(readlink -f "$kubectl_new")")/kubectl.1.27"
[ -x "$kubectl_1_27" ] || kubectl_1_27=$(command -v kubectl.1.27 || true)
kubectl_newest=$(newest_kubectl)

# wl_apply_manifest VERSION NAME FINALIZERS...: a Workload of VERSION with these finalizers.
wl_apply_manifest() {
  local version=$1 name=$2
  shift 2
  wl "$version" "$name" | jq -c --args '.metadata.finalizers = $ARGS.positional' "$@"
}

# apply_twice KUBECTL KUBECONFIG VERSION NAME: the patch type of the second apply and the
# finalizers the object ends with ("TYPE finalizers"), a controller's finalizer added between.
apply_twice() {
  local k=$1 cfg=$2 version=$3 name=$4 res="workloads.$3.scheduling.k8s.io" log ptype fin
  log="$CP_DIR/apply-$name.log"
  wl_apply_manifest "$version" "$name" example.com/a | kc "$k" "$cfg" apply -f - >"$log" 2>&1 || { echo "first-apply-failed"; return; }
  kc "$k" "$cfg" patch "$res" "$name" -n default --type=json \
    -p '[{"op":"add","path":"/metadata/finalizers/-","value":"example.com/controller"}]' >>"$log" 2>&1
  wl_apply_manifest "$version" "$name" example.com/a example.com/b | kc "$k" "$cfg" apply -v=8 -f - >>"$log" 2>&1 || { echo "second-apply-failed"; return; }
  ptype=$(grep -oE 'Content-Type: application/[a-z-]*patch\+json' "$log" | sed 's/Content-Type: //' | sort -u | tr '\n' ' ')
  fin=$(kc "$k" "$cfg" get "$res" "$name" -n default -o json | jq -c '.metadata.finalizers | sort')
  kc "$k" "$cfg" patch "$res" "$name" -n default --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
  kc "$k" "$cfg" delete "$res" "$name" -n default --ignore-not-found >/dev/null 2>&1
  echo "${ptype:-none} $fin"
}

# strict_unknown KUBECTL KUBECONFIG VERSION: kubectl's error for an unknown field.
strict_unknown() {
  local version=$3
  wl "$version" cp-strict | jq -c '.spec.bogusField = 1' | kc "$1" "$2" apply --validate=strict -f - 2>&1 | no_discovery_noise | sed 's/[0-9a-f-]\{36\}//g'
  kc "$1" "$2" delete "workloads.$version.scheduling.k8s.io" cp-strict -n default --ignore-not-found >/dev/null 2>&1 || true
}

# kubectl 1.27 reads legacy discovery and logs (klog, "E1201 ... memcache.go:287] couldn't get
# resource list for G/V") every group-version the merged /apis lists whose /apis/G/V answers 404.
# Straight against a server with upstream's peer proxy that is the other release's
# group-version (upstream merges /apis but serves /apis/G/V only locally); through mvproxy,
# which routes /apis/G/V to a peer that serves it, the line is not there. It is the straight
# server's gap, not kubectl's answer: dropped before comparing what kubectl answered.
no_discovery_noise() {
  grep -v '^E[0-9]\{4\} .*memcache\.go:[0-9]*\] couldn.t get resource list for' || true
}

same() { # WHAT VIA STRAIGHT: equal outputs
  [ "$2" = "$3" ]
}

openapi_kubectl_checks() { # KUBECTL
  local k=$1 kv via straight version ea es
  kv=$("$k" version --client -o json 2>/dev/null | jq -r .clientVersion.gitVersion)
  # via A' ($OLD) for $SKEW_NEW_V ($NEW only, straight: B); via B' ($NEW) for $SKEW_OLD_V ($OLD only, straight: A).
  for pair in "a $SKEW_NEW_V direct-b" "b $SKEW_OLD_V direct-a"; do
    read -r via version straight <<<"$pair"
    ea=$(kc "$k" "$CP_DIR/via-$via.kc" explain workloads --api-version="scheduling.k8s.io/$version" --recursive 2>&1 | no_discovery_noise || true)
    es=$(kc "$k" "$CP_DIR/$straight.kc" explain workloads --api-version="scheduling.k8s.io/$version" --recursive 2>&1 | no_discovery_noise || true)
    echo "$ea" >"$out/explain-$kv-via-$via.txt"
    echo "$es" >"$out/explain-$kv-$straight.txt"
    check "kubectl $kv explain $version via mvproxy $via = straight" "$(echo "$ea" | wc -l) lines$( [ "$ea" = "$es" ] || echo "; differs: $(diff <(echo "$es") <(echo "$ea") | head -3 | tr '\n' ' ')")" \
      same explain "$ea" "$es"
    ea=$(apply_twice "$k" "$CP_DIR/via-$via.kc" "$version" "cp-apply-via-$via")
    es=$(apply_twice "$k" "$CP_DIR/$straight.kc" "$version" "cp-apply-$straight")
    check "kubectl $kv apply twice $version via mvproxy $via = straight" "via: $ea; straight: $es" \
      sh -c '[ "$1" = "$2" ] && case "$1" in *strategic-merge-patch*) true ;; *) false ;; esac' _ "$ea" "$es"
    ea=$(strict_unknown "$k" "$CP_DIR/via-$via.kc" "$version")
    es=$(strict_unknown "$k" "$CP_DIR/$straight.kc" "$version")
    check "kubectl $kv apply --validate=strict $version via mvproxy $via = straight" "${ea:0:160}" \
      sh -c '[ "$1" = "$2" ] && [ -n "$1" ]' _ "$ea" "$es"
  done
}

# The proxy's merged documents keep the local server's own entries and add the other's.
openapi_documents_agree() { # VIA_IP LOCAL_IP OTHER_IP OTHER_ONLY_GV
  local via=$1 local_ip=$2 other=$3 gv=$4 d
  as admin "https://$via:7443" /openapi/v3 -H 'Accept: application/json' >"$CP_DIR/v3-via.json" &&
    cp_curl "$local_ip" /openapi/v3 -H 'Accept: application/json' >"$CP_DIR/v3-local.json" &&
    cp_curl "$other" /openapi/v3 -H 'Accept: application/json' >"$CP_DIR/v3-other.json" || return 1
  d=$(jq -n --slurpfile m "$CP_DIR/v3-via.json" --slurpfile l "$CP_DIR/v3-local.json" --slurpfile o "$CP_DIR/v3-other.json" --arg gv "apis/$gv" '
    [($l[0].paths | to_entries[] | select($m[0].paths[.key] != .value) | .key)]
    + (if $m[0].paths[$gv] == $o[0].paths[$gv] and $o[0].paths[$gv] != null then [] else ["\($gv) not the serving server'\''s"] end)
    | join(" ")')
  [ "$d" = '""' ] || { echo "v3 index: $d"; return 1; }
  as admin "https://$via:7443" /openapi/v2 -H 'Accept: application/json' >"$CP_DIR/v2-via.json" &&
    cp_curl "$local_ip" /openapi/v2 -H 'Accept: application/json' >"$CP_DIR/v2-local.json" || return 1
  d=$(jq -n --slurpfile m "$CP_DIR/v2-via.json" --slurpfile l "$CP_DIR/v2-local.json" --arg p "/apis/$gv/" '
    [("paths", "definitions") as $f | $l[0][$f] | to_entries[] | select($m[0][$f][.key] != .value) | .key]
    + (if ($m[0].paths | keys | map(select(startswith($p))) | length) > 0 then [] else ["no path under \($p)"] end)
    | join(" ")')
  [ "$d" = '""' ] || { echo "v2: $d"; return 1; }
  # Protobuf, as kubectl 1.27 asks for it: the merged document, larger than the local one.
  local pb_via pb_local
  pb_via=$(as admin "https://$via:7443" /openapi/v2 -H 'Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf' -o /dev/null -w '%{http_code} %{size_download}')
  pb_local=$(cp_curl "$local_ip" /openapi/v2 -H 'Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf' -o /dev/null -w '%{size_download}')
  [ "${pb_via%% *}" = 200 ] && [ "${pb_via#* }" -gt "$pb_local" ] || { echo "v2 protobuf: $pb_via vs local $pb_local bytes"; return 1; }
  echo "v3 index $(jq '.paths | length' "$CP_DIR/v3-via.json") documents (local $(jq '.paths | length' "$CP_DIR/v3-local.json")), v2 $(jq '.paths | length' "$CP_DIR/v2-via.json") paths (local $(jq '.paths | length' "$CP_DIR/v2-local.json")), protobuf ${pb_via#* } bytes (local $pb_local)"
}

for pair in "a $MA_IP $A_IP $B_IP scheduling.k8s.io/$SKEW_NEW_V" "b $MB_IP $B_IP $A_IP scheduling.k8s.io/$SKEW_OLD_V"; do
  read -r name via_ip local_ip other_ip gv <<<"$pair"
  detail=$(openapi_documents_agree "$via_ip" "$local_ip" "$other_ip" "$gv" 2>&1) && r=PASS || r=FAIL
  record "/openapi/v3 and /openapi/v2 via mvproxy $name = local's + $gv" "$r" "$detail"
done
for k in "$kubectl_1_27" "$kubectl_newest"; do
  if [ -x "$k" ]; then
    openapi_kubectl_checks "$k"
  else
    record "OpenAPI with kubectl ${k:-1.27}" FAIL "kubectl not found"
  fi
done
