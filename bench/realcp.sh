#!/usr/bin/env bash
# What mvproxy adds to a request on the real control plane: etcd and one kube-apiserver v1.36.3
# (built from its Go modules and cached by scripts/control-plane/build.sh), mvproxy as the image
# ships it (release_mvproxy in bench/need-tools.sh; MVPROXY_PGO=0: the plain static release build;
# MVPROXY_BIN: a binary already built)
# in front of it as the shipped configs run it (TLS on both hops, HTTP/2 to the server,
# front-proxy identity), HAProxy in front of it the same way (TLS in with the client's
# certificate, its subject as the X-Remote-* headers, HTTP/2 over TLS to the server with the
# front-proxy certificate; its default threads, one per CPU, as mvproxy's workers), and
# bench/realcp/main.go: one keep-alive client per destination on Go's HTTP/2 over TLS, as
# kubectl's, then on Go's HTTP/1.1 keep-alive over TLS, sending the same GET in turn straight
# and through each proxy. Prints, per client protocol, a markdown table of p50/p90/p99 and what
# each proxy added, per repeat, and each proxy's CPU time per request (its threads' run time
# over the client's run, from /proc). Everything it starts is stopped by PID when it exits.
# Needs root (the API server runs in its own UTS namespace), HAProxy (apt) and the loopback
# address 127.0.0.3 (the API server on :6443, mvproxy on :7443, HAProxy on :7444).
#
# With PROFILE=1 it records `perf record -e cpu-clock -g` of mvproxy over the run into
# target/loadtest/realcp.perf.data with a flat report beside it.
#
# usage: bench/realcp.sh        env: N (rounds per repeat, default 2000), REPEATS (3),
#                                    REQ_PATH (default /api/v1/namespaces/default), PROFILE,
#                                    PROTOS (the client protocols, default "h2 h1"), MVPROXY_BIN
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ "$(id -u)" -eq 0 ] || { echo "realcp.sh: needs root" >&2; exit 2; }
command -v haproxy >/dev/null || { echo "realcp.sh: needs haproxy (apt-get install haproxy)" >&2; exit 2; }
CP_DIR=$(mktemp -d /tmp/mvproxy-realcp.XXXXXX)
export CP_DIR
# shellcheck source=../scripts/control-plane/lib.sh
. "$root/scripts/control-plane/lib.sh"
trap 'cp_cleanup; rm -rf "$CP_DIR"' EXIT
trap 'exit 130' INT TERM

# shellcheck source=need-tools.sh
. "$root/bench/need-tools.sh"
mvproxy_bin=${MVPROXY_BIN:-$(cd "$root" && release_mvproxy)}
[ -x "$mvproxy_bin" ] || { echo "realcp.sh: MVPROXY_BIN=$mvproxy_bin is not an executable" >&2; exit 2; }
client="$CP_DIR/realcp"
(cd "$root/bench/realcp" && go build -o "$client" .)

ip=127.0.0.3 pki="$CP_DIR/pki"
cp_init
cp_pki
cp_start_etcd
cp_start_apiserver apiserver "1.36.3" "$ip" defaults
cp_wait_ready apiserver "$ip"
cp_mvproxy_pki_args
# perf finds symbols through the file's code, which mvproxy otherwise moves onto huge pages
if [ "${PROFILE:-0}" = 1 ]; then export MVPROXY_HUGE_TEXT=0; fi
"$mvproxy_bin" serve --server-id apiserver --listen "$ip:7443" --admin-listen "$ip:7543" \
  --local "https://$ip:$CP_PORT" "${CP_MVPROXY_PKI_ARGS[@]}" >"$CP_DIR/logs/mvproxy.log" 2>&1 &
_cp_record mvproxy $!
cat "$pki/apiserver.crt" "$pki/apiserver.key" >"$CP_DIR/haproxy-serving.pem"
cat "$pki/front-proxy-client.crt" "$pki/front-proxy-client.key" >"$CP_DIR/haproxy-client.pem"
cat >"$CP_DIR/haproxy.cfg" <<EOF
global
  maxconn 4096
defaults
  mode http
  timeout connect 1s
  timeout client 60s
  timeout server 60s
frontend fe
  bind $ip:7444 ssl crt $CP_DIR/haproxy-serving.pem ca-file $pki/ca.crt verify required alpn h2,http/1.1
  http-request del-header X-Remote- -m beg
  http-request set-header X-Remote-User %[ssl_c_s_dn(CN)]
  http-request set-header X-Remote-Group %[ssl_c_s_dn(O)]
  default_backend be
backend be
  server api $ip:$CP_PORT ssl verify required ca-file $pki/ca.crt crt $CP_DIR/haproxy-client.pem alpn h2 proto h2
EOF
haproxy -db -f "$CP_DIR/haproxy.cfg" >"$CP_DIR/logs/haproxy.log" 2>&1 &
_cp_record haproxy $!
cp_wait_mvproxy "$ip:7543"
cp_log "kube-apiserver $(cp_curl "$ip" /version | jq -r .gitVersion) on $ip:$CP_PORT, mvproxy on $ip:7443, HAProxy on $ip:7444; load average $(cut -d' ' -f1-3 /proc/loadavg)"
mvp_pid=$(cp_pid mvproxy) ha_pid=$(cp_pid haproxy)
# Nanoseconds every thread of process $1 has run (the first field of each task's schedstat);
# "%.0f": mawk's "%d" stops at 2^31, 2.1 s.
run_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%.0f", s}'; }
perf_pid=
if [ -n "${PROFILE:-}" ]; then
  out="$root/target/loadtest"
  mkdir -p "$out"
  perf record -q -e cpu-clock -g -p "$mvp_pid" -o "$out/realcp.perf.data" 2>/dev/null &
  perf_pid=$!
fi
# realcp/main.go sends 200 warm-up requests to each, then N per repeat.
proxied=$((200 + ${N:-2000} * ${REPEATS:-3}))
per_request() { awk -v d=$(($2 - $1)) -v n=$proxied 'BEGIN {printf "%.1f", d / n / 1000}'; }
for proto in ${PROTOS:-h2 h1}; do
  mvp0=$(run_ns "$mvp_pid") ha0=$(run_ns "$ha_pid")
  "$client" -proto "$proto" -ca "$pki/ca.crt" -cert "$pki/admin.crt" -key "$pki/admin.key" \
    -straight "https://$ip:$CP_PORT" -via "mvproxy=https://$ip:7443" -via "haproxy=https://$ip:7444" \
    -path "${REQ_PATH:-/api/v1/namespaces/default}" -n "${N:-2000}" -repeats "${REPEATS:-3}"
  mvp1=$(run_ns "$mvp_pid") ha1=$(run_ns "$ha_pid")
  cp_log "$proto client, CPU per proxied request ($proxied requests each): mvproxy $(per_request "$mvp0" "$mvp1") µs, HAProxy $(per_request "$ha0" "$ha1") µs"
done
if [ -n "$perf_pid" ]; then
  kill -INT "$perf_pid"
  wait "$perf_pid" || true
  perf report -i "$out/realcp.perf.data" --no-children --percent-limit 0.3 --stdio 2>/dev/null >"$out/realcp.perf.txt" || true
  cp_log "profile: $out/realcp.perf.data, flat report $out/realcp.perf.txt"
fi
cp_log "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
