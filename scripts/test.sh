#!/usr/bin/env bash
# Runs every test of the workspace on a fresh machine: checks the tools the end-to-end tests
# use, builds the mvproxy binary they start, then runs unit and end-to-end tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# The end-to-end tests drive the real kubectl; they fail (not skip) without it.
if ! command -v kubectl >/dev/null 2>&1; then
  echo "kubectl is required at /usr/bin/kubectl for the end-to-end tests" >&2
  exit 1
fi

# promtool and Prometheus (Debian's package) check the exposition and store exemplars.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq prometheus >/dev/null
fi

cargo build --workspace --locked --bins
cargo test --workspace --locked "$@"
