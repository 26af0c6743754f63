#!/usr/bin/env bash
# Starts a real mixed-version control plane on loopback and keeps it up until Ctrl-C:
# etcd, kube-apiserver OLD on 127.0.0.2:6443 (host name apiserver-old) and kube-apiserver NEW
# on 127.0.0.3:6443 (host name apiserver-new), both against the same etcd, with a throwaway
# kubeadm-style PKI. OLD=1.35.4 NEW=1.36.3 on etcd 3.6.16 by default; OLD=1.36.3 NEW=1.37.2
# CP_ETCD_VERSION=3.7.0 for the upgrade to 1.37. Writes $CP_DIR/admin.kubeconfig (pointing at
# the NEW server). Everything it started is stopped, by PID, when it exits.
#
# usage: up.sh [--mvp] [--check] [--dir DIR]
#   --mvp     start both API servers with upstream's Mixed Version Proxy
#             (UnknownVersionInteroperabilityProxy, --peer-ca-file, --peer-advertise-ip/port)
#   --check   exit after both are ready, printing the resident memory of each process
#   --dir     where PKI, data and logs go (default: a new temporary directory, removed at exit)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mvp="" check=0 CP_DIR=""
while [ $# -gt 0 ]; do
  case $1 in
    --mvp) mvp=mvp ;;
    --check) check=1 ;;
    --dir) CP_DIR=$2; shift ;;
    *) echo "up.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "up.sh: needs root (a UTS namespace per API server)" >&2; exit 2; }
made=""
[ -n "$CP_DIR" ] || { CP_DIR=$(mktemp -d /tmp/mvproxy-cp.XXXXXX); made=1; }
export CP_DIR
# shellcheck source=lib.sh
. "$here/lib.sh"
trap 'cp_cleanup; [ -z "$made" ] || rm -rf "$CP_DIR"' EXIT
trap 'exit 130' INT TERM

OLD=${OLD:-1.35.4} NEW=${NEW:-1.36.3}
cp_init "etcd-v$CP_ETCD_VERSION" "kube-apiserver-v$OLD" "kube-apiserver-v$NEW"
cp_pki
t0=$(date +%s.%N)
cp_start_etcd
cp_start_apiserver apiserver-old "$OLD" 127.0.0.2 "$mvp"
cp_start_apiserver apiserver-new "$NEW" 127.0.0.3 "$mvp"
cp_wait_ready apiserver-old 127.0.0.2
cp_wait_ready apiserver-new 127.0.0.3
t1=$(date +%s.%N)
cp_kubeconfig "$CP_DIR/admin.kubeconfig" "https://127.0.0.3:$CP_PORT"
cp_log "ready in $(echo "$t1 - $t0" | bc)s; kubeconfig: $CP_DIR/admin.kubeconfig; logs: $CP_DIR/logs"
for ip in 127.0.0.2 127.0.0.3; do
  cp_log "$ip /version: $(cp_curl $ip /version | jq -r .gitVersion)"
done
# Settle (post-start hooks, first lease renewals), then measure.
sleep 10
total=0
for n in etcd apiserver-old apiserver-new; do
  rss=$(cp_rss_kib $n)
  total=$((total + rss))
  printf '%-14s RSS %6d MiB\n' "$n" $((rss / 1024))
done
printf '%-14s RSS %6d MiB\n' total $((total / 1024))
[ "$check" -eq 1 ] && exit 0
cp_log "up; Ctrl-C stops it"
# wait (not a foreground sleep), so that INT and TERM run the trap at once.
sleeper=""
trap 'cp_cleanup; [ -z "$sleeper" ] || kill "$sleeper" 2>/dev/null; [ -z "$made" ] || rm -rf "$CP_DIR"' EXIT
while :; do
  sleep 3600 &
  sleeper=$!
  wait "$sleeper" || true
done
