# Sourced by the bench scripts: need_tools COMMAND:PACKAGE ... installs (apt) the Debian package
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
