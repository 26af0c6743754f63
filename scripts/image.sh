#!/usr/bin/env bash
# Builds the mvproxy container image from this checkout, with Debian's podman (installed as
# root when missing, like scripts/test.sh installs prometheus):
#   1. the static, stripped release binary of scripts/release-binary.sh (profile-guided from a
#      training run on a real control plane: needs root and Go; MVPROXY_PGO=0 builds without
#      it, for machines that have neither), checked to have no interpreter and no shared
#      library, and to run;
#   2. `podman build --storage-driver vfs` of Containerfile (FROM scratch) over a context
#      holding that binary only, labelled with the version, the commit and the source;
#   3. with --export DIR, the image's filesystem unpacked into DIR (how the conformance suite
#      runs the image here, where `podman run` cannot: see docs/conformance.md).
# What is unchanged is reused: cargo's incremental build, podman's layer cache (the COPY layer
# is keyed by the binary's content), and an export whose image ID has not changed.
#
# usage: scripts/image.sh [--export DIR]
# env:   IMAGE                name:tag (default mvproxy:<workspace version>)
#        MVPROXY_GIT_COMMIT   the commit to record when there is no .git (default: git rev-parse HEAD)
#        MVPROXY_SOURCE_URL   the source label (default: the origin remote's URL, else "unknown")
#        MVPROXY_PGO          0: no profile-guided optimisation (default 1; scripts/release-binary.sh)
# Prints the image name, its ID and its size; exits non-zero if any step or check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export_dir=""
while [ $# -gt 0 ]; do
  case $1 in
    --export) export_dir=${2:?--export needs a directory}; shift 2 ;;
    *) echo "usage: scripts/image.sh [--export DIR]" >&2; exit 2 ;;
  esac
done

log() { echo "[image] $*" >&2; }

if ! command -v podman >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "podman is required: apt-get install -y podman (as root)" >&2
    exit 1
  fi
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends podman
fi
# vfs: the only storage driver that works here without fuse-overlayfs or kernel overlay in a
# nested container; every podman call names it (the store is per driver).
pm() { podman --storage-driver vfs "$@"; }

version=$(cargo metadata --no-deps --format-version 1 --locked |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "mvproxy"))')
revision=${MVPROXY_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
source_url=${MVPROXY_SOURCE_URL:-$(git remote get-url origin 2>/dev/null || echo unknown)}
image=${IMAGE:-mvproxy:$version}

# ---- 1. the static binary ---------------------------------------------------------------------
log "building the static binary (scripts/release-binary.sh) ..."
t0=$(date +%s)
bin=$(MVPROXY_GIT_COMMIT=$revision scripts/release-binary.sh)
log "binary built in $(( $(date +%s) - t0 ))s: $(stat -c %s "$bin") bytes"
# Static: no program interpreter (PT_INTERP) and no shared library (DT_NEEDED) to load.
if LC_ALL=C readelf -lW "$bin" | grep -q 'INTERP' || LC_ALL=C readelf -dW "$bin" | grep -q '(NEEDED)'; then
  echo "image: $bin is not static:" >&2
  readelf -dW "$bin" | grep NEEDED >&2 || true
  exit 1
fi
if LC_ALL=C readelf -SW "$bin" | grep -q '\.debug_'; then
  echo "image: $bin still carries debug sections" >&2
  exit 1
fi
got=$("$bin" --version)
[ "$got" = "mvproxy $version (commit $revision)" ] || { echo "image: --version says '$got'" >&2; exit 1; }

# ---- 2. the image -----------------------------------------------------------------------------
ctx="$root/target/image/context"
mkdir -p "$ctx"
# The context holds the binary only (a copy: podman hashes it for the layer cache).
cmp -s "$bin" "$ctx/mvproxy" 2>/dev/null || install -m 0755 "$bin" "$ctx/mvproxy"
log "podman build $image ..."
t0=$(date +%s)
pm build --quiet --layers -f "$root/Containerfile" \
  --build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg SOURCE="$source_url" \
  -t "$image" "$ctx" >/dev/null
id=$(pm image inspect --format '{{.Id}}' "$image")
size=$(pm image inspect --format '{{.Size}}' "$image")
log "image built in $(( $(date +%s) - t0 ))s"
echo "image $image"
echo "id $id"
echo "size $size bytes ($(( size / 1024 / 1024 )) MiB, uncompressed)"

# ---- 3. the filesystem, unpacked ---------------------------------------------------------------
if [ -n "$export_dir" ]; then
  if [ "$(cat "$export_dir.image-id" 2>/dev/null)" = "$id" ]; then
    log "export in $export_dir is of this image already"
  else
    rm -rf "$export_dir"
    mkdir -p "$export_dir"
    # `podman create` prepares a container without starting it (no runtime involved).
    cid=$(pm create "$image")
    pm export "$cid" | tar -x -C "$export_dir"
    pm rm "$cid" >/dev/null
    # Beside the filesystem, not in it: which image it came from, and its config.
    echo "$id" >"$export_dir.image-id"
    pm image inspect --format '{{json .Config}}' "$image" >"$export_dir.config.json"
    log "filesystem exported to $export_dir"
  fi
fi
