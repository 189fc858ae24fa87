#!/usr/bin/env bash
# Runs every libFuzzer target long (default 600 s each; CI runs them 30 s) on its seed corpus and
# prints executions and findings per target. A finding leaves its input in BUILD_DIR/fuzz/.
# Usage: bench/fuzz.sh [BUILD_DIR] [SECONDS]   (as root: the extractor target unpacks into /tmp)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exec "$root/tests/fuzz/run.sh" "${1:-$root/build-fuzz}" "${2:-600}"
