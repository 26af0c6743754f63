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

# release_mvproxy: builds the binary the image ships (scripts/release-binary.sh: static and
# profile-guided, so root and Go are needed; MVPROXY_PGO=0 the plain static release build) and
# prints its path.
release_mvproxy() { scripts/release-binary.sh; }
