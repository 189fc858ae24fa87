#!/usr/bin/env bash
# CI phase: every fuzz target (tests/fuzz: hostlist, stage_spec, options, config, protocol,
# extract), each for STAGEHAND_FUZZ_SECONDS (default 30) on its seed corpus.
#   fuzz.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=${1:?usage: fuzz.sh BUILD_DIR}
seconds=${STAGEHAND_FUZZ_SECONDS:-30}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"$CI_ROOT/tests/fuzz/run.sh" "$build" "$seconds" 2>&1 | tee "$log" || status=$?
grep '^fuzz: ' "$log" | while read -r line; do ci_result "$line"; done
exit "$status"
