#!/usr/bin/env bash
# What mvproxy adds to a request on the real control plane: etcd and one kube-apiserver v1.36.3
# (built from its Go modules and cached by scripts/control-plane/build.sh), a release mvproxy
# in front of it as the shipped configs run it (TLS on both hops, HTTP/2 to the server,
# front-proxy identity), and bench/realcp/main.go: one keep-alive client on Go's HTTP/2 over
# TLS, as kubectl's, alternating the same GET straight and through mvproxy. Prints a markdown
# table of p50/p90/p99 and what mvproxy added, per repeat. Everything it starts is stopped by
# PID when it exits. Needs root (the API server runs in its own UTS namespace) and the
# loopback addresses 127.0.0.3 (the API server on :6443, mvproxy on :7443).
#
# usage: bench/realcp.sh        env: N (rounds per repeat, default 2000), REPEATS (3),
#                                    REQ_PATH (default /api/v1/namespaces/default)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ "$(id -u)" -eq 0 ] || { echo "realcp.sh: needs root" >&2; exit 2; }
CP_DIR=$(mktemp -d /tmp/mvproxy-realcp.XXXXXX)
export CP_DIR
# shellcheck source=../scripts/control-plane/lib.sh
. "$root/scripts/control-plane/lib.sh"
trap 'cp_cleanup; rm -rf "$CP_DIR"' EXIT
trap 'exit 130' INT TERM

(cd "$root" && cargo build --release --locked -q -p mvproxy)
client="$CP_DIR/realcp"
(cd "$root/bench/realcp" && go build -o "$client" .)

ip=127.0.0.3 pki="$CP_DIR/pki"
cp_init
cp_pki
cp_start_etcd
cp_start_apiserver apiserver "1.36.3" "$ip" defaults
cp_wait_ready apiserver "$ip"
"$root/target/release/mvproxy" serve --server-id apiserver --listen "$ip:7443" --admin-listen "$ip:7543" \
  --local "https://$ip:$CP_PORT" --local-ca-file "$pki/ca.crt" \
  --tls-cert-file "$pki/apiserver.crt" --tls-key-file "$pki/apiserver.key" \
  --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
  --identity front-proxy --client-ca-file "$pki/ca.crt" \
  --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
  >"$CP_DIR/logs/mvproxy.log" 2>&1 &
_cp_record mvproxy $!
for _ in $(seq 1 60); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$ip:7543/readyz")" = 200 ] && break
  sleep 0.5
done
cp_log "kube-apiserver $(cp_curl "$ip" /version | jq -r .gitVersion) on $ip:$CP_PORT, mvproxy on $ip:7443; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$client" -ca "$pki/ca.crt" -cert "$pki/admin.crt" -key "$pki/admin.key" \
  -straight "https://$ip:$CP_PORT" -proxied "https://$ip:7443" \
  -path "${REQ_PATH:-/api/v1/namespaces/default}" -n "${N:-2000}" -repeats "${REPEATS:-3}"
cp_log "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
