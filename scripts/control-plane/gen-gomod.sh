#!/usr/bin/env bash
# Writes the go.mod of a small module that builds an unmodified Kubernetes control-plane
# release: kube-apiserver, kube-controller-manager and kube-scheduler, each a `tool` of the
# module, so build.sh builds all three in one `go build` (they share most packages).
#
# Why: k8s.io/kubernetes cannot be `go install`ed, because its go.mod replaces every staging
# module (k8s.io/api, k8s.io/apiserver, ...) with a local directory
# (https://github.com/kubernetes/kubernetes/blob/master/go.mod, the `replace` block). A module of
# our own that requires k8s.io/kubernetes vX.Y.Z and replaces each staging module with its
# published tag v0.Y.Z builds the same source. Run once per release; commit go.mod and go.sum.
#
# usage: gen-gomod.sh 1.36.3
set -euo pipefail
ver=${1:?usage: gen-gomod.sh 1.Y.Z}
minor=${ver#1.}
dir="$(cd "$(dirname "$0")" && pwd)/kube-apiserver-v$ver"
mkdir -p "$dir"
upstream=$(curl -fsS "https://proxy.golang.org/k8s.io/kubernetes/@v/v$ver.mod")
go_line=$(printf '%s\n' "$upstream" | grep -m1 '^go ')
godebug_line=$(printf '%s\n' "$upstream" | grep -m1 '^godebug ' || true)
{
  echo "// Builds unmodified k8s.io/kubernetes v$ver cmd/kube-apiserver, cmd/kube-controller-manager"
  echo "// and cmd/kube-scheduler (see ../gen-gomod.sh)."
  echo "module mvproxy.local/control-plane/kube-apiserver-v$ver"
  echo
  echo "$go_line"
  [ -n "$godebug_line" ] && echo "$godebug_line"
  echo
  echo "require k8s.io/kubernetes v$ver"
  echo
  echo "replace ("
  # Only staging modules the upstream go.mod requires; some (sample-cli-plugin) are not published.
  for mod in $(printf '%s\n' "$upstream" | awk '$2 == "=>" && $3 ~ /^\.\/staging/ {print $1}'); do
    if printf '%s\n' "$upstream" | grep -qE "^[[:space:]]+$mod v0\.0\.0"; then
      echo "	$mod => $mod v0.$minor"
    fi
  done
  echo ")"
} >"$dir/go.mod"
cd "$dir"
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
  GOFLAGS=-mod=mod go get -tool "k8s.io/kubernetes/cmd/$cmd@v$ver"
done
go mod tidy
