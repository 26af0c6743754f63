#!/usr/bin/env bash
# The profile that release builds of mvproxy are optimised with (profile-guided optimisation,
# https://doc.rust-lang.org/rustc/profile-guided-optimization.html): prints its path, for
#   RUSTFLAGS="-Cprofile-use=$(scripts/pgo-profile.sh)" cargo build --release -p mvproxy --target ...
# as scripts/image.sh and the benches build. With it the compiler lays out and inlines the code
# for the paths a real control plane takes; a same-run A/B cut the instructions per request by
# 17 % with HTTP/2 clients and 16 % with HTTP/1.1 (bench/PERF_NOTES.md, twenty-first round).
#
# How: an instrumented build (-Cprofile-generate) of this checkout runs as two mvproxies, peers
# of each other, in front of real kube-apiservers of the release pair users rehearse (1.36.3 and
# 1.37.2 on etcd 3.7.0, scripts/control-plane/), and serves what clients send there: Go's
# HTTP/2 and HTTP/1.1 keep-alive GETs (bench/realcp/main.go), a list of a resource only the
# other release serves (the peer hop), kubectl's discovery (the merged aggregated documents and
# /apis/{group}/{version}), and a watch while objects are created and deleted. Paths the
# training never takes are compiled as cold, so it covers each one the proxy exists for. Not
# bench/realpath.py's nginx and h2load: the benchmarks measure a build trained on something
# else.
#
# The profile is cached under the user's cache directory, named by the instrumented binary's
# hash: unchanged code is trained once (in each clone: the binary holds its source paths), and
# the optimised build, whose RUSTFLAGS name the profile, is cargo's cached one.
# Needs root (each API server runs in its own UTS namespace), Go (the pinned control-plane
# builds, and bench/realcp's client), kubectl, and llvm-profdata of rustc's LLVM release
# (installed from Debian's llvm-N when missing). Loopback only (127.0.0.2, 127.0.0.3); every
# process started is stopped by its PID. Progress goes to stderr, the path alone to stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mvproxy"
triple=x86_64-unknown-linux-gnu
log() { echo "[pgo] $*" >&2; }
fail() { echo "pgo-profile: $*" >&2; exit 1; }

# ---- llvm-profdata of the LLVM rustc was built with (the raw profile format is LLVM's own) ----
llvm_major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
[ -n "$llvm_major" ] || fail "rustc -vV names no LLVM version"
profdata=$(command -v "llvm-profdata-$llvm_major" || true)
if [ -z "$profdata" ]; then
  [ "$(id -u)" -eq 0 ] || fail "llvm-profdata-$llvm_major is needed (apt-get install llvm-$llvm_major, as root)"
  log "installing llvm-$llvm_major (llvm-profdata) ..."
  { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "llvm-$llvm_major"; } >&2 ||
    fail "apt-get install llvm-$llvm_major failed"
  profdata=$(command -v "llvm-profdata-$llvm_major") || fail "llvm-$llvm_major has no llvm-profdata-$llvm_major"
fi

# ---- the instrumented build -------------------------------------------------------------------
gen_target="$cache/pgo-target"
mkdir -p "$cache/pgo"
# One at a time: runs share the build directory, the cached profiles and the training's ports.
exec 9>"$cache/pgo.lock"
flock 9
log "building the instrumented binary ($gen_target) ..."
# --target: the flags reach mvproxy's code and its dependencies, not build scripts or macros. A
# fixed commit for `--version`, so that a commit that changes no code keeps the binary, hence
# the profile.
MVPROXY_GIT_COMMIT=pgo-training RUSTFLAGS="-Cprofile-generate=$cache/pgo/raw" \
  nice -n 10 cargo build --release -p mvproxy --bin mvproxy --locked -q \
  --manifest-path "$root/Cargo.toml" --target "$triple" --target-dir "$gen_target"
gen_bin="$gen_target/$triple/release/mvproxy"
profile="$cache/pgo/mvproxy-$(sha256sum "$gen_bin" | cut -c1-16).profdata"
if [ -s "$profile" ]; then
  log "the code is unchanged since $profile was trained"
  echo "$profile"
  exit 0
fi

# ---- training on a real control plane ---------------------------------------------------------
[ "$(id -u)" -eq 0 ] || fail "training runs kube-apiservers in UTS namespaces of their own: run as root"
command -v kubectl >/dev/null || fail "kubectl is needed"
CP_DIR=$(mktemp -d /tmp/mvproxy-pgo.XXXXXX)
export CP_DIR
CP_ETCD_VERSION=3.7.0
OLD=1.36.3 NEW=1.37.2
# A resource only NEW serves with every API on (scripts/conformance/lib.sh, SKEW_NEW_V).
SKEW_GROUP=scheduling.k8s.io SKEW_VERSION=v1beta1
SKEW_PATH=/apis/$SKEW_GROUP/$SKEW_VERSION/namespaces/default/workloads
# shellcheck source=control-plane/lib.sh
. "$root/scripts/control-plane/lib.sh"
trap 'cp_cleanup; rm -rf "$CP_DIR"' EXIT
trap 'exit 130' INT TERM

raw="$CP_DIR/raw"
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
  LLVM_PROFILE_FILE="$raw/$1-%p.profraw" "$gen_bin" serve --server-id "$2" \
    --listen "$3:7443" --admin-listen "$3:7543" --local "https://$3:$CP_PORT" \
    --peer "$4=https://$5:7443" --peer-ca-file "$pki/ca.crt" "${CP_MVPROXY_PKI_ARGS[@]}" \
    >"$CP_DIR/logs/$1.log" 2>&1 &
  _cp_record "$1" $!
}
mvp_start mvproxy-a apiserver-a "$A" apiserver-b "$B"
mvp_start mvproxy-b apiserver-b "$B" apiserver-a "$A"
for ip in "$A" "$B"; do
  ok=0
  for _ in $(seq 1 120); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$ip:7543/readyz")" = 200 ] && { ok=1; break; }
    sleep 0.5
  done
  [ "$ok" = 1 ] || fail "the instrumented mvproxy on $ip did not become ready; see $CP_DIR/logs"
done
log "training: kube-apiserver $OLD and $NEW behind two instrumented mvproxies"

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
items = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"pgo-{i}"}, "data": {"k": "v"}} for i in range(n)]
items += [{"apiVersion": gv, "kind": "Workload", "metadata": {"name": f"pgo-{i}"},
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
for name in mvproxy-a mvproxy-b; do
  pid=$(cp_pid "$name")
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
done
compgen -G "$raw/*.profraw" >/dev/null || fail "the instrumented mvproxies wrote no profile; see $CP_DIR/logs"
# Profiles of other code (other clones, older commits) are kept a week.
find "$cache/pgo" -name 'mvproxy-*.profdata' -mtime +7 -delete
"$profdata" merge -o "$profile.tmp" "$raw"/*.profraw
mv "$profile.tmp" "$profile"
log "trained: $profile"
echo "$profile"
