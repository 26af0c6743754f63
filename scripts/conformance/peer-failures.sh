#!/usr/bin/env bash
# Conformance part "peer-failures": what a client sees while one of the servers that serve a
# GVR fails, through mvproxy and through upstream's own Mixed Version Proxy, on real,
# unmodified kube-apiservers and etcd (scripts/control-plane/).
#
# Three API servers share one etcd, all with upstream's proxy on: A = OLD on 192.0.2.2,
# B and C = NEW on 192.0.2.3 and .4 (the pair of conformance_pair in lib.sh), so B and C both
# serve the NEW-only scheduling.k8s.io/SKEW_NEW_V workloads and A does not. mvproxy A' (127.0.0.2:7443) is in front
# of A, with B and C as its peers (the API servers themselves, as --peer-source leases finds
# them and as upstream's proxy reaches them); B' and C' are in front of B and C. Two steady
# loads of the same mix run side by side for the whole part, each with its own User-Agent:
# one through A', one straight to A (upstream's proxy): reads of configmaps (local), reads and
# creates of workloads (peer-routed). The faults, one at a time, all on C:
#   kill     kill -9, restarted 10 s later;
#   stop     SIGSTOP for 20 s (accepts connections, never answers), then SIGCONT;
#   drop     every packet to C's address dropped for 20 s (iptables DROP in the part's own
#            network namespace; a blackhole route on a local address makes connect() fail at
#            once with EINVAL instead, and tc's classifiers are not in this kernel).
# The report (peer_failures.py report) gives, per fault and per proxy: requests answered,
# 503s, 504s, p99 of local and of peer-routed requests, when the failed server stopped being
# chosen (from the client's side), when it served again (the first create sent after it recovered
# that its audit log shows it applied) and how many
# creates were answered as failed but applied all the same.
#
# mvproxy runs with its defaults (discovery refresh every 30 s) except
# --response-header-timeout-seconds 10, so that a hung peer's 504 falls inside the 20 s stop.
#
# Reports in $CONFORMANCE_OUT/peer-failures/: table.md, report.json, load-*.jsonl, faults.jsonl,
# logs/. Every process is stopped by its PID.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=lib.sh
. "$here/lib.sh"
out="${CONFORMANCE_OUT:-$root/target/conformance}/peer-failures"
mkdir -p "$out"
[ "$(id -u)" -eq 0 ] || { record "runs as root" FAIL "a network namespace and a UTS namespace per API server need root"; exit 1; }
# The drop fault needs iptables: installed once, as root, when missing (as scripts/test.sh
# installs prometheus).
if ! command -v iptables >/dev/null && [ "$(id -u)" -eq 0 ]; then
  apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iptables >&2 || true
fi
command -v iptables >/dev/null || { record "iptables installed" FAIL "the drop fault needs iptables (Debian: apt-get install iptables)"; exit 1; }
# MVPROXY: the binary to measure (default: a release build of this checkout, built here).
# PEER_FAILURES_SAME_RELEASE=1 runs A on NEW too, with scheduling.k8s.io/SKEW_NEW_V turned off
# (--runtime-config), for a machine where OLD is not built yet: the same routing, said so in
# the report.
MVPROXY=${MVPROXY:-$root/target/release/mvproxy}
conformance_pair
[ "${PEER_FAILURES_SAME_RELEASE:-}" = 1 ] && OLD=$NEW
components=("etcd-v$CP_ETCD_VERSION" "kube-apiserver-v$NEW")
[ "$OLD" = "$NEW" ] || components+=("kube-apiserver-v$OLD")

if [ -z "${CONFORMANCE_NETNS:-}" ]; then
  if [ "$MVPROXY" = "$root/target/release/mvproxy" ]; then
    echo "building mvproxy (release) ..." >&2
    (cd "$root" && nice -n 10 cargo build --release --locked -p mvproxy -q)
  fi
  "$root/scripts/control-plane/build.sh" "${components[@]}" >/dev/null
  exec unshare --net -- env CONFORMANCE_NETNS=1 "$0" "$@"
fi
ip link set lo up
A_IP=192.0.2.2 B_IP=192.0.2.3 C_IP=192.0.2.4
MA_IP=127.0.0.2 MB_IP=127.0.0.3 MC_IP=127.0.0.4
for ip in $A_IP $B_IP $C_IP; do ip addr add "$ip/32" dev lo; done

