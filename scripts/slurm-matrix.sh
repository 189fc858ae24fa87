#!/usr/bin/env bash
# The Slurm release matrix, for developers and for sites checking their own Slurm: for each
# release, stagehand built against it (-Werror), its unit tests, and the cluster smoke on a
# two-node cluster of that release (scripts/ci/release.sh: --tmpdir, --stage-data through the
# daemon, --ddp-env with PyTorch's all_reduce, a heterogeneous step, --stage-out), one release
# after the other; then a table. As root on Debian 12, after scripts/install-deps.sh.
#
#   scripts/slurm-matrix.sh                every release of the README's support table: 22.05
#                                          (Debian's, in /usr) and each pinned in
#                                          scripts/slurm-sources.txt (built once per machine)
#   scripts/slurm-matrix.sh 24.11.7 ...    only those
#
# Builds go to build-matrix-VERSION/; the test cluster to STAGEHAND_CLUSTER_DIR (default
# /tmp/stagehand-matrix), ports STAGEHAND_CLUSTER_PORT (default 47517), user STAGEHAND_TEST_USER
# (default stagehand-matrix). Exit status 0 only when every release passed both.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/ci/lib.sh"
trap - ERR
[ "$(id -u)" -eq 0 ] || { echo "slurm-matrix.sh: run as root (the cluster runs slurmd)" >&2; exit 1; }

releases=("$@")
if [ ${#releases[@]} -eq 0 ]; then
  releases=(22.05)
  mapfile -t -O 1 releases < <(awk '!/^#/ && NF { print $1 }' "$root/scripts/slurm-sources.txt" | sort -V)
fi
export STAGEHAND_CLUSTER_DIR=${STAGEHAND_CLUSTER_DIR:-/tmp/stagehand-matrix}
export STAGEHAND_CLUSTER_PORT=${STAGEHAND_CLUSTER_PORT:-47517}
export STAGEHAND_TEST_USER=${STAGEHAND_TEST_USER:-stagehand-matrix}
ci_use_ccache

rows=()
failed=0
for v in "${releases[@]}"; do
  build=$root/build-matrix-$v
  start=$SECONDS
  built=failed smoke="not run"
  echo "== Slurm $v: build and unit tests ($build)"
  if STAGEHAND_CI_SUMMARY= "$root/scripts/ci/release.sh" "$v" "$build" build; then
    built=passed
    echo "== Slurm $v: cluster smoke"
    if STAGEHAND_CI_SUMMARY= "$root/scripts/ci/release.sh" "$v" "$build" smoke; then smoke=passed; else smoke=failed; fi
  fi
  [ "$built" = passed ] && [ "$smoke" = passed ] || failed=1
  rows+=("$(printf '%-10s %-22s %-8s %s' "$v" "$built" "$smoke" "$(ci_mmss $((SECONDS - start)))")")
done
echo
printf '%-10s %-22s %-8s %s\n' release "build, unit tests" smoke time
printf '%s\n' "${rows[@]}"
exit "$failed"
