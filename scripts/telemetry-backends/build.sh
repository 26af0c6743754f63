#!/usr/bin/env bash
# Builds the real telemetry backends the observability pack is checked against, from pinned,
# unmodified upstream Go modules, and caches each binary by version:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/mvproxy/otelcol-<version>/otelcol-mvproxy
#   ${XDG_CACHE_HOME:-$HOME/.cache}/mvproxy/jaeger-<version>/jaeger
# A cached binary is reused (a warm run builds nothing). Prints one line per component with
# the path and the seconds it took. Usage: build.sh [otelcol|jaeger]... (default: all).
#
# - otelcol: the OpenTelemetry Collector Builder (go.opentelemetry.io/collector/cmd/builder)
#   from otel-collector/builder-config.yaml, the components otel-collector/config.yaml uses.
# - jaeger: Jaeger v2 (github.com/jaegertracing/jaeger/cmd/jaeger) through the module in
#   scripts/telemetry-backends/jaeger/, which mirrors the upstream go.mod's replace directive.
#   Jaeger tags its Go module with the v1 line: the Go tag v1.73.0 is the release v2.10.0
#   (CHANGELOG.md of that tag: "v1.73.0 / v2.10.0 (2025-09-02)").
# - Tempo is not built: the Go module proxy these machines reach refuses github.com/grafana/tempo
#   (AGPL-3.0), so traces are checked in Jaeger; see scripts/conformance/README.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mvproxy"

OTELCOL_VERSION=0.139.0
JAEGER_VERSION=2.10.0        # Go module tag v1.73.0, see above
export CGO_ENABLED=0
# Go builds are heavy on two cores; stay polite to whatever else runs.
nice_cmd=(nice -n 10)

log() { printf '%s\n' "$*" >&2; }

build_otelcol() {
  local dir="$cache/otelcol-$OTELCOL_VERSION" bin
  bin="$dir/otelcol-mvproxy"
  if [ -x "$bin" ]; then echo "otelcol $OTELCOL_VERSION cached $bin 0"; return; fi
  local t0=$SECONDS
  mkdir -p "$dir"
  log "building the collector $OTELCOL_VERSION (a few minutes cold)"
  GOBIN="$dir/tools" "${nice_cmd[@]}" go install "go.opentelemetry.io/collector/cmd/builder@v$OTELCOL_VERSION"
  # The builder writes the generated sources (main.go, components.go) into output_path. Its
  # own `go mod tidy` step is skipped: the checksum database, as reached through the module
  # proxy here, lacks entries for some of these modules (servicegraphconnector and
  # otelcoltest v0.139.0 answer 404), so the resolved go.mod and go.sum are committed in
  # scripts/telemetry-backends/otelcol/ (regenerate: see its README.md) and the build is -mod=readonly
  # against them: every module is checked against a committed hash.
  rm -rf "$dir/src"
  sed "s#^\(  output_path:\).*#\1 $dir/src#" "$repo/otel-collector/builder-config.yaml" > "$dir/builder-config.yaml"
  "${nice_cmd[@]}" "$dir/tools/builder" --config="$dir/builder-config.yaml" --skip-get-modules --skip-compilation >&2
  cp "$here/otelcol/go.mod" "$here/otelcol/go.sum" "$dir/src/"
  (cd "$dir/src" && "${nice_cmd[@]}" go build -mod=readonly -trimpath -ldflags="-s -w" -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
  echo "otelcol $OTELCOL_VERSION built $bin $((SECONDS - t0))"
}

build_jaeger() {
  local dir="$cache/jaeger-$JAEGER_VERSION" bin
  bin="$dir/jaeger"
  if [ -x "$bin" ]; then echo "jaeger $JAEGER_VERSION cached $bin 0"; return; fi
  local t0=$SECONDS
  mkdir -p "$dir"
  log "building Jaeger $JAEGER_VERSION (several minutes cold)"
  (cd "$here/jaeger" && "${nice_cmd[@]}" go build -mod=readonly -trimpath -o "$bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger)
  mv "$bin.tmp" "$bin"
  echo "jaeger $JAEGER_VERSION built $bin $((SECONDS - t0))"
}

# One build of a backend at a time (.ci/run starts them in the background while the
# telemetry-pack part asks for them): a second caller waits here, then finds it cached.
locked() {
  local lock
  mkdir -p "$cache"
  exec {lock}>"$cache/$1.lock"
  flock "$lock"
  "build_$1"
  exec {lock}>&-
}

components=("$@")
[ ${#components[@]} -gt 0 ] || components=(otelcol jaeger)
for c in "${components[@]}"; do
  case "$c" in
    otelcol) locked otelcol ;;
    jaeger) locked jaeger ;;
    *) log "unknown component: $c (otelcol, jaeger)"; exit 2 ;;
  esac
done
