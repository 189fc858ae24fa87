#!/usr/bin/env bash
# CI phase: the whole cluster suite against the Slurm the build was configured for (a real
# slurmctld and two slurmd of that release; see tests/cluster/run.sh).
#   cluster.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=${1:?usage: cluster.sh BUILD_DIR}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"$CI_ROOT/tests/cluster/run.sh" "$build" 2>&1 | tee "$log" || status=$?
counts=$(grep -E '^cluster \(Slurm ' "$log" | tail -n1 || true)
ci_result "${counts:-cluster ($build): no result line}"
[ "$status" -eq 0 ] || ci_failed_tests "$log"
exit "$status"
