#!/usr/bin/env bash
# Runs every test of the workspace on a fresh machine: checks (or installs) the tools the
# end-to-end tests use, builds the mvproxy binary they start, then runs unit and end-to-end
# tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# The end-to-end tests drive the real kubectl; they fail (not skip) without it.
if ! command -v kubectl >/dev/null 2>&1; then
  echo "kubectl is required at /usr/bin/kubectl for the end-to-end tests" >&2
  exit 1
fi

# The observability tests run promtool and a real Prometheus (Debian's `prometheus` package);
# they fail, not skip, without them. Installed once, as root, only when missing.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "promtool and prometheus are required: apt-get install -y prometheus (as root)" >&2
    exit 1
  fi
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus
fi

cargo build --workspace --locked --bins
cargo test --workspace --locked "$@"
