#!/usr/bin/env bash
# The test command: installs the Debian packages, builds from scratch in a fresh directory, runs
# the unit tests (ctest) and the cluster tests (a real two-node Slurm). Run as root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${STAGEHAND_BUILD_DIR:-$root/build-test}

[ "$(id -u)" -eq 0 ] || { echo "test.sh: run as root (security tests drop to a user; the cluster runs slurmd)" >&2; exit 1; }
"$root/scripts/install-deps.sh"
rm -rf "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTAGEHAND_WERROR=ON
cmake --build "$build" -j"$(nproc)"

echo "== unit tests"
unit_log=$(mktemp)
(cd "$build" && ctest --output-on-failure -j"$(nproc)") | tee "$unit_log"
if grep -q '\*\*\*Skipped\|Not Run' "$unit_log"; then
  echo "test.sh: unit tests were skipped although running as root" >&2
  exit 1
fi
rm -f "$unit_log"

echo "== fuzzing (bounded)"
"$root/tests/fuzz/run.sh" "$build" "${STAGEHAND_FUZZ_SECONDS:-30}"

echo "== cluster tests"
"$root/tests/cluster/run.sh" "$build"
