# Functions that run a real mixed-version control plane on loopback: one etcd and two (or
# more) unmodified kube-apiservers of different releases against it, as a rolling upgrade has
# them (--runtime-config=api/all=true, every alpha and beta feature gate). Sourced by up.sh, capture.sh and scripts/conformance/control-plane.sh.
#
# Why each choice:
# - every API server gets its own UTS namespace and host name, because its identity Lease
#   (`apiserver-<hash of the host name>` in kube-system) is derived from the host name: two
#   servers on one host would share one lease and never see each other as peers;
# - every API server gets its own loopback address (127.0.0.2, 127.0.0.3, ...) with the same
#   port, because the `kubernetes` Service's endpoints are reconciled from each server's
#   --advertise-address and one port: that way default/kubernetes lists all of them (the
#   conformance suite runs in its own network namespace with TEST-NET-1 addresses 192.0.2.2
#   and .3 on that namespace's loopback device, because kube-apiserver refuses loopback
#   addresses in the Endpoints it writes; the serving certificate names both sets);
# - the PKI is kubeadm's layout (https://kubernetes.io/docs/setup/best-practices/certificates/):
#   cluster CA, serving certificate with the kubernetes.default.svc names and the loopback
#   addresses, front-proxy CA and front-proxy-client, service-account keys, an admin user;
# - every process started is recorded by PID in $CP_DIR/pids and stopped by that PID only.
#
# The caller sets CP_DIR (a fresh directory) and calls cp_init first; cp_cleanup stops all.

CP_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CP_PORT=${CP_PORT:-6443}
CP_ETCD_PORT=${CP_ETCD_PORT:-23790}
CP_SERVICE_CIDR=10.96.0.0/12
# The etcd release the control plane runs (cp_init must have built it): 3.6.16 by default;
# 3.7.0 is what 1.37 pairs with (v1.37.2's cmd/kubeadm/app/constants/constants.go,
# DefaultEtcdVersion).
CP_ETCD_VERSION=${CP_ETCD_VERSION:-3.6.16}

cp_log() { echo "[control-plane] $*" >&2; }

# cp_init [COMPONENT-VERSION ...]: builds (or finds cached) binaries (default: build.sh's
# list) and exports their paths; makes $CP_DIR.
cp_init() {
  : "${CP_DIR:?CP_DIR must be set}"
  mkdir -p "$CP_DIR"/{pki,logs,run}
  : >"$CP_DIR/pids"
  local line
  while IFS= read -r line; do
    export "${line?}"
  done < <("$CP_HERE/build.sh" "$@")
}

# cp_apiserver_bin VERSION (1.35.4, 1.36.3, or another cp_init built): path of the cached kube-apiserver.
cp_apiserver_bin() {
  local var="KUBE_APISERVER_V$(echo "$1" | tr . _)"
  echo "${!var:?no kube-apiserver $1 built}"
}

_cp_cert() { # NAME CN O SIGNER EXT
  local name=$1 cn=$2 o=$3 signer=$4 ext=$5 subj="/CN=$2" pki="$CP_DIR/pki"
  [ -n "$o" ] && subj="/O=$o/CN=$cn"
  openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$pki/$name.ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$signer.crt" -CAkey "$pki/$signer.key" \
    -CAcreateserial -days 2 -sha256 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$pki/$name.ext"
}

_cp_ca() { # NAME CN
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$CP_DIR/pki/$1.key" -out "$CP_DIR/pki/$1.crt" \
    -days 2 -subj "/CN=$2" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign" 2>/dev/null
}

# cp_pki USER_CN USER_O: a throwaway kubeadm-style PKI in $CP_DIR/pki, plus a user
# certificate (user.crt) for the front-proxy identity checks and a static admin token.
cp_pki() {
  local user_cn=${1:-alice} user_o=${2:-mvproxy-testers} pki="$CP_DIR/pki"
  _cp_ca ca kubernetes
  _cp_ca front-proxy-ca front-proxy-ca
  local server_ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:10.96.0.1,IP:127.0.0.1,IP:127.0.0.2,IP:127.0.0.3,IP:127.0.0.4,IP:127.0.0.5,IP:192.0.2.2,IP:192.0.2.3,IP:192.0.2.4"
  local client_ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  _cp_cert apiserver kube-apiserver "" ca "$server_ext"
  _cp_cert front-proxy-client front-proxy-client "" front-proxy-ca "$client_ext"
  _cp_cert admin kubernetes-admin system:masters ca "$client_ext"
  _cp_cert user "$user_cn" "$user_o" ca "$client_ext"
  # A client certificate from the front-proxy CA whose CN is not an allowed name: its
  # X-Remote-User must be ignored.
  _cp_cert rogue-proxy rogue-proxy "" front-proxy-ca "$client_ext"
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  CP_ADMIN_TOKEN=$(openssl rand -hex 16)
  echo "$CP_ADMIN_TOKEN,token-admin,token-admin-uid,system:masters" >"$pki/tokens.csv"
  echo "$CP_ADMIN_TOKEN" >"$pki/admin.token"
  export CP_ADMIN_TOKEN
}

