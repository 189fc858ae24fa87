#!/usr/bin/env bash
# The test command (CI runs it through .ci/run), as root on Debian 12. Installs the packages,
# then runs the phases in scripts/ci/ in order, stopping at the first failure, and always ends
# with a summary (pass counts per Slurm release) and the total time:
#
#   1. Debian's Slurm 22.05: build from scratch (-Werror), unit tests, fuzzing, cluster suite, then
#      ASan+UBSan: the unit tests and a subset of the cluster suite once more (scripts/ci/sanitize.sh)
#   2. Slurm 25.11.7 built from ../shared/slurm (once per machine, cached by the tarball's
#      sha256 under /var/cache/stagehand-ci): build with -DSLURM_ROOT, unit tests, cluster suite
#   3. packages: the .deb (lintian, systemd-analyze, man -l), installed and used by a two-node
#      job, purged; the RPM from the source tarball
#
# A phase is a script in scripts/ci/ taking the build directory; add one with another ci_phase
# line. Variables: STAGEHAND_BUILD_DIR (default build-test; Slurm 25.11's is the same with
# -slurm25.11), STAGEHAND_CLUSTER_DIR, STAGEHAND_CLUSTER_PORT and STAGEHAND_TEST_USER (the test
# cluster, see tests/cluster/cluster.sh), STAGEHAND_FUZZ_SECONDS, STAGEHAND_CI_CACHE.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ci=$root/scripts/ci
source "$ci/lib.sh"
trap - ERR # a failed phase is recorded by ci_phase

[ "$(id -u)" -eq 0 ] || { echo "test.sh: run as root (security tests drop to a user; the cluster runs slurmd)" >&2; exit 1; }
build=${STAGEHAND_BUILD_DIR:-$root/build-test}
build_current=$build-slurm25.11
start=$SECONDS
export STAGEHAND_CI_SUMMARY=$(mktemp "${TMPDIR:-/tmp}/stagehand-ci-summary.XXXXXX")
trap 'ci_summary; printf "total: %dm%02ds\n" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)); rm -f "$STAGEHAND_CI_SUMMARY"' EXIT

ci_phase "install packages" "$root/scripts/install-deps.sh"

ci_phase "build (Debian's Slurm)" "$ci/build.sh" "$build"
ci_phase "unit tests (Debian's Slurm)" "$ci/unit.sh" "$build"
ci_phase "fuzzing" "$ci/fuzz.sh" "$build"
ci_phase "cluster tests (Debian's Slurm)" "$ci/cluster.sh" "$build"
ci_phase "sanitizers (ASan+UBSan: unit tests, cluster subset)" "$ci/sanitize.sh" "$build"

slurm_prefix_file=$(mktemp)
ci_phase "Slurm 25.11.7 (cached by sha256)" bash -c '"$1" >"$2"' _ "$ci/build-slurm.sh" "$slurm_prefix_file"
slurm_prefix=$(cat "$slurm_prefix_file")
rm -f "$slurm_prefix_file"
ci_phase "build (Slurm 25.11)" "$ci/build.sh" "$build_current" -DSLURM_ROOT="$slurm_prefix"
ci_phase "unit tests (Slurm 25.11)" "$ci/unit.sh" "$build_current"
ci_phase "cluster tests (Slurm 25.11)" "$ci/cluster.sh" "$build_current"

ci_phase "package: .deb" "$ci/package-deb.sh" "$build"
ci_phase "package: install, job, purge" "$ci/package-install.sh" "$build"
ci_phase "package: RPM" "$ci/package-rpm.sh" "$build"
