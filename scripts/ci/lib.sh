# Shared by scripts/test.sh and the phases in scripts/ci/: logging, timing and the summary.
# Each phase records its one-line result with `ci_result`; test.sh prints them all at the end.

CI_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

ci_log() { echo "== $*"; }

# ci_summary_line TEXT: one line into the final summary (STAGEHAND_CI_SUMMARY, a file test.sh sets).
ci_summary_line() {
  if [ -n "${STAGEHAND_CI_SUMMARY:-}" ]; then echo "$*" >>"$STAGEHAND_CI_SUMMARY"; fi
}

# A phase's failure reaches the summary with its reason, since the summary may be all of a CI
# log that someone gets to read: ci_die's message, or the top-level command of the phase script
# that failed under set -e (the ERR trap, which functions do not inherit; test.sh, which records
# the failed phase itself, turns it off).
ci_die() {
  echo "ci: error: $*" >&2
  ci_summary_line "  $(basename "$0"): $*"
  exit 1
}
ci_on_error() {
  local status=$1 line=$2 command=$3
  ci_summary_line "  $(basename "$0") line $line: exit $status from: $command"
}
trap 'ci_on_error $? $LINENO "$BASH_COMMAND"' ERR

# ci_failed_tests LOG: the failed tests' lines in a bats (TAP) or ctest log, ten at most,
# into the summary.
ci_failed_tests() {
  grep -E '^not ok |^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*' "$1" 2>/dev/null |
    sed 's/^ */  failed: /' | head -n 10 | while IFS= read -r l; do ci_summary_line "$l"; done || true
}

# ci_result TEXT: a phase's result, printed and into the summary.
ci_result() {
  echo "result: $*" >&2
  ci_summary_line "$*"
}

# ci_phase NAME COMMAND...: runs one phase, prints its duration, records a failure.
ci_phase() {
  local name=$1 start=$SECONDS status=0
  shift
  echo
  ci_log "phase: $name"
  "$@" || status=$?
  printf '== phase %s: %s in %dm%02ds\n' "$name" "$([ $status -eq 0 ] && echo ok || echo "FAILED (exit $status)")" \
    $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60))
  if [ $status -ne 0 ]; then
    ci_result "FAILED: $name (exit $status)"
    return $status
  fi
}

ci_summary() {
  echo
  echo "================ summary ================"
  cat "$STAGEHAND_CI_SUMMARY" 2>/dev/null || true
  echo "========================================="
}
