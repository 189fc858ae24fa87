#!/usr/bin/env bash
# Starts the local two-node cluster with the built plugin, runs the bats cluster tests, and
# always stops the cluster. Fails when any test fails or is skipped.
# Usage: run.sh BUILD_DIR [FILE.bats ...]   (default: every .bats file here that the cluster's
# Slurm release runs: tests/cluster/files_for.sh)
# (STAGEHAND_SLURM_PREFIX: the Slurm to run, the one BUILD_DIR was configured against; see cluster.sh)
# (STAGEHAND_BATS_FILTER: only the tests whose names match this regex, as bats --filter; for working
# on one test, never in CI)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [FILE.bats ...]}" && pwd)
shift
files=("$@")

[ "$(id -u)" -eq 0 ] || { echo "cluster tests: must run as root (they start slurmd)" >&2; exit 1; }
# Run the Slurm the build was configured against (cmake -DSLURM_ROOT), unless told otherwise.
built_for=$(sed -n 's/^SLURM_ROOT:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
[ "$built_for" = /usr ] && built_for=
if [ -z "${STAGEHAND_SLURM_PREFIX+set}" ]; then
  export STAGEHAND_SLURM_PREFIX=$built_for
elif [ "${STAGEHAND_SLURM_PREFIX%/}" != "$built_for" ]; then
  echo "cluster tests: $build is built against SLURM_ROOT='$built_for', STAGEHAND_SLURM_PREFIX='$STAGEHAND_SLURM_PREFIX'" >&2
  exit 1
fi
# Stopped by a signal (Ctrl-C, CI ending a lane), it still stops the cluster: the EXIT trap runs on
# the way out of a trapped signal, not on a signal's default action. A TERM or HUP (CI stopping a
# lane: its whole process group) has ended the reader of our output too (tee), so the stop then
# writes nowhere rather than die of SIGPIPE halfway.
trap 'exit 130' INT
trap 'exec >/dev/null 2>&1; exit 143' TERM
trap 'exec >/dev/null 2>&1; exit 129' HUP
trap '"$here/cluster.sh" stop' EXIT
"$here/cluster.sh" start "$build/plugin/stagehand.so"
eval "$("$here/cluster.sh" env)"
if [ ${#files[@]} -eq 0 ]; then # every file this release runs (files_for.sh says which it leaves out)
  mapfile -t files < <("$here/files_for.sh" "$("$STAGEHAND_SLURM_BIN/sinfo" -V | cut -d' ' -f2)" | sed "s|^|$here/|")
fi

export PATH="$build/helper:$PATH"
export STAGEHAND_BUILD_DIR=$build
export STAGEHAND_SOURCE_DIR=$(cd "$here/../.." && pwd)
log=$(mktemp)
status=0
bats --tap --timing ${STAGEHAND_BATS_FILTER:+--filter "$STAGEHAND_BATS_FILTER"} "${files[@]}" | tee "$log" || status=$?
passed=$(grep -c '^ok ' "$log" || true)
failed=$(grep -c '^not ok ' "$log" || true)
skipped=$(grep -c '^ok .* # skip' "$log" || true)
rm -f "$log"
echo "cluster (Slurm $("$STAGEHAND_SLURM_BIN/sinfo" -V | cut -d' ' -f2)): $((passed - skipped)) passed, $failed failed, $skipped skipped"
if [ "$skipped" -gt 0 ]; then
  echo "cluster tests: a skipped cluster test counts as a failure" >&2
  exit 1
fi
[ "$passed" -gt 0 ] || { echo "cluster tests: no test ran" >&2; exit 1; }
exit "$status"