_cp_record() { echo "$1 $2" >>"$CP_DIR/pids"; }
cp_pid() { awk -v n="$1" '$1 == n {p=$2} END {print p}' "$CP_DIR/pids"; }

# cp_start_etcd: one etcd member, plain HTTP on 127.0.0.1 (loopback only).
# cp_etcd_bin: path of the cached etcd $CP_ETCD_VERSION.
cp_etcd_bin() {
  local var
  var="ETCD_V$(echo "$CP_ETCD_VERSION" | tr . _)"
  echo "${!var:?no etcd $CP_ETCD_VERSION built}"
}

cp_start_etcd() {
  "$(cp_etcd_bin)" --name cp-etcd --data-dir "$CP_DIR/run/etcd" \
    --listen-client-urls "http://127.0.0.1:$CP_ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$CP_ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((CP_ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((CP_ETCD_PORT + 1))" \
    --initial-cluster "cp-etcd=http://127.0.0.1:$((CP_ETCD_PORT + 1))" \
    --listen-metrics-urls "http://127.0.0.1:$((CP_ETCD_PORT + 2))" \
    --log-level warn >"$CP_DIR/logs/etcd.log" 2>&1 &
  _cp_record etcd $!
  local i
  for i in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$((CP_ETCD_PORT + 2))/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  cp_log "etcd did not become healthy; see $CP_DIR/logs/etcd.log"
  return 1
}

# cp_start_apiserver NAME VERSION IP [mvp|defaults|""] [ARG...]: starts kube-apiserver VERSION
# in its own UTS namespace with host name NAME, on IP:$CP_PORT. With "mvp", upstream's Mixed
# Version Proxy is on (gate, --peer-ca-file, --peer-advertise-ip/port); without it, the peer
# proxy is not built (it needs --peer-ca-file) but 1.36's gate stays at its default. With
# "defaults", the release's default feature gates and runtime config (no --runtime-config, no
# --feature-gates): what a cluster serves unless its operator turned more on. ARGs are added
# to the server's flags (the audit log of scripts/conformance/peer-failures.sh).
cp_start_apiserver() {
  local name=$1 version=$2 ip=$3 mvp=${4:-} pki="$CP_DIR/pki" bin
  shift $(($# < 4 ? $# : 4))
  bin=$(cp_apiserver_bin "$version")
  local args=(
    --etcd-servers "http://127.0.0.1:$CP_ETCD_PORT"
    --secure-port "$CP_PORT" --bind-address "$ip" --advertise-address "$ip"
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key"
    --client-ca-file "$pki/ca.crt"
    --token-auth-file "$pki/tokens.csv"
    --service-account-issuer https://kubernetes.default.svc.cluster.local
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key"
    --service-cluster-ip-range "$CP_SERVICE_CIDR"
    --authorization-mode RBAC
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt"
    --requestheader-allowed-names front-proxy-client
    --requestheader-username-headers X-Remote-User
    --requestheader-uid-headers X-Remote-Uid
    --requestheader-group-headers X-Remote-Group
    --requestheader-extra-headers-prefix X-Remote-Extra-
    --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key"
    --profiling=false
    --v 1
  )
  # Alpha APIs are served only with their feature gates (api/all=true alone leaves them off),
  # hence AllAlpha and AllBeta: that is what makes the skew visible both ways. AllAlpha turns on
  # UnknownVersionInteroperabilityProxy in 1.35 too (1.36: beta, on by default), so both
  # releases annotate their identity Leases with their address; the peer proxy itself is only
  # built with --peer-ca-file, i.e. with "mvp".
  if [ "$mvp" != defaults ]; then
    args+=(--runtime-config api/all=true)
    args+=(--feature-gates AllAlpha=true,AllBeta=true,UnknownVersionInteroperabilityProxy=true)
  fi
  if [ "$mvp" = mvp ]; then
    args+=(--peer-ca-file "$pki/ca.crt" --peer-advertise-ip "$ip" --peer-advertise-port "$CP_PORT")
  fi
  # 1.37 refuses to start with a loopback --advertise-address while an endpoint reconciler
  # would write it into the kubernetes Endpoints (k8s.io/kubernetes v1.37.2,
  # pkg/controlplane/instance.go, ValidateIP; 1.36 wrote nothing and went on): on 127.0.0.x
  # that Endpoints object is not needed, so no reconciler. The conformance suite's TEST-NET
  # addresses keep the default one.
  case $ip in
    127.*) [ "$(printf '%s\n' "$version" 1.37 | sort -V | head -1)" = 1.37 ] && args+=(--endpoint-reconciler-type none) ;;
  esac
  args+=("$@")
  unshare --uts -- sh -c 'hostname "$1"; shift; exec "$@"' sh "$name" "$bin" "${args[@]}" \
    >"$CP_DIR/logs/$name-$version.log" 2>&1 &
  _cp_record "$name" $!
  echo "$name $version $ip $mvp" >"$CP_DIR/run/$name.info"
}

# cp_curl IP PATH [curl args]: as the admin user, straight to an API server.
cp_curl() {
  local ip=$1 path=$2
  shift 2
  # A User-Agent other than curl: kube-apiserver pretty-prints JSON for curl and wget.
  curl -sS --max-time 10 -A mvproxy-control-plane --cacert "$CP_DIR/pki/ca.crt" --cert "$CP_DIR/pki/admin.crt" \
    --key "$CP_DIR/pki/admin.key" "$@" "https://$ip:$CP_PORT$path"
}

# cp_wait_ready NAME IP [seconds]: until /readyz answers 200 (or the process died).
cp_wait_ready() {
  local name=$1 ip=$2 limit=${3:-120} pid i
  pid=$(cp_pid "$name")
  for i in $(seq 1 $((limit * 2))); do
    if ! kill -0 "$pid" 2>/dev/null; then
      cp_log "$name exited; last lines of its log:"
      tail -20 "$CP_DIR"/logs/"$name"-*.log >&2
      return 1
    fi
    [ "$(cp_curl "$ip" /readyz -o /dev/null -w '%{http_code}' 2>/dev/null)" = 200 ] && return 0
    sleep 0.5
  done
  cp_log "$name not ready after ${limit}s"
  return 1
}

# cp_stop NAME: stops the process recorded under NAME (TERM, then KILL after 20 s).
cp_stop() {
  local name=$1 pid i
  pid=$(cp_pid "$name")
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
  fi
  awk -v n="$name" '$1 != n' "$CP_DIR/pids" >"$CP_DIR/pids.tmp" && mv "$CP_DIR/pids.tmp" "$CP_DIR/pids"
}

# cp_cleanup: stops everything recorded, newest first (API servers before etcd).
cp_cleanup() {
  [ -f "${CP_DIR:-/nonexistent}/pids" ] || return 0
  local name
  for name in $(tac "$CP_DIR/pids" | awk '{print $1}'); do
    cp_stop "$name"
  done
}

# cp_wait_mvproxy ADMIN_HOST:PORT [SECONDS]: waits until mvproxy's admin listener answers /readyz
# with 200 (every configured server fetched once or marked down: docs/configuration.md), 60 s
# by default.
cp_wait_mvproxy() {
  local admin=$1 limit=${2:-60} i
  for i in $(seq 1 $((limit * 2))); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$admin/readyz")" = 200 ] && return 0
    sleep 0.5
  done
  cp_log "mvproxy on $admin not ready after ${limit}s"
  return 1
}

