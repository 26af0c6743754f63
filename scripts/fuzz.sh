#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ for a bounded time (default 25 s each) with cargo-fuzz on the
# nightly toolchain, starting from the committed corpora in fuzz/corpus/ (read only: what the
# fuzzers find goes to a temporary directory), and prints, per target, how long it ran and how
# many inputs it executed. Exits 1 if any target found a crash (its input is kept and named:
# make it a regression test, see fuzz/README.md), 2 if the tools are missing.
#
#   scripts/fuzz.sh            # every target, 25 s each
#   scripts/fuzz.sh 300 merge  # one target, 5 minutes
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-25}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(classify accept discovery merge identity config kubeconfig peers)
fi
if ! rustup toolchain list | grep -q '^nightly'; then
  echo "fuzz: a nightly toolchain is required (rustup toolchain install nightly)" >&2
  exit 2
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz is required (cargo install cargo-fuzz --locked)" >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nice -n 10 cargo +nightly fuzz build --fuzz-dir fuzz -O >&2
found=0
printf '%-12s %8s %12s %10s %s\n' target seconds executions exec/s result
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" "$work/artifacts/$t"
  log="$work/$t.log"
  status=ok
  # -rss_limit_mb: a parser must not need more than this for any input
  if ! cargo +nightly fuzz run --fuzz-dir fuzz -O "$t" "$work/$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$work/artifacts/$t/" -print_final_stats=1 >"$log" 2>&1; then
    status=CRASH
    found=1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  took=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  printf '%-12s %8s %12s %10s %s\n' "$t" "${took:-$seconds}" "${runs:-?}" "${rate:-?}" "$status"
  if [ "$status" = CRASH ]; then
    mkdir -p fuzz/artifacts
    cp -r "$work/artifacts/$t" fuzz/artifacts/ 2>/dev/null || true
    grep -B2 -A30 -m1 -E 'panicked|ERROR: libFuzzer|SUMMARY' "$log" >&2 || tail -40 "$log" >&2
    echo "fuzz: $t crashed; the input is in fuzz/artifacts/$t/" >&2
  fi
done
exit "$found"
