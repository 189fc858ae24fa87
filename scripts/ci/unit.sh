#!/usr/bin/env bash
# CI phase: the unit tests (ctest) of a build; none may be skipped (CI runs as root).
#   unit.sh BUILD_DIR [EXCLUDE WHY]   EXCLUDE: a ctest -E regex of tests not run here, WHY: the
#                                      reason, which the result line gives with their names
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=${1:?usage: unit.sh BUILD_DIR [EXCLUDE WHY]}
exclude=${2:-}
why=${3:-}
[ -z "$exclude" ] || [ -n "$why" ] || ci_die "unit.sh: tests left out need a reason"
label="Slurm $(sed -n 's/^STAGEHAND_SLURM_VERSION:INTERNAL=//p' "$build/CMakeCache.txt")"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
(cd "$build" && ctest --output-on-failure -j"$(nproc)" ${exclude:+-E "$exclude"}) | tee "$log" || status=$?
[ "$status" -eq 0 ] || { ci_failed_tests "$log"; ci_die "unit tests failed (above)"; }
if grep -q '\*\*\*Skipped\|Not Run' "$log"; then
  ci_die "unit tests were skipped although running as root"
fi
line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -n1)
total=$(echo "$line" | sed -E 's/.*out of ([0-9]+).*/\1/')
hostlist=$(cd "$build" && tests/unit/stagehand_unit_tests --gtest_filter='HostlistVsSlurm.TenThousand*' | grep '^hostlist:' || true)
left_out=
if [ -n "$exclude" ]; then
  left_out="; not run here: $(cd "$build" && ctest -N -R "$exclude" | sed -n 's/^ *Test *#[0-9]*: //p' | tr '\n' ' ' | sed 's/ $//') ($why)"
fi
ci_result "unit ($label): $total passed, 0 failed, 0 skipped$left_out"
[ -z "$hostlist" ] || ci_result "  $hostlist"
