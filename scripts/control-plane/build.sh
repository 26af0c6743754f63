#!/usr/bin/env bash
# Builds, once, the pinned and unmodified control-plane binaries the conformance suite runs:
# kube-apiserver v1.35.4, v1.36.3 and v1.37.2 (k8s.io/kubernetes/cmd/kube-apiserver, with
# cmd/kube-controller-manager and cmd/kube-scheduler where the module lists them as tools, in
# the same `go build`), etcd v3.6.16 and v3.7.0 (go.etcd.io/etcd/server/v3/etcdmain) and KWOK
# v0.8.0 (sigs.k8s.io/kwok/cmd/kwok), each from the small module beside this script, whose
# go.mod and go.sum are committed.
#
# Binaries are cached by version under ${XDG_CACHE_HOME:-$HOME/.cache}/mvproxy/<component>-<version>/
# together with a hash of the inputs (go.mod, go.sum, flags), so a second run only checks hashes;
# a lock file per component beside them lets concurrent callers share one build.
#
# usage: build.sh [component-version ...]   (default: what the conformance suite's default pair
#        runs, 1.35.4 and 1.36.3 on etcd 3.6.16; e.g. build.sh kube-apiserver-v1.37.2 etcd-v3.7.0)
# prints the binary paths, one per line, as NAME=PATH (KUBE_APISERVER_V1_36_3=..., ETCD_V3_6_16=...)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mvproxy"
all=(etcd-v3.6.16 kube-apiserver-v1.36.3 kube-apiserver-v1.35.4)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

command -v go >/dev/null || { echo "build.sh: go is not installed (needs Go >= 1.26)" >&2; exit 2; }

for t in "${targets[@]}"; do
  mod="$here/$t"
  [ -f "$mod/go.mod" ] || { echo "build.sh: unknown component $t (no $mod/go.mod)" >&2; exit 2; }
  comp=${t%-v*}
  ver=${t##*-v}
  out="$cache/$t"
  bin="$out/$comp"
  case $comp in
    kube-apiserver)
      major=${ver%%.*}
      minor=${ver#*.}; minor=${minor%%.*}
      ldflags="-s -w"
      # /version reports these (hack/lib/version.sh in kubernetes/kubernetes sets the same).
      for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=v$ver -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
        ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
      done
      # Every command the module lists as a tool (gen-gomod.sh), in one invocation.
      pkgpath=$(awk '/^tool \(/ {t=1; next} t && /^\)/ {t=0} t {print $1} /^tool k8s/ {print $2}' "$mod/go.mod")
      ;;
    etcd)
      ldflags="-s -w"
      pkgpath=.
      ;;
    kwok)
      # KWOK's controller plays the kubelets of fake nodes (node Leases, pod status) with no
      # container runtime: https://github.com/kubernetes-sigs/kwok, cmd/kwok.
      ldflags="-s -w"
      pkgpath=sigs.k8s.io/kwok/cmd/kwok
      ;;
    *) echo "build.sh: no recipe for $comp" >&2; exit 2 ;;
  esac
  # One build of a component at a time (.ci/run starts them in the background while the
  # conformance parts ask for them): a second caller waits here, then finds it cached.
  mkdir -p "$cache"
  exec {lock}>"$cache/$t.lock"
  flock "$lock"
  inputs=$(cat "$mod/go.mod" "$mod/go.sum" "$mod"/*.go 2>/dev/null; echo "$ldflags"; go env GOVERSION)
  want=$(printf '%s' "$inputs" | sha256sum | cut -d' ' -f1)
  if [ -x "$bin" ] && [ "$(cat "$out/inputs.sha256" 2>/dev/null)" = "$want" ]; then
    echo "build.sh: $t cached at $bin" >&2
  else
    echo "build.sh: building $t (cold: minutes) ..." >&2
    mkdir -p "$out"
    start=$(date +%s)
    rm -rf "$out/tmp" && mkdir -p "$out/tmp"
    # shellcheck disable=SC2086 # pkgpath is a list of packages
    (cd "$mod" && CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/tmp/" $pkgpath)
    [ -x "$out/tmp/$comp" ] || mv "$out/tmp/"* "$out/tmp/$comp"
    mv "$out/tmp/"* "$out/" && rmdir "$out/tmp"
    echo "$want" >"$out/inputs.sha256"
    echo "build.sh: built $t in $(( $(date +%s) - start ))s" >&2
  fi
  exec {lock}>&-
  for p in $pkgpath; do
    [ "$p" = . ] && p=$comp
    name=$(echo "${p##*/}-v$ver" | tr 'a-z.-' 'A-Z__')
    echo "$name=$out/${p##*/}"
  done
done
