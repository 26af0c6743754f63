#!/usr/bin/env bash
# Instructions per request of log correlation: mvproxy's hand copy of the trace and span ids
# into the lines a request writes, against a `tracing` span per request under
# tracing-opentelemetry's layer (telemetry/examples/log_correlation.rs says what each mode
# does). Counted under valgrind's callgrind, so the figure does not move with the machine's
# load: the difference of REQUESTS and 6 x REQUESTS requests, per request, with 0 and 1 log
# line per request. No network. The decision it supports is in ARCHITECTURE.md ("Logs").
#
#   bench/log-correlation.sh            (REQUESTS=2000; about a minute)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=need-tools.sh
. bench/need-tools.sh
need_tools valgrind:valgrind
few=${REQUESTS:-2000}
many=$((few * 6))
cargo build --release -p mvproxy-telemetry --example log_correlation -q
bin=target/release/examples/log_correlation
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$@" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
echo "| log correlation | log lines per request | instructions per request |"
echo "| --- | --- | --- |"
for mode in hand layer; do
  for lines in 0 1; do
    a=$(count "$mode" "$few" "$lines")
    b=$(count "$mode" "$many" "$lines")
    echo "| $mode | $lines | $(((b - a) / (many - few))) |"
  done
done
