# Shared by scripts/test.sh and the phases in scripts/ci/: logging, timing and the summary.
# Each phase records its one-line result with `ci_result`; test.sh prints them all at the end.

CI_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

ci_log() { echo "== $*"; }
ci_die() { echo "ci: error: $*" >&2; exit 1; }

# ci_result TEXT: one line of the final summary (STAGEHAND_CI_SUMMARY, a file test.sh sets).
ci_result() {
  echo "result: $*" >&2
  if [ -n "${STAGEHAND_CI_SUMMARY:-}" ]; then echo "$*" >>"$STAGEHAND_CI_SUMMARY"; fi
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
