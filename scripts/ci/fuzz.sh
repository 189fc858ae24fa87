#!/usr/bin/env bash
# CI phase: the fuzz targets, bounded (STAGEHAND_FUZZ_SECONDS, default 30).
#   fuzz.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=${1:?usage: fuzz.sh BUILD_DIR}
seconds=${STAGEHAND_FUZZ_SECONDS:-30}
"$CI_ROOT/tests/fuzz/run.sh" "$build" "$seconds"
ci_result "fuzz: hostlist ${seconds}s, no finding"
