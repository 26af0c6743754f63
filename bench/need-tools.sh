# Sourced by the bench scripts. need_tools COMMAND:PACKAGE ... installs (apt) the Debian package
# of each command that is not on PATH, all in one apt-get call.
need_tools() {
  local missing=() tool
  for tool in "$@"; do
    command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
  done
  if ((${#missing[@]})); then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# need_oha: the pinned oha (HTTP/1.1 and HTTP/2 load with fixed rates and bursts), built with cargo
# when missing or another version.
OHA_VERSION=1.16.0
need_oha() {
  if ! command -v oha >/dev/null || [[ "$(oha --version)" != *"$OHA_VERSION"* ]]; then
    cargo install oha --version "$OHA_VERSION" --locked -q
  fi
}

# release_mvproxy: builds the binary the image ships (release, optimised with the profile of
# scripts/pgo-profile.sh: root and Go needed) and prints its path; MVPROXY_PGO=0 builds and
# prints the plain release binary instead (`cargo build --release -p mvproxy`, as the demo runs it).
release_mvproxy() {
  local triple=x86_64-unknown-linux-gnu profile
  case ${MVPROXY_PGO:-1} in
    0)
      cargo build --release --locked -p mvproxy --bin mvproxy -q >&2
      echo target/release/mvproxy
      ;;
    1)
      profile=$(scripts/pgo-profile.sh)
      RUSTFLAGS="-Cprofile-use=$profile" cargo build --release --locked -p mvproxy --bin mvproxy -q --target "$triple" >&2
      echo "target/$triple/release/mvproxy"
      ;;
    *) echo "MVPROXY_PGO must be 0 or 1, not '$MVPROXY_PGO'" >&2; return 2 ;;
  esac
}
