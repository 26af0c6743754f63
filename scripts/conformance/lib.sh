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

# conformance_pair: the two releases the parts run (CONFORMANCE_PAIR=OLD:NEW; default the newest
# pair, 1.36.3:1.37.2). Sets OLD and NEW; TARGET, the release readiness is judged against (NEW's
# minor); CP_ETCD_VERSION, the etcd the pair runs on (exported for scripts/control-plane/lib.sh);
# the skew resource, scheduling.k8s.io workloads of a version only NEW serves (SKEW_NEW_V) and one
# only OLD serves (SKEW_OLD_V), with every API on; COMPONENTS, what build.sh must build for it.
conformance_pair() {
  CONFORMANCE_PAIR=${CONFORMANCE_PAIR:-1.36.3:1.37.2}
  OLD=${CONFORMANCE_PAIR%%:*} NEW=${CONFORMANCE_PAIR##*:}
  case $CONFORMANCE_PAIR in
    1.35.4:1.36.3) SKEW_NEW_V=v1alpha2 SKEW_OLD_V=v1alpha1 CP_ETCD_VERSION=3.6.16 ;;
    1.36.3:1.37.2) SKEW_NEW_V=v1beta1 SKEW_OLD_V=v1alpha2 CP_ETCD_VERSION=3.7.0 ;;
    *)
      record "release pair" FAIL "CONFORMANCE_PAIR=$CONFORMANCE_PAIR: the known pairs are 1.35.4:1.36.3 and 1.36.3:1.37.2"
      exit 1
      ;;
  esac
  export CONFORMANCE_PAIR CP_ETCD_VERSION
  TARGET=${NEW%.*}
  COMPONENTS=("etcd-v$CP_ETCD_VERSION" "kube-apiserver-v$OLD" "kube-apiserver-v$NEW")
}
