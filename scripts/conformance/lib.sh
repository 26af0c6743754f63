# Shared by the parts of scripts/conformance.sh: how a check's result is recorded.
# One line per check in $CONFORMANCE_RESULTS: part, check, PASS|FAIL, detail (tab-separated).

# check NAME DETAIL COMMAND...: runs COMMAND, records PASS if it succeeds, FAIL otherwise.
check() {
  local name=$1 detail=$2
  shift 2
  if "$@"; then
    record "$name" PASS "$detail"
  else
    record "$name" FAIL "$detail"
  fi
}

# record NAME PASS|FAIL DETAIL
record() {
  printf '%s\t%s\t%s\t%s\n' "${CONFORMANCE_PART:-?}" "$1" "$2" "$(echo "$3" | tr '\t\n' '  ')" \
    >>"${CONFORMANCE_RESULTS:?run through scripts/conformance.sh}"
  echo "[${CONFORMANCE_PART:-?}] $2 $1: $3" >&2
}
