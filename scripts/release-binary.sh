#!/usr/bin/env bash
# The mvproxy binary the image ships and the benches measure, built from this checkout; prints
# its path. Static (x86_64-unknown-linux-gnu, -C target-feature=+crt-static: no musl standard
# library is needed), release (fat LTO), stripped, and profile-guided
# (https://doc.rust-lang.org/rustc/profile-guided-optimization.html): an instrumented build
# (-Cprofile-generate) serves a real control plane (scripts/control-plane/train.sh), and the
# compiler inlines and lays out the code by its profile (-Cprofile-use): 16-17 % fewer
# instructions per request (bench/PERF_NOTES.md, twenty-first round). BOLT's post-link layout
# on top was measured and left out (twenty-second round).
# The profile is cached under the user's cache directory, named by the instrumented binary's
# hash: unchanged code is trained once (in each clone: the binary holds its source paths).
#
# env: MVPROXY_PGO         0: no profile-guided optimisation (a plain static release build, for
#                          machines without root or Go); 1 (default)
#      MVPROXY_GIT_COMMIT  the commit `mvproxy --version` records (default: git rev-parse HEAD)
# Needs, for the profile: root (each API server of the training runs in its own UTS
# namespace), Go, kubectl, and llvm-profdata of rustc's LLVM release (installed from Debian's
# llvm-N when missing). Progress goes to stderr, the path alone to stdout. Builds in
# ${XDG_CACHE_HOME:-$HOME/.cache}/mvproxy/image-target, so debug and release builds elsewhere
# are not disturbed and a fresh clone (CI) reuses the compiled dependencies.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mvproxy"
triple=x86_64-unknown-linux-gnu
target_dir="$cache/image-target"
log() { echo "[release-binary] $*" >&2; }
fail() { echo "release-binary: $*" >&2; exit 1; }
case ${MVPROXY_PGO:-1} in
  0 | 1) ;;
  *) echo "release-binary: MVPROXY_PGO must be 0 or 1, not '$MVPROXY_PGO'" >&2; exit 2 ;;
esac
revision=${MVPROXY_GIT_COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}

mkdir -p "$cache/pgo"
# One at a time: runs share the build directories, the cached profiles and the training's ports.
exec 9>"$cache/release-binary.lock"
flock 9

# build RUSTFLAGS TARGET_DIR COMMIT: cargo's release build of mvproxy; prints the binary's path.
# --target: the flags reach mvproxy's code and its dependencies, not build scripts or macros.
# Each new profile compiles every crate anew under another name: what builds before this one
# left is removed first (scripts/prune-target.py).
build() {
  "$root/scripts/prune-target.py" "$2"
  RUSTFLAGS="-C target-feature=+crt-static $1" CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=symbols MVPROXY_GIT_COMMIT=$3 \
    nice -n 10 cargo build --release -p mvproxy --bin mvproxy --locked -q \
    --manifest-path "$root/Cargo.toml" --target "$triple" --target-dir "$2" >&2
  echo "$2/$triple/release/mvproxy"
}

if [ "${MVPROXY_PGO:-1}" = 0 ]; then
  log "MVPROXY_PGO=0: no profile-guided optimisation"
  build "" "$target_dir" "$revision"
  exit 0
fi

# ---- llvm-profdata of the LLVM release rustc was built with (the raw profile format is LLVM's) ----
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

# Profiles of other code (other clones, older commits) are kept a week.
find "$cache/pgo" -name 'mvproxy-*.profdata' -mtime +7 -delete

# ---- the instrumented build, trained ----------------------------------------------------------
log "building the instrumented binary ($cache/pgo-target) ..."
# A fixed commit for `--version`, so that a commit that changes no code keeps the binary, hence
# the profile.
gen_bin=$(build "-Cprofile-generate=$cache/pgo/raw" "$cache/pgo-target" pgo-training)
pgo_profile="$cache/pgo/mvproxy-$(sha256sum "$gen_bin" | cut -c1-16).profdata"
if [ -s "$pgo_profile" ]; then
  log "the code is unchanged since $pgo_profile was trained"
else
  raw=$(mktemp -d /tmp/mvproxy-profiles.XXXXXX)
  "$root/scripts/control-plane/train.sh" "$gen_bin" "$raw" >&2 || { rm -rf "$raw"; fail "the training failed"; }
  compgen -G "$raw/*.profraw" >/dev/null || fail "the instrumented mvproxies wrote no profile"
  "$profdata" merge -o "$pgo_profile.tmp" "$raw"/*.profraw
  mv "$pgo_profile.tmp" "$pgo_profile"
  rm -rf "$raw"
  log "trained: $pgo_profile"
fi
log "building the profile-guided binary ($target_dir) ..."
build "-Cprofile-use=$pgo_profile" "$target_dir" "$revision"
