#!/usr/bin/env bash
# Loopback load test: mvproxy against nginx as the reference reverse proxy, in one run.
#
#   wrk → nginx (static upstream)                      baseline: the upstream alone
#   wrk → nginx reverse proxy → nginx upstream         the reference proxy
#   wrk → mvproxy → nginx upstream                     mvproxy, request served locally
#
# The upstream serves the real 1.34 `/apis` discovery document (so mvproxy routes as in a
# cluster) and a static Deployment list. Reports requests/s and latency, and mvproxy's ratio
# to nginx measured in this same run: the machine is shared and noisy, so only the ratio means
# anything. Reads fixtures/discovery; installs nginx and wrk if missing.
# MVPROXY_ENV prefixes mvproxy's command line, e.g. MVPROXY_ENV="env TOKIO_WORKER_THREADS=1".
# The nginx reference runs proxy and upstream in one worker process; mvproxy's run has one more
# process competing for the two cores, which shows in the tail latency.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32}
FIXTURE=fixtures/discovery/kube-apiserver-1.34-dev/aggregated_v2.json

if ! command -v nginx >/dev/null || ! command -v wrk >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq nginx-light wrk >/dev/null
fi
cargo build --release -p mvproxy --bin mvproxy -q

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

mkdir -p "$work/root/apis/apps/v1/namespaces/default" "$work/logs"
cp "$FIXTURE" "$work/root/apis/index.json"
cat > "$work/root/apis/apps/v1/namespaces/default/deployments" <<'JSON'
{"kind":"DeploymentList","apiVersion":"apps/v1","metadata":{"resourceVersion":"1"},"items":[{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default","uid":"1","resourceVersion":"1"},"spec":{"replicas":1}}]}
JSON
UP=127.0.0.1:18081; REF=127.0.0.1:18082; MVP=127.0.0.1:18083; ADMIN=127.0.0.1:18084
cat > "$work/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/logs/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  upstream api { server $UP; keepalive 64; }
  server {
    listen $UP;
    root $work/root;
    location = /api { return 404; }
    location = /apis { default_type "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"; try_files /apis/index.json =404; }
    location / { default_type application/json; }
  }
  server {
    listen $REF;
    location / { proxy_pass http://api; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
CONF
nginx -c "$work/nginx.conf" -g 'daemon off;' & pids+=($!)
${MVPROXY_ENV:-} target/release/mvproxy serve --local "http://$UP" --listen "$MVP" --admin-listen "$ADMIN" --log-format json 2>"$work/logs/mvproxy.log" & pids+=($!)
for _ in $(seq 100); do curl -sf "http://$ADMIN/readyz" >/dev/null 2>&1 && break; sleep 0.1; done

path=/apis/apps/v1/namespaces/default/deployments
run() { wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --latency "http://$1$path"; }
echo "# loopback load test: $CONNECTIONS connections, $DURATION each, GET $path"
declare -A rps p50 p99
for name in upstream nginx mvproxy; do
  case $name in upstream) addr=$UP;; nginx) addr=$REF;; mvproxy) addr=$MVP;; esac
  out=$(run "$addr")
  rps[$name]=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50[$name]=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99[$name]=$(awk '$1=="99%" {print $2}' <<<"$out")
  echo "$name: ${rps[$name]} req/s, p50 ${p50[$name]}, p99 ${p99[$name]}"
done
python3 - "${rps[nginx]}" "${rps[mvproxy]}" <<'PY'
import sys
nginx, mvp = map(float, sys.argv[1:3])
print(f"mvproxy/nginx throughput ratio: {mvp/nginx:.2f}")
PY
warnings=$(grep -c "\"level\":\"WARN\"" "$work/logs/mvproxy.log" || true)
echo "mvproxy warnings: $warnings"
grep "\"level\":\"WARN\"" "$work/logs/mvproxy.log" | head -3 || true
