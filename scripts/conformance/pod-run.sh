#!/usr/bin/env bash
# Runs a command of an unpacked image filesystem the way a container runtime would run it,
# where `podman run` cannot (crun needs cgroups and rlimits this machine kind refuses): in its
# own mount and PID namespaces, chrooted into a copy of the image's filesystem on a tmpfs, with
# /proc of its own PID namespace, a /dev holding null, zero, random and urandom only, the
# given host directories bind-mounted read-only where the pod mounts its volumes, the root
# filesystem then remounted read-only (readOnlyRootFilesystem), as UID:GID, with the given
# environment only. Nothing else of the host is visible. Must run as root; the network
# namespace is the caller's (hostNetwork).
#
# usage: pod-run.sh ROOTFS UID:GID [-v HOST_DIR:MOUNT_PATH | -e NAME=VALUE ...] -- COMMAND [ARGS...]
#        COMMAND is a path inside the image (its entrypoint).
set -euo pipefail
if [ -z "${POD_RUN_INSIDE:-}" ]; then
  # --kill-child: the whole pod goes when this script is signalled (by its PID).
  exec unshare --mount --pid --fork --kill-child -- env POD_RUN_INSIDE=1 "$0" "$@"
fi
rootfs=$1 user=$2
shift 2
mounts=() envs=()
while [ $# -gt 1 ]; do
  case $1 in
    -v) mounts+=("$2"); shift 2 ;;
    -e) envs+=("$2"); shift 2 ;;
    *) break ;;
  esac
done
[ "${1:-}" = -- ] || { echo "usage: pod-run.sh ROOTFS UID:GID [-v HOST:PATH | -e NAME=VALUE ...] -- COMMAND ..." >&2; exit 2; }
shift
# The mount point: beside the image filesystem, reused (what is mounted on it is this
# namespace's only), so nothing is left behind on the host.
new="${rootfs%/}.root"
mkdir -p "$new"
# Mounts made here are private to this namespace and vanish with it.
mount --make-rprivate /
mount -t tmpfs -o size=64m,mode=0755 pod-root "$new"
cp -a "$rootfs/." "$new/"
mkdir -p "$new/proc" "$new/dev"
mount -t proc proc "$new/proc"
mount -t tmpfs -o mode=0755,nosuid,size=64k pod-dev "$new/dev"
for d in null zero random urandom; do
  touch "$new/dev/$d"
  mount --bind "/dev/$d" "$new/dev/$d"
done
for m in "${mounts[@]}"; do
  src=${m%%:*} dst=${m#*:}
  mkdir -p "$new$dst"
  mount --bind "$src" "$new$dst"
  mount -o remount,bind,ro "$new$dst"
done
mount -o remount,ro "$new"
chroot=$(command -v chroot)
exec env -i "${envs[@]}" "$chroot" --userspec="$user" "$new" "$@"
