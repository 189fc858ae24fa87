#!/usr/bin/env bash
# CI phase: the cluster suite, or some of its files, against the Slurm the build was configured
# for (a real slurmctld and two slurmd of that release; see tests/cluster/run.sh), on the cluster
# STAGEHAND_CLUSTER_DIR / _PORT / STAGEHAND_TEST_USER name (test.sh gives each lane its own).
#   cluster.sh BUILD_DIR [FILE.bats ...]     (files relative to tests/cluster; default: all)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=${1:?usage: cluster.sh BUILD_DIR [FILE.bats ...]}
shift
paths=()
for f in "$@"; do paths+=("$CI_ROOT/tests/cluster/$f"); done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"$CI_ROOT/tests/cluster/run.sh" "$build" "${paths[@]}" 2>&1 | tee "$log" || status=$?
counts=$(grep -E '^cluster \(Slurm ' "$log" | tail -n1 || true)
ci_result "${counts:-cluster ($build): no result line}${*:+ ($*)}"
[ "$status" -eq 0 ] || ci_failed_tests "$log"
exit "$status"