# cp_mvproxy_pki_args: sets CP_MVPROXY_PKI_ARGS to mvproxy's flags for the PKI of cp_pki, as the
# shipped configs set them: the cluster CA for the API server it fronts, the serving certificate
# in, clients' certificates from the cluster CA, front-proxy identity to the API server.
cp_mvproxy_pki_args() {
  local pki="$CP_DIR/pki"
  CP_MVPROXY_PKI_ARGS=(
    --local-ca-file "$pki/ca.crt"
    --tls-cert-file "$pki/apiserver.crt" --tls-key-file "$pki/apiserver.key"
    --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key"
    --identity front-proxy --client-ca-file "$pki/ca.crt"
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client
  )
}

# cp_kubeconfig FILE SERVER_URL [token]: admin kubeconfig (client certificate, or the token).
cp_kubeconfig() {
  local file=$1 server=$2 token=${3:-} pki="$CP_DIR/pki"
  {
    echo "apiVersion: v1"
    echo "kind: Config"
    echo "clusters:"
    echo "- name: cp"
    echo "  cluster: {server: \"$server\", certificate-authority: \"$pki/ca.crt\"}"
    echo "users:"
    if [ -n "$token" ]; then
      echo "- name: admin"
      echo "  user: {token: \"$token\"}"
    else
      echo "- name: admin"
      echo "  user: {client-certificate: \"$pki/admin.crt\", client-key: \"$pki/admin.key\"}"
    fi
    echo "contexts:"
    echo "- name: cp"
    echo "  context: {cluster: cp, user: admin}"
    echo "current-context: cp"
  } >"$file"
}

# cp_rss_kib NAME: resident memory of the process, in KiB.
cp_rss_kib() {
  local pid
  pid=$(cp_pid "$1")
  awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0
}

# cp_lease_of NAME: the identity Lease name of the API server whose host name is NAME.
cp_lease_of() {
  local ip=$1 host=$2
  cp_curl "$ip" "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases?labelSelector=apiserver.kubernetes.io/identity%3Dkube-apiserver" |
    python3 -c 'import json,sys
h=sys.argv[1]
for l in json.load(sys.stdin)["items"]:
    if l["metadata"].get("labels",{}).get("kubernetes.io/hostname")==h: print(l["metadata"]["name"])' "$host"
}