CP_DIR=$(mktemp -d /tmp/mvproxy-peer-failures.XXXXXX)
export CP_DIR
# shellcheck source=../control-plane/lib.sh
. "$root/scripts/control-plane/lib.sh"
loaders=()
cleanup() {
  local p
  for p in "${loaders[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  # A stopped process cannot act on SIGTERM.
  p=$(cp_pid apiserver-c)
  [ -z "$p" ] || kill -CONT "$p" 2>/dev/null || true
  iptables -D OUTPUT -d "$C_IP" -j DROP 2>/dev/null || true
  cp_cleanup
  rm -rf "$out/logs"
  cp -r "$CP_DIR/logs" "$out/" 2>/dev/null || true
  rm -rf "$CP_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pki="$CP_DIR/pki"
WL=/apis/scheduling.k8s.io/$SKEW_NEW_V/namespaces/default/workloads
WL_SPEC='{"podGroupTemplates":[{"name":"g","schedulingPolicy":{"basic":{}}}]}'
LOAD_RATE=${LOAD_RATE:-16}
STOP_SECONDS=${STOP_SECONDS:-20}

# cp_init, for the components this part runs only (it would build every release).
mkdir -p "$CP_DIR"/{pki,logs,run}
: >"$CP_DIR/pids"
while IFS= read -r line; do export "${line?}"; done < <("$root/scripts/control-plane/build.sh" "${components[@]}")
cp_pki
A_ARGS=()
[ "$OLD" = "$NEW" ] && A_ARGS=(--runtime-config "scheduling.k8s.io/$SKEW_NEW_V=false")

# The faulted server's audit log: which requests it served, and when (each load has its own
# User-Agent). Only workloads; level Metadata (no bodies).
cat >"$CP_DIR/audit-policy.yaml" <<'YAML'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources: [{group: scheduling.k8s.io, resources: [workloads]}]
- level: None
YAML
AUDIT="$CP_DIR/logs/audit-c.log"
C_ARGS=(--audit-policy-file "$CP_DIR/audit-policy.yaml" --audit-log-path "$AUDIT" --audit-log-maxbackup 1)

mvp_start() { # NAME IP LOCAL_IP PEER_IP PEER_NAME PEER_IP PEER_NAME
  local name=$1 ip=$2 local_ip=$3
  "$MVPROXY" serve --listen "$ip:7443" --admin-listen "$ip:7543" \
    --local "https://$local_ip:$CP_PORT" --local-ca-file "$pki/ca.crt" --peer-ca-file "$pki/ca.crt" \
    --tls-cert-file "$pki/apiserver.crt" --tls-key-file "$pki/apiserver.key" \
    --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
    --identity front-proxy --client-ca-file "$pki/ca.crt" \
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --response-header-timeout-seconds 10 --server-id "$name" \
    --peer "$5=https://$4:$CP_PORT" --peer "$7=https://$6:$CP_PORT" >>"$CP_DIR/logs/mvproxy-$name.log" 2>&1 &
  _cp_record "mvproxy-$name" $!
}
wait_for() { # SECONDS COMMAND...
  local limit=$1 i
  shift
  for i in $(seq 1 $((limit * 2))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}
code_of() { # URL_BASE PATH
  curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$1$2"
}
is_200() { [ "$(code_of "$1" "$2")" = 200 ]; }

t0=$(date +%s)
cp_start_etcd
cp_start_apiserver apiserver-a "$OLD" "$A_IP" mvp "${A_ARGS[@]}"
cp_start_apiserver apiserver-b "$NEW" "$B_IP" mvp
cp_start_apiserver apiserver-c "$NEW" "$C_IP" mvp "${C_ARGS[@]}"
for n in a:$A_IP b:$B_IP c:$C_IP; do
  cp_wait_ready "apiserver-${n%%:*}" "${n#*:}" 180 || { record "three API servers start" FAIL "apiserver-${n%%:*} (logs/)"; exit 1; }
done
mvp_start apiserver-a "$MA_IP" "$A_IP" "$B_IP" apiserver-b "$C_IP" apiserver-c
mvp_start apiserver-b "$MB_IP" "$B_IP" "$A_IP" apiserver-a "$C_IP" apiserver-c
mvp_start apiserver-c "$MC_IP" "$C_IP" "$A_IP" apiserver-a "$B_IP" apiserver-b
# Both ways of reaching workloads from the OLD side work before the load starts: mvproxy has
# read B's and C's discovery, upstream's proxy in A has found its peers.
ready=1
wait_for 60 is_200 "https://$MA_IP:7443" "$WL" || ready=0
wait_for 120 is_200 "https://$A_IP:$CP_PORT" "$WL" || ready=0
check "three API servers ($OLD, $NEW, $NEW), each with an mvproxy; workloads $SKEW_NEW_V reachable from the $OLD side both ways" \
  "ready in $(( $(date +%s) - t0 ))s" test "$ready" = 1
[ "$ready" = 1 ] || exit 1

UA_MVP=peer-failures-via-mvproxy UA_UP=peer-failures-via-upstream
start_load() { # LABEL TARGET USER_AGENT
  python3 "$here/peer_failures.py" load --target "$2" --label "$1" --user-agent "$3" \
    --ca "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" --rate "$LOAD_RATE" \
    --peer-path "$WL" --peer-api-version "scheduling.k8s.io/$SKEW_NEW_V" --peer-kind Workload --peer-spec "$WL_SPEC" \
    --out "$out/load-$1.jsonl" &
  loaders+=($!)
}
start_load mvproxy "https://$MA_IP:7443" "$UA_MVP"
start_load upstream "https://$A_IP:$CP_PORT" "$UA_UP"

faults="$out/faults.jsonl"
: >"$faults"
now() { date +%s.%N; }
window() { # NAME START RECOVERED: the window ends now
  printf '{"name": "%s", "start": %s, "recovered": %s, "end": %s}\n' "$1" "$2" "$3" "$(now)" >>"$faults"
}
c_pid() { cp_pid apiserver-c; }
sleep 3
s=$(now); sleep 10; window "none (steady)" "$s" "$s"

# kill -9, restarted after 10 s; "recovered" when it is ready again.
s=$(now)
kill -KILL "$(c_pid)"
wait "$(c_pid)" 2>/dev/null || true
awk '$1 != "apiserver-c"' "$CP_DIR/pids" >"$CP_DIR/pids.tmp" && mv "$CP_DIR/pids.tmp" "$CP_DIR/pids"
sleep 10
cp_start_apiserver apiserver-c "$NEW" "$C_IP" mvp "${C_ARGS[@]}"
cp_wait_ready apiserver-c "$C_IP" 180 || record "apiserver-c restarts after kill -9" FAIL "logs/"
r=$(now); sleep 10; window "kill -9, restart after 10 s" "$s" "$r"
sleep 5

s=$(now)
kill -STOP "$(c_pid)"
sleep "$STOP_SECONDS"
kill -CONT "$(c_pid)"
r=$(now); sleep 10; window "SIGSTOP ${STOP_SECONDS} s" "$s" "$r"
sleep 5

s=$(now)
iptables -I OUTPUT -d "$C_IP" -j DROP
sleep "$STOP_SECONDS"
iptables -D OUTPUT -d "$C_IP" -j DROP
r=$(now); sleep 10; window "packets dropped ${STOP_SECONDS} s" "$s" "$r"

for p in "${loaders[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done
loaders=()
# Writes a hung server accepted land when it resumes: give them time before asking.
sleep 3
python3 "$here/peer_failures.py" report --faults "$faults" --audit "$AUDIT" \
  --load "mvproxy=$UA_MVP=$out/load-mvproxy.jsonl" --load "upstream MVP=$UA_UP=$out/load-upstream.jsonl" \
  --ca "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" --peer-path "$WL" \
  --check-url "https://$B_IP:$CP_PORT" --json "$out/report.json" --table "$out/table.md" >&2

# The goal: with another capable server up, no read through mvproxy fails (B serves the GVR
# throughout every fault). Upstream's proxy is measured, not held to it.
while IFS= read -r row; do
  verdict=PASS
  if [ "$(jq -r .via <<<"$row")" = mvproxy ] && [ "$(jq -r .reads_failed <<<"$row")" != 0 ]; then
    verdict=FAIL
  fi
  record "$(jq -r '"\(.fault) via \(.via) (measured)"' <<<"$row")" "$verdict" \
    "$(jq -r '"\(.answered)/\(.sent) answered, 503 \(.["503"]), 504 \(.["504"]), other \(.other), failed reads \(.reads_failed), avoided \(.avoided), serves again \(.serves_again), creates failed \(.creates_failed) (applied \(.creates_failed_applied))"' <<<"$row")"
done < <(jq -c '.rows[]' "$out/report.json")
