#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ for a bounded time (default 30 s each) with cargo-fuzz on the
# nightly toolchain, starting from the committed corpora in fuzz/corpus/ (read only: what the
# fuzzers find goes to a temporary directory), and prints, per target, how long it ran and how
# many inputs it executed. Exits 1 if any target found a crash (its input is kept and named:
# make it a regression test, see fuzz/README.md), 2 if the tools are missing. Each run is
# also bounded from outside (`timeout`, which stops the fuzzer by its PID), so a fuzzer that
# hangs fails the script instead of holding it. FUZZ_TOOLCHAIN picks the nightly (default
# `nightly`).
#
#   scripts/fuzz.sh            # every target, 30 s each
#   scripts/fuzz.sh 300 merge  # one target, 5 minutes
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(classify accept discovery merge identity config kubeconfig peers warning)
fi
toolchain=${FUZZ_TOOLCHAIN:-nightly}
if ! rustup toolchain list | grep -q "^$toolchain"; then
  echo "fuzz: a nightly toolchain is required (rustup toolchain install $toolchain)" >&2
  exit 2
fi
if ! cargo "+$toolchain" fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz is required (cargo install cargo-fuzz --locked)" >&2
  exit 2
fi

# The sanitizer build takes minutes from cold; it is kept in the user's cache directory, like
# the Go binaries of the conformance suite, so a fresh clone (CI's) rebuilds only what changed.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mvproxy/fuzz-target}"
# Every clone compiles mvproxy-core and the targets anew there (its path is in their hash):
# what builds before this one left is removed first (scripts/prune-target.py).
scripts/prune-target.py "$CARGO_TARGET_DIR"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nice -n 10 cargo "+$toolchain" fuzz build --fuzz-dir fuzz -O >&2
found=0
crashed=()
printf '%-12s %8s %12s %10s %s\n' target seconds executions exec/s result
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" "$work/artifacts/$t" "$work/tmp"
  log="$work/$t.log"
  status=ok
  # -rss_limit_mb: a parser must not need more than this for any input
  # -timeout: no single input may take longer; `timeout`: the whole run, with room for the
  # corpus to load, then SIGKILL 10 s after SIGTERM. TMPDIR: what a target keeps in the temp
  # directory (the config target's files) goes with $work: libFuzzer exits without dropping it.
  rc=0
  TMPDIR="$work/tmp" timeout -k 10 $((seconds + 120)) nice -n 10 cargo "+$toolchain" fuzz run --fuzz-dir fuzz -O \
    "$t" "$work/$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$work/artifacts/$t/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    status=CRASH
    # 124: still running at the outer bound (SIGTERM), 137: it needed SIGKILL
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status=HUNG; fi
    found=1
    crashed+=("$t")
  fi
  # (a run too short to finish loading its corpus prints no statistics: shown as ?)
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
  took=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' | tail -1 || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
  printf '%-12s %8s %12s %10s %s\n' "$t" "${took:-$seconds}" "${runs:-?}" "${rate:-?}" "$status"
  if [ "$status" != ok ]; then
    mkdir -p fuzz/artifacts
    cp -r "$work/artifacts/$t" fuzz/artifacts/ 2>/dev/null || true
    grep -B2 -A30 -m1 -E 'panicked|ERROR: libFuzzer|SUMMARY' "$log" >&2 || tail -40 "$log" >&2
    echo "fuzz: $t: $status (exit $rc); any input is in fuzz/artifacts/$t/" >&2
  fi
done
if [ "$found" -ne 0 ]; then
  echo "fuzz: FAILED: ${crashed[*]} (inputs in fuzz/artifacts/)" >&2
fi
exit "$found"
