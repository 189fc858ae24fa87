#!/usr/bin/env bash
# Starts the local two-node cluster with the built plugin, runs the bats cluster tests, and
# always stops the cluster. Fails when any test fails or is skipped. Usage: run.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)

[ "$(id -u)" -eq 0 ] || { echo "cluster tests: must run as root (they start slurmd)" >&2; exit 1; }
"$here/cluster.sh" start "$build/plugin/stagehand.so"
trap '"$here/cluster.sh" stop' EXIT
eval "$("$here/cluster.sh" env)"

export PATH="$build/helper:$PATH"
export STAGEHAND_BUILD_DIR=$build
export STAGEHAND_SOURCE_DIR=$(cd "$here/../.." && pwd)
log=$(mktemp)
status=0
bats --tap "$here"/*.bats | tee "$log" || status=$?
passed=$(grep -c '^ok ' "$log" || true)
failed=$(grep -c '^not ok ' "$log" || true)
skipped=$(grep -c '^ok .* # skip' "$log" || true)
rm -f "$log"
echo "cluster: $((passed - skipped)) passed, $failed failed, $skipped skipped"
if [ "$skipped" -gt 0 ]; then
  echo "cluster tests: a skipped cluster test counts as a failure" >&2
  exit 1
fi
[ "$passed" -gt 0 ] || { echo "cluster tests: no test ran" >&2; exit 1; }
exit "$status"
