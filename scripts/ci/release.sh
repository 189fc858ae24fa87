#!/usr/bin/env bash
# CI phase: one more Slurm release from the README's support table, beside the two the full
# suite runs on (Debian's 22.05 and 25.11.7): a build against it, its unit tests, and a cluster
# smoke on a two-node cluster of that release.
#   release.sh VERSION BUILD_DIR build   Slurm VERSION (scripts/ci/build-slurm.sh: cached by
#                                        sha256), stagehand built against it in BUILD_DIR, its
#                                        unit tests (but the daemon's load tests: see below)
#   release.sh VERSION BUILD_DIR smoke   the smoke (the tests named in ci_smoke_tests, lib.sh) on
#                                        the cluster STAGEHAND_CLUSTER_DIR/_PORT/_TEST_USER name,
#                                        with the daemons and clients of that release
# VERSION "22.05" is Debian's Slurm in /usr (nothing to build).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
version=${1:?usage: release.sh VERSION BUILD_DIR build|smoke}
build=${2:?usage: release.sh VERSION BUILD_DIR build|smoke}
what=${3:?usage: release.sh VERSION BUILD_DIR build|smoke}

case "$what" in
  build)
    if [ "$version" = 22.05 ]; then
      args=()
    else
      prefix=$("$CI_ROOT/scripts/ci/build-slurm.sh" "$version")
      args=(-DSLURM_ROOT="$prefix")
    fi
    "$CI_ROOT/scripts/ci/build.sh" "$build" "${args[@]}"
    # The daemon's load tests have no Slurm code in them: run in the 22.05 and 25.11 phases (the
    # latency test in 22.05's only), not again here, where they would share the CPU with five lanes.
    "$CI_ROOT/scripts/ci/unit.sh" "$build" '^daemon_(limits|latency)$' \
      "the daemon under load, no Slurm code: run with Slurm 22.05 and 25.11"
    ;;
  smoke)
    mapfile -t files < <(ci_smoke_tests files)
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    STAGEHAND_BATS_FILTER=$(ci_smoke_tests filter) "$CI_ROOT/scripts/ci/cluster.sh" "$build" "${files[@]}" | tee "$log"
    # A renamed test would leave the smoke smaller without failing it.
    planned=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$log" | head -n1)
    [ "${planned:-0}" -eq "${#CI_SMOKE[@]}" ] ||
      ci_die "the smoke ran ${planned:-no} tests, not the ${#CI_SMOKE[@]} that CI_SMOKE (scripts/ci/lib.sh) names: a test was renamed?"
    ;;
  *) ci_die "release.sh: build or smoke, not '$what'" ;;
esac
